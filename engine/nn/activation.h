// The elementwise pieces of the MLPs and the RWKV6 time-mix, forward beside backward.
// Every tensor of one call shares an activation dtype (f32, bf16; f64 on the CPU) and a
// shape (no broadcasting unless a line says so); gradients are written (=).
// Kernels: kernels/activation.h, kernels/cpu/activation.cpp, kernels/cuda/activation.cu.
#pragma once
#include "engine/tensor.h"

namespace lt::nn {

// SwiGLU (KDA's GatedMLP): h = silu(a) * b.
Tensor swiglu_forward(const Tensor& a, const Tensor& b);
struct SwigluGrads {
  Tensor da, db;
};
SwigluGrads swiglu_backward(const Tensor& dh, const Tensor& a, const Tensor& b);

// Squared ReLU (RWKV6 channel-mix key): y = relu(x)^2.
Tensor sqrelu_forward(const Tensor& x);
Tensor sqrelu_backward(const Tensor& dy, const Tensor& x);

// tanh (RWKV6's LoRA hidden layers): y = tanh(x); the backward takes the forward's output y:
// dx = dy (1 - y^2).
Tensor tanh_forward(const Tensor& x);
Tensor tanh_backward(const Tensor& dy, const Tensor& y);

// Negated exponential (RWKV6's log decay w = -exp(p)): y = -exp(x); the backward takes the
// forward's output y: dx = dy y.
Tensor neg_exp_forward(const Tensor& x);
Tensor neg_exp_backward(const Tensor& dy, const Tensor& y);

// Sigmoid gate (RWKV6 channel-mix output): y = sigmoid(r) * v.
Tensor sigmoid_mul_forward(const Tensor& r, const Tensor& v);
struct SigmoidMulGrads {
  Tensor dr, dv;
};
SigmoidMulGrads sigmoid_mul_backward(const Tensor& dy, const Tensor& r, const Tensor& v);

// SiLU gate (RWKV6 time-mix output): y = o * silu(g).
Tensor silu_mul_forward(const Tensor& o, const Tensor& g);
struct SiluMulGrads {
  Tensor do_, dg;
};
SiluMulGrads silu_mul_backward(const Tensor& dy, const Tensor& o, const Tensor& g);

// Token shift (RWKV6): delta[b, t, :] = x[b, t - 1, :] - x[b, t, :], x[b, -1, :] = 0.
// x [B, T, d]. The backward maps d(delta) to dx.
Tensor token_shift_forward(const Tensor& x);
Tensor token_shift_backward(const Tensor& ddelta);

}  // namespace lt::nn
