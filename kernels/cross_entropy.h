// The cross-entropy row kernel (engine: engine/nn/cross_entropy.h, which wraps it in the
// chunked LM head; CPU: kernels/cpu/cross_entropy.cpp, CUDA: kernels/cuda/cross_entropy.cu).
//
// Per row r of logits z [n, V] (row stride ld), target t = targets[r]:
//   m = max_j z_j, lse = m + log sum_j exp(z_j - m)
//   row_loss[r] = lse - z_t                                    (0 when t == ignore_index)
//   write_grad: z_j <- (exp(z_j - m) / sum - [j == t]) * inv_count   in place (0 on
//               ignored rows)
//   correct (optional): 1 when argmax_j z_j == t (first index of the max), else 0; -1 on
//               ignored rows
// Logits f32, bf16 (the bf16 mode's: read as f32, dlogits rounded to bf16 once) or f64
// (reference runs); row_loss in the compute type (f32 for f32 and bf16 logits, else f64).
// A target outside [0, V) other than ignore_index: the CPU kernel throws naming it; the
// CUDA kernel writes NaN into that row's loss (and gradient), so the reported loss is NaN.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace lt::kern {

struct CrossEntropyParams {
  int64_t n = 0, V = 0;
  void* logits = nullptr;  // [n, V], row stride ld; overwritten by dlogits when write_grad
  int64_t ld = 0;
  const void* targets = nullptr;  // [n] contiguous
  DType target_dtype = DType::i64;
  int64_t ignore_index = -100;
  double inv_count = 1.0;
  // [1] f64 in the logits' memory: the scale read there instead of inv_count (a step replayed
  // from a CUDA graph gets each step's scale this way); null: inv_count.
  const double* inv_count_at = nullptr;
  bool write_grad = false;
  void* row_loss = nullptr;    // [n] contiguous, the logits' compute type (f32 for bf16)
  int32_t* correct = nullptr;  // [n] contiguous, optional
};

}  // namespace lt::kern
