// Causal depthwise short convolution with optional SiLU (kernels/cpu/conv.cpp,
// kernels/cuda/conv.cu; engine: engine/nn/short_conv.h).
//     a[b, t, c] = sum_{i < W} w[c, i] x[b, t - W + 1 + i, c]     (x[b, t < 0, c] = 0)
//     y[b, t, c] = silu ? a * sigmoid(a) : a
// Backward, recomputing a from x, with da = dy * silu'(a) (silu'(a) = s (1 + a (1 - s)),
// s = sigmoid(a); da = dy without SiLU):
//     dx[b, t, c] = sum_{i < W, t + W - 1 - i < T} w[c, i] da[b, t + W - 1 - i, c]
//     dw[c, i]   += sum_{b, t} da[b, t, c] x[b, t - W + 1 + i, c]
// Packed documents (pos, optional, [B, T] i32: each token's position in its document, 0 at a
// document start): a tap never reads across a start, as if x were 0 before it: the tap of lag
// L = W - 1 - i counts only when L <= pos[b, t] (conv_tap_ok).
// Shapes (contiguous): x, y, dy, dx [B, T, C]; w, dw [C, W]. Dtypes: x, y, dy, dx `dtype`
// (f32, bf16; f64 and f16 on the CPU); w, dw and the scratch the compute type (f64 for f64,
// f32 otherwise); sums accumulate in the compute type.
// dw, deterministic on both backends: the tokens are cut into slots (b, tile) of
// kConvTileT consecutive t; slot q = b * NTT + tile (NTT = ceil(T / kConvTileT)) sums its
// tokens in ascending t into scratch[q] = [C, W]; then dw[c, i] += sum_q scratch[q, c, i]
// in ascending q.
#pragma once
#include <cstdint>

#include "kernels/half.h"  // LT_HD

namespace lt::kern {

inline constexpr int64_t kConvMaxWidth = 8;
inline constexpr int64_t kConvTileT = 32;

enum class ConvPass : uint8_t { forward, backward };

struct ConvParams {
  int64_t B = 0, T = 0, C = 0, W = 0;  // 1 <= W <= kConvMaxWidth
  bool silu = true;
  const void* x = nullptr;       // [B, T, C]
  const void* w = nullptr;       // [C, W]
  void* y = nullptr;             // [B, T, C] (forward)
  const void* dy = nullptr;      // [B, T, C] (backward)
  void* dx = nullptr;            // [B, T, C], written
  void* dw = nullptr;            // [C, W], accumulated
  void* scratch = nullptr;       // [conv_weight_slots(B, T), C, W] compute type
  const int32_t* pos = nullptr;  // [B, T] positions in the packed documents, or null
};

// Whether the tap of lag L (reading x[t - L]) counts for output t of row `pos_b` ([T], or null:
// one document a row; t - L < 0 reads 0 anyway).
LT_HD bool conv_tap_ok(const int32_t* pos_b, int64_t t, int L) { return pos_b == nullptr || L <= pos_b[t]; }

// Number of dw slots: B * ceil(T / kConvTileT).
LT_HD int64_t conv_weight_slots(int64_t B, int64_t T) { return B * ((T + kConvTileT - 1) / kConvTileT); }

}  // namespace lt::kern
