// The LM head fused with softmax cross-entropy: logits are made chunk by chunk of tokens
// and never kept for the backward (the [N, V] logits of a whole batch never exist).
//
// For each chunk of `chunk_tokens` rows of x:
//   logits = x_c W^T                     [n, V] in x's dtype (bf16 x and W: fp32 accumulation,
//                                        rounded to bf16, as fla's bf16 models make them)
//   loss_c = sum over valid rows of (logsumexp(logits_r) - logits_r[target_r]) * inv_count
//   dlogits = (softmax(logits) - onehot(target)) * inv_count, in place (0 on ignored rows),
//             computed in f32 and rounded once to the logits' dtype
//   dx_c = dlogits W  (=),  dW += dlogits^T x_c
// x [N, d] (activation dtype f32 / bf16; f64 on the CPU), W [V, d]: the weight used for the
// product (f32 master, or its bf16 copy in the bf16 mode), targets [N] i32/i64; rows whose
// target == ignore_index contribute nothing. inv_count: 1 / (number of valid targets of
// the whole optimizer step), so micro-batches add up to the mean.
// The row losses are f32 (f64 for f64 x). The loss stays on the device: loss_accum is a f32 scalar tensor (shape {}) that is
// accumulated (+=) in a fixed order (deterministic); nothing here synchronises the host.
// Kernels: kernels/cross_entropy.h (the row kernel: softmax, loss, dlogits in place,
// argmax), kernels/cpu/cross_entropy.cpp, kernels/cuda/cross_entropy.cu; the products are
// lt::ops::matmul_out.
#pragma once
#include <cstdint>

#include "engine/tensor.h"

namespace lt::nn {

struct LmHeadLossArgs {
  int64_t ignore_index = -100;
  double inv_count = 1.0;
  // Optional: a [] f64 tensor on x's device holding the scale, read on the device instead of
  // inv_count (a CUDA graph replays the step with each step's scale).
  Tensor inv_count_at;
  int64_t chunk_tokens = 4096;  // rows of logits materialised at once
  // Training: dW = d loss / dW, its old contents neither read nor kept (else dW +=).
  bool overwrite_dW = false;
};

// Training: loss_accum += loss, dx = d loss / dx ([N, d], x's dtype), dW += d loss / dW
// (dW f32 [V, d], or f64 for f64 x; = with args.overwrite_dW).
void lm_head_cross_entropy_backward(const Tensor& x, const Tensor& W, const Tensor& targets, const LmHeadLossArgs& args,
                                    Tensor& loss_accum, Tensor& dx, Tensor& dW);

// Evaluation: loss_accum += loss; when `correct` is defined ([N] i32), correct[n] = 1 when
// the argmax of row n's logits equals its target, 0 otherwise (-1 on ignored rows).
void lm_head_cross_entropy_forward(const Tensor& x, const Tensor& W, const Tensor& targets, const LmHeadLossArgs& args,
                                   Tensor& loss_accum, Tensor correct = Tensor());

// Logits of selected rows (for sampling): x [n, d] -> [n, V] f32.
Tensor lm_head_logits(const Tensor& x, const Tensor& W);

}  // namespace lt::nn
