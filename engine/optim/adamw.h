// AdamW with decoupled weight decay and global grad-norm clipping, over the flat arenas
// (engine/model: parameters, gradients and both moments are each one contiguous f32
// tensor of P elements, laid out so that the elements [0, decay_end) take weight decay
// and the rest do not).
//
// One step, all on the device, no host synchronisation:
//   norm  = sqrt(sum g^2)                          grad_norm(): a f32 scalar tensor {}
//   ok    = isfinite(norm)                         a non-finite norm skips the update: params
//                                                  and moments stay as they were, and the
//                                                  `skipped` counter (i32 scalar) is incremented;
//                                                  with a StepGate also a non-finite loss or a
//                                                  loss spike (below), decided on the device
//   scale = max_grad_norm > 0 ? min(1, max_grad_norm / (norm + 1e-6)) : 1
//   g'    = g * scale
//   m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
//   p -= lr * ( m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p  [decayed only] )
// t is the 1-based count of applied steps, kept by the caller.
// The optional bf16 shadow (the bf16 mode's GEMM weights) is rewritten from p after the update
// (also on a skipped step, so it always equals bf16(p) after the call).
// Kernels: kernels/adamw.h, kernels/cpu/adamw.cpp, kernels/cuda/adamw.cu: a sum-of-squares
// pass (fixed block partials then one ordered pass: deterministic) and one fused update launch.
#pragma once
#include <cstdint>

#include "engine/tensor.h"

namespace lt::optim {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double max_grad_norm = 1.0;  // 0: no clipping
};

// sqrt(sum of squares) of a contiguous f32 (f64) tensor, as a device scalar {} f32 (f64).
Tensor grad_norm(const Tensor& grads);

struct AdamWArenas {
  Tensor params, grads, m, v;  // contiguous [P] f32 (f64 for the CPU gradient checks)
  int64_t decay_end = 0;       // elements [0, decay_end) take weight decay
  Tensor params_bf16;          // optional [P] bf16 shadow, rewritten after the update
};

// The training loop's skip rules, decided on the device by the update (kernels/adamw.h):
// skip when the loss is non-finite, else when the norm is, else (spike_test) when
// spike_sd > 0 and (loss - spike_mean) / spike_sd > spike_zscore, in f64.
struct StepGate {
  Tensor loss;  // scalar {}, the arenas' dtype, on their device
  bool spike_test = false;
  double spike_mean = 0.0, spike_sd = 0.0, spike_zscore = 0.0;
  // Optional [3] f64 on the device: written with the loss, the norm and the skip code
  // (kern::SkipCode: 0 applied, 1 non-finite loss, 2 non-finite norm, 3 loss spike).
  Tensor report;
};

// One AdamW update with the given learning rate and 1-based step t. norm: grad_norm(grads).
// skipped: i32 scalar {} incremented (on the device) when the update is skipped.
void adamw_step(AdamWArenas& a, const AdamWConfig& cfg, double lr, int64_t t, const Tensor& norm, Tensor& skipped,
                const StepGate* gate = nullptr);

}  // namespace lt::optim
