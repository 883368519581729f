// Row normalisation (kernels/cpu/norm.cpp, kernels/cuda/norm.cu; engine: engine/nn/norm.h).
// One generic row norm covers RMSNorm, LayerNorm, per-head GroupNorm and the sigmoid-gated
// RMSNorm. Row r of x [N, L] (contiguous), with head h = r % P (weight period P):
//     mu   = center ? mean_j x_j : 0
//     rstd = 1 / sqrt(mean_j (x_j - mu)^2 + eps)
//     xh_j = (x_j - mu) * rstd
//     y_j  = (xh_j * w[h, j] + (bias ? b[h, j] : 0)) * (gate ? sigmoid(g_j) : 1)
// Backward, with s_j = sigmoid(g_j) (1 without a gate), e_j = dy_j * s_j, d_j = e_j * w[h, j]:
//     dx_j  = rstd * (d_j - (center ? mean(d) : 0) - xh_j * mean(d . xh))  (+ dres_j: optional)
//     dg_j  = dy_j * (xh_j * w[h, j] + b[h, j]) * s_j (1 - s_j)        (gate only)
//     dw[h, j] += sum_{rows of head h} e_j xh_j;   db[h, j] += sum_{rows of head h} e_j
// Dtypes: x, g, y, dy, dx, dg are `dtype` (f32, bf16; f64 and f16 on the CPU); w, b, dw, db,
// mean, rstd and the scratch are the compute type (f64 for f64, f32 otherwise). Every sum
// accumulates in the compute type.
//
// Weight gradients, deterministic on both backends: the rows of head h (m = 0..N/P-1,
// r = h + P m) are cut into S contiguous slices; slice s of head h is slot g = s P + h.
// Each slot's sums go to scratch[g] = [acc][L] (acc 0: dw, 1: db), then one ordered pass
// adds sum_{s < S} scratch[s P + h] to dw[h], db[h]. The slot count is fixed by the shape
// alone (norm_weight_slots), so the result is bit-identical run to run.
#pragma once
#include <cstdint>

#include "kernels/half.h"  // LT_HD

namespace lt::kern {

enum class NormPass : uint8_t { forward, backward };

struct NormParams {
  int64_t rows = 0;     // N
  int64_t len = 0;      // L, elements per row (rows are contiguous: row stride L)
  int64_t period = 1;   // P: row r uses weight row r % P of w, b [P, L]; N % P == 0
  bool center = false;  // subtract the mean (LayerNorm, GroupNorm)
  bool bias = false;    // b (and db) present
  bool gate = false;    // sigmoid gate g (and dg) present
  double eps = 1e-6;
  // forward
  const void* x = nullptr;  // [N, L]
  const void* g = nullptr;  // [N, L] (gate)
  const void* w = nullptr;  // [P, L]
  const void* b = nullptr;  // [P, L] (bias; the backward reads it only with a gate)
  void* y = nullptr;        // [N, L]
  void* mean = nullptr;     // [N] (center; written by forward, read by backward)
  void* rstd = nullptr;     // [N]
  // backward (x, g, w, b, mean, rstd as above)
  const void* dy = nullptr;    // [N, L]
  void* dx = nullptr;          // [N, L], written
  const void* dres = nullptr;  // [N, L] added to dx before its rounding (a residual's gradient), or null
  void* dg = nullptr;          // [N, L], written (gate)
  void* dw = nullptr;          // [P, L], accumulated
  void* db = nullptr;          // [P, L], accumulated (bias)
  void* scratch = nullptr;     // [norm_weight_slots(N, P) * (bias ? 2 : 1) * L] compute type
};

// Rows per weight-gradient slot at least this many; at most kNormMaxSlots slots over all heads
// (plus up to P - 1 from rounding S up). 8: a [4096, 768] backward fills 512 blocks (32 rows a
// slot left 128 blocks on 132 SMs, each warp walking 4 rows in turn: latency-bound).
inline constexpr int64_t kNormMinRowsPerSlot = 8;
inline constexpr int64_t kNormMaxSlots = 1024;

// S: slices per head.
LT_HD int64_t norm_slices_per_head(int64_t rows, int64_t period) {
  const int64_t per_head = rows / period;
  int64_t s = (per_head + kNormMinRowsPerSlot - 1) / kNormMinRowsPerSlot;
  const int64_t cap = (kNormMaxSlots + period - 1) / period;
  if (s > cap) s = cap;
  return s < 1 ? 1 : s;
}
// Number of slots G = S * P (the scratch holds G * acc * L values).
LT_HD int64_t norm_weight_slots(int64_t rows, int64_t period) { return norm_slices_per_head(rows, period) * period; }
// Slice s of S over n items: [begin, end).
LT_HD int64_t norm_slice_begin(int64_t n, int64_t slices, int64_t s) {
  const int64_t chunk = (n + slices - 1) / slices;
  const int64_t b = s * chunk;
  return b < n ? b : n;
}

}  // namespace lt::kern
