// Token embedding: out[n, :] = W[idx[n], :], and its scatter-add backward.
// idx [...] i32 or i64 (values in [0, V); the kernels check the range and fail with the
// offending value), W [V, d] f32 (f64 on the CPU), out [..., d] in `out_dtype` (W's dtype,
// or bf16 for the bf16 mode: rounded from f32).
// Backward: dW[v, :] += sum over the n with idx[n] == v of dy[n, :] (dy in the activation
// dtype, dW f32/f64), deterministic: each row of dW is summed in token order, independent
// of the launch shape (no float atomics).
// Kernels: kernels/embedding.h, kernels/cpu/embedding.cpp, kernels/cuda/embedding.cu.
#pragma once
#include "engine/tensor.h"

namespace lt::nn {

Tensor embedding_forward(const Tensor& idx, const Tensor& W, DType out_dtype);
void embedding_backward(const Tensor& dy, const Tensor& idx, Tensor& dW);

}  // namespace lt::nn
