// Normalisation layers, forward beside backward: RMSNorm, LayerNorm (with bias), per-head
// GroupNorm (fla's RWKV6 g_norm) and the sigmoid-gated RMSNorm (fla's FusedRMSNormGated).
// Kernels: kernels/norm.h (params), kernels/cpu/norm.cpp and kernels/cuda/norm.cu (twins).
//
// Rows. x is [..., L]: N = numel / L rows of L elements, each normalised on its own
// (statistics in f32, f64 for f64 x). For the per-head forms L is one head (the caller
// views [..., H*D] as [..., H, D]); per-head weights are indexed by the head.
// Dtypes. x, dy, y, dx: one activation dtype (f32, bf16; f64 on the CPU). Weights, biases
// and their gradients: f32 (f64 when x is f64). Saved statistics: f32 (f64).
// Accumulation. dx, dg are written (=); dw, db are accumulated (+=) so micro-batches and
// the layers that share a weight add up. Deterministic on both backends: the weight
// gradients are reduced in a fixed order (per-block partial sums, then one ordered pass).
#pragma once
#include "engine/tensor.h"

namespace lt::nn {

// What a norm's backward needs besides x and the weights: the per-row statistics.
struct NormStats {
  Tensor mean;  // [N] (LayerNorm / GroupNorm; undefined for the RMS forms)
  Tensor rstd;  // [N] 1 / sqrt(var + eps) (LayerNorm) or 1 / sqrt(mean(x^2) + eps) (RMS)
};
struct NormOut {
  Tensor y;  // x's shape and dtype
  NormStats stats;
};

// y = x * rstd * w.  x [..., L], w [L].
NormOut rms_norm_forward(const Tensor& x, const Tensor& w, double eps);
// dres (optional, x's shape and dtype): added to dx before its one rounding, for a residual
// branch's gradient (dx = norm's dx + dres without a separate add pass).
Tensor rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const NormStats& s, Tensor& dw,
                         const Tensor& dres = Tensor());

// y = (x - mean) * rstd * w + b.  x [..., L], w, b [L].
NormOut layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps);
Tensor layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const NormStats& s, Tensor& dw,
                           Tensor& db, const Tensor& dres = Tensor());

// Per-head LayerNorm: x [..., H, D], w, b [H, D] (fla's g_norm weight [H*D] viewed so).
NormOut group_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps);
Tensor group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const NormStats& s, Tensor& dw,
                           Tensor& db);

// Gated RMSNorm with a sigmoid gate: y = x * rstd * w * sigmoid(g).
// x, g [..., D] (one head a row), w [D] shared by all heads.
NormOut gated_rms_norm_forward(const Tensor& x, const Tensor& g, const Tensor& w, double eps);
struct GatedNormGrads {
  Tensor dx, dg;
};
GatedNormGrads gated_rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& g, const Tensor& w,
                                       const NormStats& s, Tensor& dw);

}  // namespace lt::nn
