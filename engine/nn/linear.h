// Linear layer (fla's nn.Linear): y = x W^T (+ b).
//   x [..., in], W [out, in], b [out] (optional: an undefined Tensor), y [..., out].
// Precision: x and W share a dtype (f32; bf16 with fp32 accumulation; f64 on the CPU); y
// in that dtype. The backward: dx = dy W (=, skipped when dx is not wanted; or += into an
// accumulator: linear_backward_add), dW += dy^T x
// and db += sum over rows of dy, accumulated into f32 (f64) gradients straight from bf16
// operands (mixed-precision GEMM, engine/ops.h matmul_out).
#pragma once
#include "engine/tensor.h"

namespace lt::nn {

Tensor linear_forward(const Tensor& x, const Tensor& W, const Tensor& b = Tensor());
// Returns dx (undefined when need_dx is false). db may be nullptr (no bias).
Tensor linear_backward(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor& dW, Tensor* db = nullptr,
                       bool need_dx = true);
// The same, with dx added into dx_acc (contiguous, x's shape and dtype): dx_acc += dy W as one
// GEMM with beta = 1, so a sum of branches' input gradients needs no separate add pass and
// rounds once per branch.
void linear_backward_add(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor& dW, Tensor& dx_acc,
                         Tensor* db = nullptr);

}  // namespace lt::nn
