// Linear layer (fla's nn.Linear): y = x W^T (+ b).
//   x [..., in], W [out, in], b [out] (optional: an undefined Tensor), y [..., out].
// Precision: x and W share a dtype (f32; bf16 with fp32 accumulation; f64 on the CPU); y
// in that dtype. The backward: dx = dy W (=, skipped when dx is not wanted; or += into an
// accumulator: linear_backward_add), dW += dy^T x (= inside a WeightGradOverwriteScope)
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

// While one is alive (on this thread), the two backwards write dW = dy^T x (GEMM beta 0: the
// old contents neither read nor kept) instead of adding into it; db still adds. The model's
// first backward after zero_grad runs in one: its zero fill skips the linear weights'
// gradients. Every weight may then take one backward inside the scope (a second would
// overwrite the first).
// The beta of a weight-gradient GEMM: 0 inside a WeightGradOverwriteScope, else 1 (for a
// linear weight's gradient formed outside the two backwards, e.g. a batched GEMM).
double weight_grad_beta();
class WeightGradOverwriteScope {
 public:
  explicit WeightGradOverwriteScope(bool on);
  ~WeightGradOverwriteScope();
  WeightGradOverwriteScope(const WeightGradOverwriteScope&) = delete;
  WeightGradOverwriteScope& operator=(const WeightGradOverwriteScope&) = delete;

 private:
  bool previous_;  // the switch as the caller left it
};

}  // namespace lt::nn
