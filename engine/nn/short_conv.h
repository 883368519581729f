// Causal depthwise short convolution with SiLU fused (fla's ShortConvolution in KDA):
//   y[b, t, c] = silu( sum_{i < W} w[c, i] * x[b, t - W + 1 + i, c] ),  x[b, t < 0, c] = 0.
// x [B, T, C] (f32, bf16; f64 on the CPU), w [C, W] f32 (f64 for f64 x; fla's weight is
// [C, 1, W]: pass a view), W <= 8 (fla: 4), no bias.
// Kernels: kernels/conv.h, kernels/cpu/conv.cpp, kernels/cuda/conv.cu.
// The backward recomputes the pre-activation from x (nothing is saved but x).
// dx is written (=); dw is accumulated (+=) in a fixed order (deterministic).
#pragma once
#include "engine/tensor.h"

namespace lt::nn {

// positions (packed documents, optional): [B*T] i32, each token's position in its document
// (mixers::Segments::positions); no tap reads across a document start (kernels/conv.h).
Tensor short_conv_forward(const Tensor& x, const Tensor& w, bool silu = true, const Tensor& positions = Tensor());
Tensor short_conv_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw, bool silu = true,
                           const Tensor& positions = Tensor());

}  // namespace lt::nn
