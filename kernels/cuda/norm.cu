// Row normalisation, CUDA backend (twin: kernels/cpu/norm.cpp; math and layout: kernels/norm.h).
// f32 and bf16 activations; weights, statistics and every sum in f32.
//
// Forward: rows of whole 16-byte vectors (aligned) are held in registers: LPR lanes a row
// (L / 16 bytes when that is a power of two up to 16: 32 / LPR rows a warp at once; else the
// whole warp, up to 4 vectors a lane), one 16-byte load per vector, the row sums a butterfly
// over the row's lanes (norm_forward_rows_vec). Other rows: one warp per row (lane l owns
// columns l, l + 32, ...), 8 warps a block, warps stride over the rows. Row sums are a per-lane
// sequential sum and a butterfly (xor-shuffle) tree: deterministic.
// Backward, two launches:
//   norm_backward_rows_vec  rows of L = 32 x 16 bytes x (1..4) (768 bf16, 512 f32), aligned:
//                         each lane reads its 16-byte vectors of x, dy (g) once into registers
//                         and runs both passes from them; otherwise
//   norm_backward_rows_grouped  rows of LPR < 32 whole 16-byte vectors (KDA's gated o_norm and
//                         RWKV6's GroupNorm at head_dim 64: 8 lanes a bf16 row): a lane holds one
//                         vector of x, dy (g), 32 / LPR rows a warp at once; each lane keeps its
//                         columns' weight-gradient sums in registers, folded over the warp's row
//                         groups by a butterfly and over the warps in shared memory (fixed order);
//   norm_backward_rows    one block per weight-gradient slot (kernels/norm.h); its warps take
//                         the slot's rows in turn, one warp a row: dx (and dg) written, and
//                         e xh (and e) added into the warp's own [acc, L] partial in shared
//                         memory (each lane only touches its own columns: no races, no
//                         atomics); at the end the warps' partials are summed in warp order
//                         into scratch[slot]. When even one warp's partial exceeds the 48 KiB
//                         of static shared memory (L > 6144 with a bias, 12288 without), the
//                         block is one warp accumulating straight into scratch[slot].
//   norm_weight_reduce    warp per (acc, h, j): dw[h, j] += sum_{s < S} scratch[s P + h], each
//                         lane summing the slots s = lane (mod 32) in ascending s, then a
//                         butterfly over the lanes (S reaches 1024: a thread per output was
//                         a 1024-long serial chain).
// Every launch is deterministic: the same inputs give bit-identical outputs run to run.
// Summation orders differ from the CPU twin's (compare with a tolerance).
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/norm.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kForwardWarps = 8;   // warps per forward block
constexpr int kBackwardWarps = 8;  // most warps per backward block
constexpr int64_t kPartialSmemBytes = 48 * 1024;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float sigmoidf(float v) { return 1.0f / (1.0f + expf(-v)); }

// Sum over the LPR lanes of one row group (lanes LPR g .. LPR g + LPR - 1), every lane gets it.
template <int LPR>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = LPR / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// mean and rstd of one row, computed by the whole warp (every lane gets both).
template <class T>
__device__ __forceinline__ void row_stats(const T* xr, int64_t L, bool center, float eps, int lane, float& mu,
                                          float& rs) {
  const float inv_len = 1.0f / static_cast<float>(L);
  mu = 0.0f;
  if (center) {
    float s = 0.0f;
    for (int64_t j = lane; j < L; j += kWarp) s += load_as_compute(xr[j]);
    mu = warp_sum(s) * inv_len;
  }
  float ss = 0.0f;
  for (int64_t j = lane; j < L; j += kWarp) {
    const float v = load_as_compute(xr[j]) - mu;
    ss += v * v;
  }
  rs = 1.0f / sqrtf(warp_sum(ss) * inv_len + eps);
}

template <class T>
__global__ void norm_forward_rows(NormParams p) {
  const T* x = static_cast<const T*>(p.x);
  const T* g = static_cast<const T*>(p.g);
  const float* w = static_cast<const float*>(p.w);
  const float* b = static_cast<const float*>(p.b);
  T* y = static_cast<T*>(p.y);
  const int lane = threadIdx.x % kWarp;
  const int64_t L = p.len;
  const float eps = static_cast<float>(p.eps);
  const int64_t nwarps = grid_threads() / kWarp;
  for (int64_t r = global_thread() / kWarp; r < p.rows; r += nwarps) {
    const T* xr = x + r * L;  // [L]
    const int64_t h = r % p.period;
    float mu, rs;
    row_stats(xr, L, p.center, eps, lane, mu, rs);
    if (lane == 0) {
      if (p.center) static_cast<float*>(p.mean)[r] = mu;
      static_cast<float*>(p.rstd)[r] = rs;
    }
    for (int64_t j = lane; j < L; j += kWarp) {
      float v = (load_as_compute(xr[j]) - mu) * rs * w[h * L + j];
      if (p.bias) v += b[h * L + j];
      if (p.gate) v *= sigmoidf(load_as_compute(g[r * L + j]));
      y[r * L + j] = store_from_compute<T>(v);
    }
  }
}

// Rows of L = nv LPR n elements (n: 16 bytes of T, nv <= NV), every row operand 16-byte
// aligned: the LPR lanes of row group grp hold vectors k LPR + sub (k < nv) of the row in
// registers; a warp takes 32 / LPR consecutive rows at once (warp-uniform loop: the
// shuffles see every lane). Same math as norm_forward_rows.
template <class T, int LPR, int NV>
__global__ void norm_forward_rows_vec(NormParams p) {
  using V = Vec16<T>;
  constexpr int n = V::n, RPW = kWarp / LPR;
  const V* x = static_cast<const V*>(p.x);
  const V* g = static_cast<const V*>(p.g);
  const float* w = static_cast<const float*>(p.w);
  const float* b = static_cast<const float*>(p.b);
  V* y = static_cast<V*>(p.y);
  const int lane = threadIdx.x % kWarp, sub = lane % LPR, grp = lane / LPR;
  const int64_t L = p.len, rowv = L / n;
  const int nv = static_cast<int>(rowv / LPR);
  const float eps = static_cast<float>(p.eps), inv_len = 1.0f / static_cast<float>(L);
  const int64_t nwarps = grid_threads() / kWarp;
  for (int64_t r0 = global_thread() / kWarp * RPW; r0 < p.rows; r0 += nwarps * RPW) {
    const int64_t r = r0 + grp;
    const bool live = r < p.rows;
    float xs[NV][n];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      V xv{};
      if (live && k < nv) xv = x[r * rowv + k * LPR + sub];
#pragma unroll
      for (int e = 0; e < n; ++e) xs[k][e] = load_as_compute(xv.v[e]);
    }
    float mu = 0.0f;
    if (p.center) {
      float t = 0.0f;
#pragma unroll
      for (int k = 0; k < NV; ++k)
#pragma unroll
        for (int e = 0; e < n; ++e) t += xs[k][e];
      mu = group_sum<LPR>(t) * inv_len;
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k)
      if (k < nv)
#pragma unroll
        for (int e = 0; e < n; ++e) ss += (xs[k][e] - mu) * (xs[k][e] - mu);
    const float rs = 1.0f / sqrtf(group_sum<LPR>(ss) * inv_len + eps);
    if (!live) continue;
    if (sub == 0) {
      if (p.center) static_cast<float*>(p.mean)[r] = mu;
      static_cast<float*>(p.rstd)[r] = rs;
    }
    const int64_t h = r % p.period;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      if (k >= nv) continue;
      const int64_t vi = r * rowv + k * LPR + sub;
      V gv, yv;
      if (p.gate) gv = g[vi];
#pragma unroll
      for (int e = 0; e < n; ++e) {
        const int64_t j = (k * LPR + sub) * n + e;
        float v = (xs[k][e] - mu) * rs * w[h * L + j];
        if (p.bias) v += b[h * L + j];
        if (p.gate) v *= sigmoidf(load_as_compute(gv.v[e]));
        yv.v[e] = store_from_compute<T>(v);
      }
      y[vi] = yv;
    }
  }
}

// One block per slot (blockIdx.x); partials_in_smem selects where the warps accumulate.
template <class T>
__global__ void norm_backward_rows(NormParams p, int64_t slices, bool partials_in_smem) {
  extern __shared__ float smem_partial[];  // [warps, acc, L] when partials_in_smem
  const T* x = static_cast<const T*>(p.x);
  const T* g = static_cast<const T*>(p.g);
  const T* dy = static_cast<const T*>(p.dy);
  const float* w = static_cast<const float*>(p.w);
  const float* b = static_cast<const float*>(p.b);
  const float* mean = static_cast<const float*>(p.mean);
  const float* rstd = static_cast<const float*>(p.rstd);
  T* dx = static_cast<T*>(p.dx);
  const T* dres = static_cast<const T*>(p.dres);
  T* dg = static_cast<T*>(p.dg);
  float* scratch = static_cast<float*>(p.scratch);  // [G, acc, L]
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nwarps = blockDim.x / kWarp;
  const int64_t L = p.len, P = p.period;
  const int64_t nacc = p.bias ? 2 : 1;
  const int64_t slot = blockIdx.x, h = slot % P, s = slot / P;
  const float inv_len = 1.0f / static_cast<float>(L);

  float* acc_w = partials_in_smem ? smem_partial + warp * nacc * L : scratch + slot * nacc * L;  // [L]
  float* acc_b = acc_w + L;                                                                      // [L] (bias)
  // lane l owns columns j = l (mod 32) of both partials from here to the block reduction
  for (int64_t j = lane; j < L; j += kWarp) {
    acc_w[j] = 0.0f;
    if (p.bias) acc_b[j] = 0.0f;
  }

  const int64_t per_head = p.rows / P;
  const int64_t m_end = norm_slice_begin(per_head, slices, s + 1);
  const float* wh = w + h * L;
  for (int64_t m = norm_slice_begin(per_head, slices, s) + warp; m < m_end; m += nwarps) {
    const int64_t r = h + P * m;
    const T* xr = x + r * L;
    const T* dyr = dy + r * L;
    const float mu = p.center ? mean[r] : 0.0f;
    const float rs = rstd[r];
    // pass 1: the two row means, dg, and this warp's weight-gradient partials
    float sum_d = 0.0f, sum_dxh = 0.0f;
    for (int64_t j = lane; j < L; j += kWarp) {
      const float xh = (load_as_compute(xr[j]) - mu) * rs;
      float e = load_as_compute(dyr[j]);
      if (p.gate) {
        const float sg = sigmoidf(load_as_compute(g[r * L + j]));
        const float pre = xh * wh[j] + (p.bias ? b[h * L + j] : 0.0f);
        dg[r * L + j] = store_from_compute<T>(e * pre * sg * (1.0f - sg));
        e *= sg;
      }
      const float d = e * wh[j];
      sum_d += d;
      sum_dxh += d * xh;
      acc_w[j] += e * xh;
      if (p.bias) acc_b[j] += e;
    }
    const float c1 = p.center ? warp_sum(sum_d) * inv_len : 0.0f;
    const float c2 = warp_sum(sum_dxh) * inv_len;
    // pass 2: dx (the row is still in L1)
    for (int64_t j = lane; j < L; j += kWarp) {
      const float xh = (load_as_compute(xr[j]) - mu) * rs;
      float e = load_as_compute(dyr[j]);
      if (p.gate) e *= sigmoidf(load_as_compute(g[r * L + j]));
      const float res = dres ? load_as_compute(dres[r * L + j]) : 0.0f;
      dx[r * L + j] = store_from_compute<T>(rs * (e * wh[j] - c1 - xh * c2) + res);
    }
  }
  if (!partials_in_smem) return;
  __syncthreads();
  for (int64_t k = threadIdx.x; k < nacc * L; k += blockDim.x) {
    float sum = 0.0f;
    for (int v = 0; v < nwarps; ++v) sum += smem_partial[v * nacc * L + k];
    scratch[slot * nacc * L + k] = sum;
  }
}

// norm_backward_rows for rows that fit a warp's registers: L = NV 32 n (n = 16 bytes of T)
// and every row operand 16-byte aligned. Lane l holds vectors k 32 + l (k < NV) of x,
// dy (and g), read once with 16-byte loads; both passes run from the registers and dx (dg)
// leave as 16-byte stores. Partials always in shared memory. Same math, same slots.
// Two blocks an SM: a cap for three spills at 768 bf16 columns and measured slower
// (docs/notes-step.md).
template <class T, int NV, bool kGate>
__global__ void __launch_bounds__(kBackwardWarps* kWarp, 2) norm_backward_rows_vec(NormParams p, int64_t slices) {
  using V = Vec16<T>;
  constexpr int n = V::n;
  extern __shared__ float smem_partial[];  // [warps, acc, L]
  const V* x = static_cast<const V*>(p.x);
  const V* g = static_cast<const V*>(p.g);
  const V* dy = static_cast<const V*>(p.dy);
  const float* w = static_cast<const float*>(p.w);
  const float* b = static_cast<const float*>(p.b);
  const float* mean = static_cast<const float*>(p.mean);
  const float* rstd = static_cast<const float*>(p.rstd);
  V* dx = static_cast<V*>(p.dx);
  const V* dres = static_cast<const V*>(p.dres);
  V* dg = static_cast<V*>(p.dg);
  float* scratch = static_cast<float*>(p.scratch);  // [G, acc, L]
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nwarps = blockDim.x / kWarp;
  const int64_t L = p.len, P = p.period;
  const int64_t rowv = L / n;  // vectors per row
  const int64_t nacc = p.bias ? 2 : 1;
  const int64_t slot = blockIdx.x, h = slot % P, s = slot / P;
  const float inv_len = 1.0f / static_cast<float>(L);
  // A warp's partials hold column j = v n + e (vector v, element e) at e rowv + v: the lanes
  // of one update touch consecutive words (at j itself, lane l's n-column stride made every
  // read-modify-write an n-way bank conflict).
  float* acc_w = smem_partial + warp * nacc * L;
  float* acc_b = acc_w + L;  // (bias)
  for (int64_t j = lane; j < nacc * L; j += kWarp) acc_w[j] = 0.0f;
  __syncwarp();  // the lanes zeroed other columns than they accumulate below
  const int64_t per_head = p.rows / P;
  const int64_t m_end = norm_slice_begin(per_head, slices, s + 1);
  const float* wh = w + h * L;
  const float* bh = p.bias ? b + h * L : nullptr;
  for (int64_t m = norm_slice_begin(per_head, slices, s) + warp; m < m_end; m += nwarps) {
    const int64_t r = h + P * m;
    V xv[NV], dyv[NV], gv[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      xv[k] = x[r * rowv + k * kWarp + lane];
      dyv[k] = dy[r * rowv + k * kWarp + lane];
      if (kGate) gv[k] = g[r * rowv + k * kWarp + lane];
    }
    const float mu = p.center ? mean[r] : 0.0f;
    const float rs = rstd[r];
    float sum_d = 0.0f, sum_dxh = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      V dgv;
#pragma unroll
      for (int e = 0; e < n; ++e) {
        const int64_t j = (k * kWarp + lane) * n + e;
        const float xh = (load_as_compute(xv[k].v[e]) - mu) * rs;
        float ee = load_as_compute(dyv[k].v[e]);
        if (kGate) {
          const float sg = sigmoidf(load_as_compute(gv[k].v[e]));
          const float pre = xh * wh[j] + (p.bias ? bh[j] : 0.0f);
          dgv.v[e] = store_from_compute<T>(ee * pre * sg * (1.0f - sg));
          ee *= sg;
        }
        const float d = ee * wh[j];
        sum_d += d;
        sum_dxh += d * xh;
        const int64_t at = e * rowv + k * kWarp + lane;
        acc_w[at] += ee * xh;
        if (p.bias) acc_b[at] += ee;
      }
      if (kGate) dg[r * rowv + k * kWarp + lane] = dgv;
    }
    const float c1 = p.center ? warp_sum(sum_d) * inv_len : 0.0f;
    const float c2 = warp_sum(sum_dxh) * inv_len;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      V dxv, resv;
      if (dres) resv = dres[r * rowv + k * kWarp + lane];
#pragma unroll
      for (int e = 0; e < n; ++e) {
        const int64_t j = (k * kWarp + lane) * n + e;
        const float xh = (load_as_compute(xv[k].v[e]) - mu) * rs;
        float ee = load_as_compute(dyv[k].v[e]);
        if (kGate) ee *= sigmoidf(load_as_compute(gv[k].v[e]));
        const float res = dres ? load_as_compute(resv.v[e]) : 0.0f;
        dxv.v[e] = store_from_compute<T>(rs * (ee * wh[j] - c1 - xh * c2) + res);
      }
      dx[r * rowv + k * kWarp + lane] = dxv;
    }
  }
  __syncthreads();
  // The warps' partials summed in warp order; element i (acc a, element e, vector v) is column
  // v n + e of the slot's [acc, L] scratch row.
  for (int64_t i = threadIdx.x; i < nacc * L; i += blockDim.x) {
    float sum = 0.0f;
    for (int v = 0; v < nwarps; ++v) sum += smem_partial[v * nacc * L + i];
    const int64_t a = i / L, e = (i % L) / rowv, vec = (i % L) % rowv;
    scratch[slot * nacc * L + a * L + vec * n + e] = sum;
  }
}

// Most 16-byte vectors a lane holds per row operand on the register path.
constexpr int kNormVecMax = 4;

// norm_backward_rows for rows of L = LPR n elements (LPR < 32 lanes a row, one 16-byte vector
// each), every row operand 16-byte aligned. A warp takes 32 / LPR of the slot's rows at once;
// each lane's weight-gradient sums (its n columns) stay in registers over the rows, then are
// folded over the warp's row groups (butterfly) and over the warps (shared memory, ascending
// warp order) into scratch[slot]. Same math, same slots. Three blocks an SM (95 registers
// left two: latency-bound at 25 % occupancy).
template <class T, int LPR>
__global__ void __launch_bounds__(kBackwardWarps* kWarp, 3) norm_backward_rows_grouped(NormParams p, int64_t slices) {
  using V = Vec16<T>;
  constexpr int n = V::n, RPW = kWarp / LPR;
  static_assert(LPR < kWarp, "whole-warp rows take norm_backward_rows_vec");
  extern __shared__ float smem_partial[];  // [warps, acc, L]
  const V* x = static_cast<const V*>(p.x);
  const V* g = static_cast<const V*>(p.g);
  const V* dy = static_cast<const V*>(p.dy);
  const float* mean = static_cast<const float*>(p.mean);
  const float* rstd = static_cast<const float*>(p.rstd);
  V* dx = static_cast<V*>(p.dx);
  const V* dres = static_cast<const V*>(p.dres);
  V* dg = static_cast<V*>(p.dg);
  const int lane = threadIdx.x % kWarp, sub = lane % LPR, grp = lane / LPR;
  const int warp = threadIdx.x / kWarp, nwarps = blockDim.x / kWarp;
  const int64_t L = p.len, P = p.period;
  const int64_t nacc = p.bias ? 2 : 1;
  const int64_t slot = blockIdx.x, h = slot % P, s = slot / P;
  const float inv_len = 1.0f / static_cast<float>(L);
  float wv[n], bv[n], aw[n], ab[n];  // this lane's columns j = sub n + e
#pragma unroll
  for (int e = 0; e < n; ++e) {
    wv[e] = static_cast<const float*>(p.w)[h * L + sub * n + e];
    bv[e] = p.gate && p.bias ? static_cast<const float*>(p.b)[h * L + sub * n + e] : 0.0f;  // b: read with a gate only
    aw[e] = ab[e] = 0.0f;
  }
  const int64_t per_head = p.rows / P;
  const int64_t m_end = norm_slice_begin(per_head, slices, s + 1);
  for (int64_t m0 = norm_slice_begin(per_head, slices, s) + static_cast<int64_t>(warp) * RPW; m0 < m_end;
       m0 += static_cast<int64_t>(nwarps) * RPW) {
    const int64_t m = m0 + grp;
    const bool live = m < m_end;
    const int64_t r = h + P * m, vi = r * LPR + sub;
    V xv{}, dyv{}, gv{};
    float mu = 0.0f, rs = 0.0f;
    if (live) {
      xv = x[vi];
      dyv = dy[vi];
      if (p.gate) gv = g[vi];
      mu = p.center ? mean[r] : 0.0f;
      rs = rstd[r];
    }
    float xh[n], ee[n];
    float sum_d = 0.0f, sum_dxh = 0.0f;
    V dgv;
#pragma unroll
    for (int e = 0; e < n; ++e) {
      xh[e] = (load_as_compute(xv.v[e]) - mu) * rs;
      ee[e] = load_as_compute(dyv.v[e]);
      if (p.gate) {
        const float sg = sigmoidf(load_as_compute(gv.v[e]));
        const float pre = xh[e] * wv[e] + bv[e];
        dgv.v[e] = store_from_compute<T>(ee[e] * pre * sg * (1.0f - sg));
        ee[e] *= sg;
      }
      const float d = ee[e] * wv[e];
      sum_d += d;
      sum_dxh += d * xh[e];
      aw[e] += ee[e] * xh[e];  // zero for a row past the slice (dy = 0)
      ab[e] += ee[e];
    }
    const float c1 = p.center ? group_sum<LPR>(sum_d) * inv_len : 0.0f;
    const float c2 = group_sum<LPR>(sum_dxh) * inv_len;
    if (!live) continue;
    if (p.gate) dg[vi] = dgv;
    V dxv, resv;
    if (dres) resv = dres[vi];
#pragma unroll
    for (int e = 0; e < n; ++e) {
      const float res = dres ? load_as_compute(resv.v[e]) : 0.0f;
      dxv.v[e] = store_from_compute<T>(rs * (ee[e] * wv[e] - c1 - xh[e] * c2) + res);
    }
    dx[vi] = dxv;
  }
  // fold the row groups of the warp: lanes sub, sub + LPR, ... hold the same columns
#pragma unroll
  for (int e = 0; e < n; ++e)
#pragma unroll
    for (int offset = LPR; offset < kWarp; offset *= 2) {
      aw[e] += __shfl_xor_sync(0xffffffffu, aw[e], offset);
      ab[e] += __shfl_xor_sync(0xffffffffu, ab[e], offset);
    }
  if (grp == 0)
#pragma unroll
    for (int e = 0; e < n; ++e) {
      smem_partial[warp * nacc * L + sub * n + e] = aw[e];
      if (p.bias) smem_partial[warp * nacc * L + L + sub * n + e] = ab[e];
    }
  __syncthreads();
  float* scratch = static_cast<float*>(p.scratch);  // [G, acc, L]
  for (int64_t k = threadIdx.x; k < nacc * L; k += blockDim.x) {
    float sum = 0.0f;
    for (int v = 0; v < nwarps; ++v) sum += smem_partial[v * nacc * L + k];
    scratch[slot * nacc * L + k] = sum;
  }
}

// Lanes a row for the register paths: L / n when it is a power of two below 32 (n: 16 bytes
// of T), 32 when L is 32 n times 1..kNormVecMax; 0 otherwise.
template <class T>
int lanes_per_row(int64_t L) {
  constexpr int64_t n = Vec16<T>::n;
  if (L % n != 0) return 0;
  const int64_t v = L / n;
  if (v < kWarp && (v & (v - 1)) == 0) return static_cast<int>(v);
  return v % kWarp == 0 && v / kWarp <= kNormVecMax ? kWarp : 0;
}

__global__ void norm_weight_reduce(NormParams p, int64_t slices) {
  const float* scratch = static_cast<const float*>(p.scratch);  // [G, acc, L]
  const int64_t L = p.len, P = p.period;
  const int64_t nacc = p.bias ? 2 : 1;
  const int lane = threadIdx.x % kWarp;
  const int64_t nwarps = grid_threads() / kWarp;
  // warp-uniform loop: every lane reaches the butterfly
  for (int64_t i = global_thread() / kWarp; i < nacc * P * L; i += nwarps) {
    const int64_t a = i / (P * L), hj = i % (P * L), h = hj / L, j = hj % L;
    float sum = 0.0f;
    for (int64_t s = lane; s < slices; s += kWarp) sum += scratch[((s * P + h) * nacc + a) * L + j];
    sum = warp_sum(sum);
    if (lane == 0) {
      float* out = static_cast<float*>(a == 0 ? p.dw : p.db);
      out[hj] += sum;
    }
  }
}

template <class T>
void launch_norm(NormPass pass, const NormParams& p, cudaStream_t stream) {
  const int lpr = lanes_per_row<T>(p.len);
  if (pass == NormPass::forward) {
    const int threads = kForwardWarps * kWarp;
    if (lpr > 0 && aligned16(p.x) && aligned16(p.y) && (!p.gate || aligned16(p.g))) {
      const dim3 grid = grid_for((p.rows + kWarp / lpr - 1) / (kWarp / lpr) * kWarp, threads);
      auto run = [&](auto kernel) { LT_LAUNCH(kernel, grid, threads, 0, stream, p); };
      switch (lpr) {
        case 1: run(norm_forward_rows_vec<T, 1, 1>); break;
        case 2: run(norm_forward_rows_vec<T, 2, 1>); break;
        case 4: run(norm_forward_rows_vec<T, 4, 1>); break;
        case 8: run(norm_forward_rows_vec<T, 8, 1>); break;
        case 16: run(norm_forward_rows_vec<T, 16, 1>); break;
        default: run(norm_forward_rows_vec<T, kWarp, kNormVecMax>); break;
      }
      return;
    }
    auto kernel = norm_forward_rows<T>;
    LT_LAUNCH(kernel, grid_for(p.rows * kWarp, threads), threads, 0, stream, p);
    return;
  }
  const int64_t slices = norm_slices_per_head(p.rows, p.period);
  const int64_t slots = slices * p.period;
  const int64_t partial_bytes = (p.bias ? 2 : 1) * p.len * static_cast<int64_t>(sizeof(float));  // one warp's
  int warps = kBackwardWarps;
  while (warps > 1 && warps * partial_bytes > kPartialSmemBytes) warps /= 2;
  const bool in_smem = warps * partial_bytes <= kPartialSmemBytes;
  const size_t smem = in_smem ? static_cast<size_t>(warps * partial_bytes) : 0;
  constexpr int64_t per_vec = kWarp * Vec16<T>::n;  // elements a warp covers per vector step
  const bool vec_operands = in_smem && aligned16(p.x) && aligned16(p.dy) && aligned16(p.dx) &&
                            (!p.dres || aligned16(p.dres)) && (!p.gate || (aligned16(p.g) && aligned16(p.dg)));
  const bool vec = vec_operands && p.len % per_vec == 0 && p.len / per_vec <= kNormVecMax;
  const bool grouped = vec_operands && lpr > 0 && lpr < kWarp;
  if (grouped) {
    const dim3 grid(static_cast<unsigned>(slots));
    auto run = [&](auto kernel) { LT_LAUNCH(kernel, grid, warps * kWarp, smem, stream, p, slices); };
    switch (lpr) {
      case 1: run(norm_backward_rows_grouped<T, 1>); break;
      case 2: run(norm_backward_rows_grouped<T, 2>); break;
      case 4: run(norm_backward_rows_grouped<T, 4>); break;
      case 8: run(norm_backward_rows_grouped<T, 8>); break;
      default: run(norm_backward_rows_grouped<T, 16>); break;
    }
  } else if (vec) {
    const dim3 grid(static_cast<unsigned>(slots));
    auto run = [&](auto kernel) { LT_LAUNCH(kernel, grid, warps * kWarp, smem, stream, p, slices); };
    // the vectors a lane holds and the gate compiled in: registers decide the blocks an SM holds
    auto pick = [&](auto gate) {
      constexpr bool G = decltype(gate)::value;
      switch (p.len / per_vec) {
        case 1: run(norm_backward_rows_vec<T, 1, G>); break;
        case 2: run(norm_backward_rows_vec<T, 2, G>); break;
        case 3: run(norm_backward_rows_vec<T, 3, G>); break;
        default: run(norm_backward_rows_vec<T, 4, G>); break;
      }
    };
    if (p.gate) pick(std::true_type{});
    else pick(std::false_type{});
  } else {
    auto rows_kernel = norm_backward_rows<T>;
    LT_LAUNCH(rows_kernel, dim3(static_cast<unsigned>(slots)), warps * kWarp, smem, stream, p, slices, in_smem);
  }
  const int64_t outputs = (p.bias ? 2 : 1) * p.period * p.len;
  LT_LAUNCH(norm_weight_reduce, grid_for(outputs * kWarp), kThreads, 0, stream, p, slices);
}

}  // namespace

void norm(NormPass pass, DType dtype, const NormParams& p, uintptr_t stream) {
  if (p.rows == 0) return;
  switch (dtype) {
    case DType::f32: launch_norm<float>(pass, p, as_stream(stream)); break;
    case DType::bf16: launch_norm<bfloat16>(pass, p, as_stream(stream)); break;
    default: unsupported_dtype("cuda", "norm", dtype);
  }
}

}  // namespace lt::kern::cuda
