// AdamW kernels (kernels/cpu/adamw.cpp, kernels/cuda/adamw.cu): the global gradient norm
// and the fused AdamW update over the flat arenas. Engine side: engine/optim/adamw.h.
//
// grad_norm (two launches on CUDA, deterministic):
//   1. partials[b] = sum of g_i^2 over block b's elements, b < kGradNormPartials, in f64.
//      Element i belongs to block b = i / chunk with chunk = grad_norm_chunk(n) (a multiple
//      of 4, so 16-byte aligned arenas give 16-byte aligned chunks): a fixed partition of
//      [0, n), independent of the device or the launch geometry.
//   2. norm = sqrt(sum_b partials[b]), one ordered pass over the partials (b = 0, 1, ...),
//      rounded once to the gradient dtype.
//   The CPU sums each chunk sequentially; CUDA sums a chunk with a fixed thread pattern and a
//   fixed reduction tree. Both are bit-reproducible run to run; they agree with each other to
//   f64 rounding, i.e. almost always to the bit after rounding to f32.
// update (one launch), per element i of the arenas [n]:
//   ok    = code == 0           the skip code, from device memory only (nothing is copied
//                               to the host), computed by every thread alike:
//             1  loss set and !isfinite(loss)                  (non-finite loss)
//             2  else !isfinite(norm)                          (non-finite gradient norm)
//             3  else spike_test and spike_sd > 0 and          (loss spike; in f64, the
//                (loss - spike_mean) / spike_sd > spike_zscore  training loop's rule)
//             0  else                                          (the update is applied)
//   report (when set) = {loss (NaN without one), norm, code} in f64, by one writer
//   if !ok: params and moments unchanged; *skipped += 1 (one writer)
//   scale = max_grad_norm > 0 ? min(1, max_grad_norm / (norm + 1e-6)) : 1
//   g     = grads[i] * scale
//   m     = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   p    -= lr * ( (m / bc1) / (sqrt(v / bc2) + eps) + (i < decay_end ? weight_decay * p : 0) )
//   shadow[i] = bf16(p)         when shadow is set (also on a skipped step: the shadow always
//                               equals the rounded params after the call)
//   bc1 = 1 - beta1^t and bc2 = 1 - beta2^t come from the host (t is the 1-based step).
// The CPU twin computes every element in f64 and rounds once on store; CUDA computes f32
// params in f32 (f64 params in f64).
#pragma once
#include <cstdint>

namespace lt::kern {

// Number of fixed partial sums of the grad_norm pass (the partials scratch holds this many
// f64 values).
inline constexpr int64_t kGradNormPartials = 1024;

// Elements per grad_norm partial: ceil(n / kGradNormPartials) rounded up to a multiple of 4.
constexpr int64_t grad_norm_chunk(int64_t n) {
  const int64_t c = (n + kGradNormPartials - 1) / kGradNormPartials;
  return (c + 3) / 4 * 4;
}

enum class AdamWOp : uint8_t { grad_norm, update };

struct AdamWParams {
  int64_t n = 0;  // elements in every arena
  // grad_norm: grads -> partials (f64 scratch [kGradNormPartials]) -> norm (scalar, grads' dtype).
  // update: reads grads and norm.
  const void* grads = nullptr;
  double* partials = nullptr;
  void* norm = nullptr;
  // update
  void* params = nullptr;
  void* m = nullptr;
  void* v = nullptr;
  void* shadow = nullptr;      // optional bf16 [n]
  int32_t* skipped = nullptr;  // i32 scalar
  int64_t decay_end = 0;
  double lr = 0.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0, max_grad_norm = 0.0;
  double bc1 = 1.0, bc2 = 1.0;  // 1 - beta1^t, 1 - beta2^t
  // Optional step gate (update): the step's loss (scalar, the arenas' dtype) and the
  // loss-spike test; report: f64 [3] written with loss, norm and the skip code.
  const void* loss = nullptr;
  bool spike_test = false;
  double spike_mean = 0.0, spike_sd = 0.0, spike_zscore = 0.0;
  double* report = nullptr;
};

// Skip codes of the update (the report's third value).
enum class SkipCode : int32_t { applied = 0, nonfinite_loss = 1, nonfinite_norm = 2, loss_spike = 3 };

}  // namespace lt::kern
