// RWKV6 chunked forward and backward on CUDA. Math, shapes and accumulation rules:
// kernels/rwkv6.h (top comment); CPU twins of every kernel: kernels/cpu/rwkv6.cpp.
//
// Launches
//   forward   rwkv6_state_scan (z=0: h[n], ht)  |  rwkv6_fwd_output (o)                  2
//   backward  rwkv6_state_scan (z=0: h again, z=1: dh reverse; both in one grid)
//             | rwkv6_bwd_chunk<kFused>                      | rwkv6_du_reduce         3
//   fallback  rwkv6_state_scan | rwkv6_bwd_chunk<kIntra> (fp32 dq'/dk' intra to scratch)
//             | rwkv6_bwd_chunk<kInter> (reads them back) | rwkv6_du_reduce               4
//
// Tiling (SIMT fp32; every CTA has 256 threads arranged 16 x 16, ty = tid / 16, tx = tid % 16).
// A thread owns rows ty + 16 i and columns tx + 16 j of every tile it accumulates, so with
// chunk rows grouped in 16-row blocks, accumulator row i IS block i: the block-pair
// factorisation (kernels/rwkv6.h) needs no index arithmetic, only unrolled i/j loops.
// Tiles in shared memory are fp32 [rows][W + 1] (odd stride: row- and column-wise reads are
// both conflict-free). D is covered by 64-wide tiles; a chunk CTA owns one 64-wide column
// tile ("own tile") of the key dim for dq/dk/dw and of the value dim for o/dv, and loops over
// the other tiles for the full-D reductions (dP = dO V^T, A, dO h^T, V dh^T, K dh).
// The register/shared footprint per CTA is therefore independent of D: this is what lets
// the fused backward keep its edge over the two-kernel fallback at D = 128 and 256.
#include <cuda_runtime.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/half.h"
#include "kernels/launch.h"
#include "kernels/rwkv6.h"

namespace lt::rwkv6 {
namespace {

constexpr int kThreads = 256;
constexpr int kW = 64;          // width of a D tile in the chunk kernels
constexpr int kLD = kW + 1;     // its padded row stride (floats)
constexpr int kBC = 16;         // rows per factorisation block

enum Mode : int { kModeFused = 0, kModeIntra = 1, kModeInter = 2 };

__device__ __forceinline__ int rows_in_chunk(int C, int64_t T, int64_t n) {
  const int64_t left = T - n * C;
  return left < C ? static_cast<int>(left) : C;
}
template <class T>
__device__ __forceinline__ float ldg(const T* p, int64_t i) { return load_as_compute(p[i]); }
template <class T>
__device__ __forceinline__ void stg(T* p, int64_t i, float x) { p[i] = store_from_compute<T>(x); }

// Rows [0, C) x cols [0, W) of a token tensor [B,T,H,D] into smem [C][W+1]; rows >= L are 0.
// `src` points at (b, t0, h, col0); consecutive rows are `rs` = H*D elements apart.
template <class T, int C, int W>
__device__ __forceinline__ void load_tokens(float* dst, const T* src, int64_t rs, int L) {
  for (int idx = threadIdx.x; idx < C * W; idx += kThreads) {
    const int r = idx / W, c = idx % W;
    dst[r * (W + 1) + c] = r < L ? ldg(src, r * rs + c) : 0.f;
  }
}
// A [R][W] block of a row-major [D][D] fp32 state starting at `src` into smem [R][W+1].
template <int R, int W>
__device__ __forceinline__ void load_state(float* dst, const float* src, int64_t D) {
  for (int idx = threadIdx.x; idx < R * W; idx += kThreads) {
    const int r = idx / W, c = idx % W;
    dst[r * (W + 1) + c] = src[r * D + c];
  }
}

// Column-wise chunk-local inclusive cumsum of a [C][W+1] smem tile of w (rows >= L hold 0).
// P = 256 / W consecutive threads share a column (P lanes of one warp), each summing C / P
// consecutive rows; their exclusive prefix comes from a width-P shuffle scan. Then
// visit(r, c, Gi, w, gamma) runs once per element (by the thread that owns it; an
// in-place write of Gi over w is safe), gamma = Gi[C-1] of the column.
template <int C, int W, class Visit>
__device__ __forceinline__ void column_cumsum(const float* w_s, Visit&& visit) {
  constexpr int P = kThreads / W;
  constexpr int R = C / P;
  static_assert(R >= 1 && C % P == 0, "rows per thread");
  const int c = threadIdx.x / P, seg = threadIdx.x % P;
  float loc[R];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    loc[k] = w_s[(seg * R + k) * (W + 1) + c];
    s += loc[k];
  }
  float incl = s;
#pragma unroll
  for (int off = 1; off < P; off <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, incl, off, P);
    if (seg >= off) incl += y;
  }
  const float gamma = __shfl_sync(0xffffffffu, incl, P - 1, P);
  float g = incl - s;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    g += loc[k];
    visit(seg * R + k, c, g, loc[k], gamma);
  }
}

// Block references of a 64-wide Gi tile: gs[i] = Gi[16i-1] (0 for i = 0), gend[i] = Gi[16i+15],
// eW[i] = e^{gend - gs} (the block's total decay, <= 1). Arrays [C/16][64].
template <int C>
__device__ __forceinline__ void block_refs(const float* gi_s, float* gs, float* gend, float* eW) {
  for (int idx = threadIdx.x; idx < (C / kBC) * kW; idx += kThreads) {
    const int blk = idx / kW, c = idx % kW;
    const float a = blk == 0 ? 0.f : gi_s[(blk * kBC - 1) * kLD + c];
    const float e = gi_s[(blk * kBC + kBC - 1) * kLD + c];
    gs[idx] = a;
    gend[idx] = e;
    eW[idx] = __expf(e - a);
  }
}

// =======================================================================================
// State scans. grid (tiles, B*H, nz): tile = W x W block (rows: key dim, cols: value dim)
// of the state; z + z_offset = 0: forward scan S <- e^g S + (K e^{g-Gi})^T V storing h[n]
// (the state entering chunk n) and ht; = 1: reverse scan S' <- e^g S' + scale (Q e^Ge)^T dO
// storing dh[n] (the gradient of the state leaving chunk n) and dh0.
// Every (row tile, col tile) pair evolves independently, so tiles are separate CTAs; each
// recomputes the gates of its W key columns. The next chunk's tiles are prefetched into
// registers while the current one is multiplied.
template <class Tin, int C, int W>
__global__ void __launch_bounds__(kThreads) rwkv6_state_scan(const CudaArgs a, int z_offset) {
  constexpr int LD = W + 1, TM = W / 16, E = C * W / kThreads;
  static_assert(E >= 1 && (C * W) % kThreads == 0, "tile elements per thread");
  extern __shared__ float smem[];
  float* w_s = smem;             // [C][LD] w, then Gi
  float* x_s = w_s + C * LD;     // [C][LD] k e^{g-Gi}   or  scale q e^{Ge}
  float* y_s = x_s + C * LD;     // [C][LD] v            or  dO
  float* gam_s = y_s + C * LD;   // [W] gamma per key column

  const bool reverse = (blockIdx.z + z_offset) == 1;
  const int64_t B = a.dims.B, T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int64_t NT = (T + C - 1) / C;
  const int ntile = static_cast<int>(D / W);
  const int tr = blockIdx.x / ntile, tc = blockIdx.x % ntile;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H;
  (void)B;
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t rs = H * D;
  const int64_t base = (b * T * H + h) * D;
  const Tin* xsrc = static_cast<const Tin*>(reverse ? a.r : a.k) + base + tr * W;
  const Tin* ysrc = static_cast<const Tin*>(reverse ? a.dout : a.v) + base + tc * W;
  const Tin* wsrc = static_cast<const Tin*>(a.w) + base + tr * W;
  const float scale = a.scale;

  float S[TM][TM];
  const float* init = reverse ? a.dht : a.h0;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TM; ++j)
      S[i][j] = init ? init[(bh * D + tr * W + ty + 16 * i) * D + tc * W + tx + 16 * j] : 0.f;
  float* traj = reverse ? a.dh : a.h;

  float rw[E], rx[E], ry[E];
  auto prefetch = [&](int64_t n) {
    const int L = rows_in_chunk(C, T, n);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int idx = tid + e * kThreads, r = idx / W, c = idx % W;
      const int64_t off = (n * C + r) * rs + c;
      const bool ok = r < L;
      rw[e] = ok ? ldg(wsrc, off) : 0.f;
      rx[e] = ok ? ldg(xsrc, off) : 0.f;
      ry[e] = ok ? ldg(ysrc, off) : 0.f;
    }
  };
  prefetch(reverse ? NT - 1 : 0);
  for (int64_t step = 0; step < NT; ++step) {
    const int64_t n = reverse ? NT - 1 - step : step;
    float* out = traj + ((bh * NT + n) * D + tr * W) * D + tc * W;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TM; ++j) out[(ty + 16 * i) * D + tx + 16 * j] = S[i][j];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int idx = tid + e * kThreads, r = idx / W, c = idx % W;
      w_s[r * LD + c] = rw[e];
      x_s[r * LD + c] = rx[e];
      y_s[r * LD + c] = ry[e];
    }
    __syncthreads();
    if (step + 1 < NT) prefetch(reverse ? n - 1 : n + 1);
    column_cumsum<C, W>(w_s, [&](int r, int c, float gi, float w, float gamma) {
      x_s[r * LD + c] *= reverse ? scale * __expf(gi - w) : __expf(gamma - gi);
      if (r == C - 1) gam_s[c] = gamma;
    });
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const float decay = __expf(gam_s[ty + 16 * i]);
#pragma unroll
      for (int j = 0; j < TM; ++j) S[i][j] *= decay;
    }
#pragma unroll 8
    for (int r = 0; r < C; ++r) {
      float xa[TM], ya[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) xa[i] = x_s[r * LD + ty + 16 * i];
#pragma unroll
      for (int j = 0; j < TM; ++j) ya[j] = y_s[r * LD + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TM; ++j) S[i][j] = fmaf(xa[i], ya[j], S[i][j]);
    }
    __syncthreads();
  }
  float* fin = reverse ? a.dh0 : a.ht;
  if (fin) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TM; ++j) fin[(bh * D + tr * W + ty + 16 * i) * D + tc * W + tx + 16 * j] = S[i][j];
  }
}

// =======================================================================================
// Chunk-parallel kernels: shared memory plan (floats), C = chunk rows, NB = C / 16.
struct ChunkSmem {
  static constexpr int tile(int C) { return C * kLD; }        // [C][65] token tile
  static constexpr int state() { return kW * kLD; }           // [64][65] state tile
  static constexpr int cc(int C) { return C * (C + 1); }      // [C][C+1] dP or A
  static constexpr int vecs(int C) { return kW * (4 + 3 * (C / kBC)); }  // gam, u, dgs, spare, gs/gend/eW
};

// Forward output. grid (D/64 value tiles, NT, B*H). The CTA rebuilds A over all key tiles
// (its own copy: one per value tile) and accumulates O[:, own] = scale (Q e^Ge) h[n][:, own] + A V.
template <int C>
constexpr int fwd_output_smem_floats() {
  return 5 * ChunkSmem::tile(C) + ChunkSmem::state() + ChunkSmem::vecs(C);
}

template <class Tin, int C>
__global__ void __launch_bounds__(kThreads) rwkv6_fwd_output(const CudaArgs a) {
  constexpr int TM = C / 16, NB = C / kBC, LDC = C + 1;
  extern __shared__ float smem[];
  float* q_s = smem;                          // q, then q~
  float* k_s = q_s + ChunkSmem::tile(C);      // k, then k~
  float* gi_s = k_s + ChunkSmem::tile(C);     // w, then Gi
  float* ge_s = gi_s + ChunkSmem::tile(C);    // Ge, then q e^Ge
  float* x_s = ge_s + ChunkSmem::tile(C);     // A (after the key loop) [C][C+1]
  float* h_s = x_s + ChunkSmem::tile(C);      // h[n] block [64][65], then V [C][65]
  float* gam_s = h_s + ChunkSmem::state();
  float* u_s = gam_s + kW;
  float* gs_s = u_s + 3 * kW;                 // [NB][64]
  float* gend_s = gs_s + NB * kW;
  float* eW_s = gend_s + NB * kW;

  const int64_t T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int vt = blockIdx.x;
  const int64_t n = blockIdx.y, bh = blockIdx.z, b = bh / H, h = bh % H;
  const int64_t NT = gridDim.y;
  const int L = rows_in_chunk(C, T, n);
  const int nK = static_cast<int>(D / kW);
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t rs = H * D, base = ((b * T + n * C) * H + h) * D;
  const float scale = a.scale;
  const Tin* r = static_cast<const Tin*>(a.r) + base;
  const Tin* k = static_cast<const Tin*>(a.k) + base;
  const Tin* v = static_cast<const Tin*>(a.v) + base;
  const Tin* w = static_cast<const Tin*>(a.w) + base;
  const float* hn = a.h + (bh * NT + n) * D * D;

  float acc_o[TM][4] = {};   // rows ty+16i, value cols tx+16j of the own tile
  float acc_A[TM][TM] = {};  // rows ty+16i, cols tx+16j (unscaled)

  for (int kt = 0; kt < nK; ++kt) {
    load_tokens<Tin, C, kW>(q_s, r + kt * kW, rs, L);
    load_tokens<Tin, C, kW>(k_s, k + kt * kW, rs, L);
    load_tokens<Tin, C, kW>(gi_s, w + kt * kW, rs, L);
    load_state<kW, kW>(h_s, hn + (int64_t)kt * kW * D + vt * kW, D);
    if (tid < kW) u_s[tid] = a.u[h * D + kt * kW + tid];
    __syncthreads();
    column_cumsum<C, kW>(gi_s, [&](int rr, int c, float gi, float wv, float gamma) {
      gi_s[rr * kLD + c] = gi;
      ge_s[rr * kLD + c] = gi - wv;
      (void)gamma;
    });
    __syncthreads();
    block_refs<C>(gi_s, gs_s, gend_s, eW_s);
    // Diagonal blocks, elementwise: A[r,s] += sum_c q_r k_s e^{Ge_r - Gi_s} (s < r), q u k (s = r).
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int rr = 16 * i + ty, ss = 16 * i + tx;
      float acc = 0.f;
      if (tx < ty) {
#pragma unroll 8
        for (int c = 0; c < kW; ++c)
          acc += q_s[rr * kLD + c] * k_s[ss * kLD + c] * __expf(ge_s[rr * kLD + c] - gi_s[ss * kLD + c]);
      } else if (tx == ty) {
#pragma unroll 8
        for (int c = 0; c < kW; ++c) acc += q_s[rr * kLD + c] * u_s[c] * k_s[rr * kLD + c];
      }
      acc_A[i][i] += acc;
    }
    __syncthreads();
    // In place: q~ = q e^{Ge - gs}, k~ = k e^{gend - Gi}, qe = q e^{Ge} (over Ge).
    for (int idx = tid; idx < C * kW; idx += kThreads) {
      const int rr = idx / kW, c = idx % kW, blk = rr / kBC, o = rr * kLD + c;
      const float qv = q_s[o], kv = k_s[o], ge = ge_s[o], gi = gi_s[o];
      q_s[o] = qv * __expf(ge - gs_s[blk * kW + c]);
      k_s[o] = kv * __expf(gend_s[blk * kW + c] - gi);
      ge_s[o] = qv * __expf(ge);
    }
    __syncthreads();
#pragma unroll 4
    for (int c = 0; c < kW; ++c) {
      float qe[TM], hv[4], qt[TM], kt_[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        qe[i] = ge_s[(ty + 16 * i) * kLD + c];
        qt[i] = q_s[(ty + 16 * i) * kLD + c];
        kt_[i] = k_s[(tx + 16 * i) * kLD + c];
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) hv[j] = h_s[c * kLD + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc_o[i][j] = fmaf(qe[i], hv[j], acc_o[i][j]);
      // Off-diagonal blocks j < i: q~_r m_ij k~_s, m_ij = prod_{j<b<i} eW_b.
#pragma unroll
      for (int i = 1; i < TM; ++i) {
        float mm = qt[i];
#pragma unroll
        for (int j = i - 1; j >= 0; --j) {
          acc_A[i][j] = fmaf(mm, kt_[j], acc_A[i][j]);
          if (j > 0) mm *= eW_s[j * kW + c];
        }
      }
    }
    __syncthreads();
  }
  // A (scaled, zero above the diagonal) and the value tile, then O += A V.
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TM; ++j) {
      const int rr = ty + 16 * i, ss = tx + 16 * j;
      x_s[rr * LDC + ss] = ss <= rr ? scale * acc_A[i][j] : 0.f;
    }
  load_tokens<Tin, C, kW>(h_s, v + vt * kW, rs, L);
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc_o[i][j] *= scale;
  __syncthreads();
#pragma unroll 4
  for (int ss = 0; ss < C; ++ss) {
    float av[TM], vv[4];
#pragma unroll
    for (int i = 0; i < TM; ++i) av[i] = x_s[(ty + 16 * i) * LDC + ss];
#pragma unroll
    for (int j = 0; j < 4; ++j) vv[j] = h_s[ss * kLD + tx + 16 * j];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc_o[i][j] = fmaf(av[i], vv[j], acc_o[i][j]);
  }
  Tin* o = static_cast<Tin*>(a.o) + base + vt * kW;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int rr = ty + 16 * i;
    if (rr < L)
#pragma unroll
      for (int j = 0; j < 4; ++j) stg(o, rr * rs + tx + 16 * j, acc_o[i][j]);
  }
}

// =======================================================================================
// Backward chunk kernel. grid (D/64 own tiles, NT, B*H). kMode:
//   kModeFused  all of dq, dk, dv, dw and the du partials, intra and inter parts in
//               registers, each gradient written once in the input dtype;
//   kModeIntra  only the intra-chunk dq', dk' of the own key tile -> fp32 dq_tmp, dk_tmp;
//   kModeInter  everything else, reading dq_tmp, dk_tmp back (the fallback's second half).
// Phases: (1) value-tile loop: dP = dO V^T (full), dO h^T and V dh^T for the own key rows,
//         sum_v h . dh (own rows); (2) key-tile loop, own tile last: gates, A, K' dh for
//         the own value columns; the own tile's q, k, Gi, Ge stay in shared memory;
//         (3) dV = A^T dO + K' dh; intra dq'/dk' (Horner over block decays + diagonal
//         blocks); glue: dgamma, dw by a column reverse scan, u terms, du partials.
template <int C>
constexpr int bwd_smem_floats() {
  return 6 * ChunkSmem::tile(C) + 2 * ChunkSmem::state() + ChunkSmem::cc(C) + ChunkSmem::vecs(C);
}

template <class Tin, int C, int kMode>
__global__ void __launch_bounds__(kThreads) rwkv6_bwd_chunk(const CudaArgs a) {
  constexpr bool kIntra = kMode != kModeInter, kInter = kMode != kModeIntra;
  constexpr int TM = C / 16, NB = C / kBC, LDC = C + 1;
  extern __shared__ float smem[];
  float* t0 = smem;                        // dO | q        (own tile at the end)
  float* t1 = t0 + ChunkSmem::tile(C);     // V  | k
  float* t2 = t1 + ChunkSmem::tile(C);     // w -> Gi
  float* t3 = t2 + ChunkSmem::tile(C);     // Ge
  float* t4 = t3 + ChunkSmem::tile(C);     // k e^{g-Gi}, then k~ ; x = q dq' at the end
  float* t5 = t4 + ChunkSmem::tile(C);     // q~ ; y = k dk' at the end
  float* s0 = t5 + ChunkSmem::tile(C);     // h rows | dh block | dO own | z
  float* s1 = s0 + ChunkSmem::state();     // dh rows | A [C][C+1] | p
  float* p_s = s1 + ChunkSmem::state();    // dP [C][C+1], scaled, zero above the diagonal
  float* gam_s = p_s + ChunkSmem::cc(C);   // [64]
  float* u_s = gam_s + kW;                 // [64]
  float* dgs_s = u_s + kW;                 // [64] sum_v h . dh of the own key rows
  float* gs_s = dgs_s + 2 * kW;            // [NB][64]
  float* gend_s = gs_s + NB * kW;
  float* eW_s = gend_s + NB * kW;
  float* as_s = s1;

  const int64_t T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int jt = blockIdx.x;
  const int64_t n = blockIdx.y, bh = blockIdx.z, b = bh / H, h = bh % H;
  const int64_t NT = gridDim.y;
  const int L = rows_in_chunk(C, T, n);
  const int nK = static_cast<int>(D / kW);
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t rs = H * D, base = ((b * T + n * C) * H + h) * D;
  const float scale = a.scale;
  const Tin* r = static_cast<const Tin*>(a.r) + base;
  const Tin* k = static_cast<const Tin*>(a.k) + base;
  const Tin* v = static_cast<const Tin*>(a.v) + base;
  const Tin* w = static_cast<const Tin*>(a.w) + base;
  const Tin* dout = static_cast<const Tin*>(a.dout) + base;
  const float* hn = a.h + (bh * NT + n) * D * D;
  const float* dhn = a.dh + (bh * NT + n) * D * D;

  float acc_dP[TM][TM] = {};
  float acc_dqS[TM][4] = {};   // (dO h^T)[r, own key col]
  float acc_dkS[TM][4] = {};   // (V dh^T)[r, own key col]
  float acc_A[TM][TM] = {};
  float acc_dv[TM][4] = {};    // rows s, own value cols
  float dgs = 0.f;

  // ---- phase 1: value-tile loop
  for (int vt = 0; vt < nK; ++vt) {
    load_tokens<Tin, C, kW>(t0, dout + vt * kW, rs, L);
    load_tokens<Tin, C, kW>(t1, v + vt * kW, rs, L);
    if constexpr (kInter) {
      load_state<kW, kW>(s0, hn + (int64_t)jt * kW * D + vt * kW, D);
      load_state<kW, kW>(s1, dhn + (int64_t)jt * kW * D + vt * kW, D);
    }
    __syncthreads();
#pragma unroll 4
    for (int c = 0; c < kW; ++c) {
      float dor[TM], vs[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        dor[i] = t0[(ty + 16 * i) * kLD + c];
        vs[i] = t1[(tx + 16 * i) * kLD + c];
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j <= i; ++j) acc_dP[i][j] = fmaf(dor[i], vs[j], acc_dP[i][j]);
      if constexpr (kInter) {
        float vr[TM], sd[4], sp[4];
#pragma unroll
        for (int i = 0; i < TM; ++i) vr[i] = t1[(ty + 16 * i) * kLD + c];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          sd[j] = s0[(tx + 16 * j) * kLD + c];
          sp[j] = s1[(tx + 16 * j) * kLD + c];
        }
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc_dqS[i][j] = fmaf(dor[i], sd[j], acc_dqS[i][j]);
            acc_dkS[i][j] = fmaf(vr[i], sp[j], acc_dkS[i][j]);
          }
      }
    }
    if constexpr (kInter) {
      const int row = tid / 4, seg = tid % 4;
#pragma unroll
      for (int c = 0; c < 16; ++c) dgs += s0[row * kLD + seg * 16 + c] * s1[row * kLD + seg * 16 + c];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TM; ++j) {
      const int rr = ty + 16 * i, ss = tx + 16 * j;
      p_s[rr * LDC + ss] = ss <= rr ? scale * acc_dP[i][j] : 0.f;
    }
  if constexpr (kInter) {
    dgs += __shfl_xor_sync(0xffffffffu, dgs, 1);
    dgs += __shfl_xor_sync(0xffffffffu, dgs, 2);
    if (tid % 4 == 0) dgs_s[tid / 4] = dgs;
  }

  // ---- phase 2: key-tile loop, own tile last
  const int nIter = kInter ? nK : 1;
  for (int it = 0; it < nIter; ++it) {
    const int kt = kInter ? (jt + 1 + it) % nK : jt;
    load_tokens<Tin, C, kW>(t0, r + kt * kW, rs, L);
    load_tokens<Tin, C, kW>(t1, k + kt * kW, rs, L);
    load_tokens<Tin, C, kW>(t2, w + kt * kW, rs, L);
    if constexpr (kInter) {
      load_state<kW, kW>(s0, dhn + (int64_t)kt * kW * D + jt * kW, D);
      if (tid < kW) u_s[tid] = a.u[h * D + kt * kW + tid];
    }
    __syncthreads();
    column_cumsum<C, kW>(t2, [&](int rr, int c, float gi, float wv, float gamma) {
      t2[rr * kLD + c] = gi;
      t3[rr * kLD + c] = gi - wv;
      if (rr == C - 1) gam_s[c] = gamma;
    });
    __syncthreads();
    block_refs<C>(t2, gs_s, gend_s, eW_s);
    if constexpr (kInter) {
      for (int idx = tid; idx < C * kW; idx += kThreads) {
        const int rr = idx / kW, c = idx % kW, o = rr * kLD + c;
        t4[o] = t1[o] * __expf(gam_s[c] - t2[o]);
      }
    }
    __syncthreads();
    if constexpr (kInter) {
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int rr = 16 * i + ty, ss = 16 * i + tx;
        float acc = 0.f;
        if (tx < ty) {
#pragma unroll 8
          for (int c = 0; c < kW; ++c)
            acc += t0[rr * kLD + c] * t1[ss * kLD + c] * __expf(t3[rr * kLD + c] - t2[ss * kLD + c]);
        } else if (tx == ty) {
#pragma unroll 8
          for (int c = 0; c < kW; ++c) acc += t0[rr * kLD + c] * u_s[c] * t1[rr * kLD + c];
        }
        acc_A[i][i] += acc;
      }
#pragma unroll 4
      for (int c = 0; c < kW; ++c) {
        float kd[TM], sp[4];
#pragma unroll
        for (int i = 0; i < TM; ++i) kd[i] = t4[(ty + 16 * i) * kLD + c];
#pragma unroll
        for (int j = 0; j < 4; ++j) sp[j] = s0[c * kLD + tx + 16 * j];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc_dv[i][j] = fmaf(kd[i], sp[j], acc_dv[i][j]);
      }
      __syncthreads();
    }
    for (int idx = tid; idx < C * kW; idx += kThreads) {
      const int rr = idx / kW, c = idx % kW, blk = rr / kBC, o = rr * kLD + c;
      t5[o] = t0[o] * __expf(t3[o] - gs_s[blk * kW + c]);
      t4[o] = t1[o] * __expf(gend_s[blk * kW + c] - t2[o]);
    }
    __syncthreads();
    if constexpr (kInter) {
#pragma unroll 4
      for (int c = 0; c < kW; ++c) {
        float qt[TM], kt_[TM];
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          qt[i] = t5[(ty + 16 * i) * kLD + c];
          kt_[i] = t4[(tx + 16 * i) * kLD + c];
        }
#pragma unroll
        for (int i = 1; i < TM; ++i) {
          float mm = qt[i];
#pragma unroll
          for (int j = i - 1; j >= 0; --j) {
            acc_A[i][j] = fmaf(mm, kt_[j], acc_A[i][j]);
            if (j > 0) mm *= eW_s[j * kW + c];
          }
        }
      }
      __syncthreads();
    }
  }

  // ---- phase 3
  const int own = jt * kW;
  if constexpr (kInter) {
    // dV[s, own] = sum_r A[r, s] dO[r, own] + (K e^{g-Gi} dh)[s, own]
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TM; ++j) {
        const int rr = ty + 16 * i, ss = tx + 16 * j;
        as_s[rr * LDC + ss] = ss <= rr ? scale * acc_A[i][j] : 0.f;
      }
    load_tokens<Tin, C, kW>(s0, dout + own, rs, L);
    __syncthreads();
#pragma unroll 4
    for (int rr = 0; rr < C; ++rr) {
      float av[TM], dv[4];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = as_s[rr * LDC + ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) dv[j] = s0[rr * kLD + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc_dv[i][j] = fmaf(av[i], dv[j], acc_dv[i][j]);
    }
    Tin* dvp = static_cast<Tin*>(a.dv) + base + own;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int ss = ty + 16 * i;
      if (ss < L)
#pragma unroll
        for (int j = 0; j < 4; ++j) stg(dvp, ss * rs + tx + 16 * j, acc_dv[i][j]);
    }
  }

  float dqI[TM][4] = {}, dkI[TM][4] = {};
  if constexpr (kIntra) {
    // dq' intra, off-diagonal: R_jb = R_{jb-1} e^{W_jb} + sum_{s in jb} dP[r,s] k~_s, then x e^{Ge_r - gs_i}.
#pragma unroll
    for (int jb = 0; jb < NB - 1; ++jb) {
      if (jb > 0) {
#pragma unroll
        for (int i = jb + 1; i < TM; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) dqI[i][j] *= eW_s[jb * kW + tx + 16 * j];
      }
#pragma unroll 4
      for (int q = 0; q < kBC; ++q) {
        const int ss = jb * kBC + q;
        float kt_[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) kt_[j] = t4[ss * kLD + tx + 16 * j];
#pragma unroll
        for (int i = jb + 1; i < TM; ++i) {
          const float pr = p_s[(ty + 16 * i) * LDC + ss];
#pragma unroll
          for (int j = 0; j < 4; ++j) dqI[i][j] = fmaf(pr, kt_[j], dqI[i][j]);
        }
      }
    }
#pragma unroll
    for (int i = 1; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int rr = ty + 16 * i, c = tx + 16 * j;
        dqI[i][j] *= __expf(t3[rr * kLD + c] - gs_s[i * kW + c]);
      }
    // dk' intra, off-diagonal: Q_ib = Q_{ib+1} e^{W_ib} + sum_{r in ib} dP[r,s] q~_r (top down),
    // then x e^{gend_j - Gi_s}.
#pragma unroll
    for (int ib = NB - 1; ib >= 1; --ib) {
#pragma unroll
      for (int i = 0; i < ib; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) dkI[i][j] *= eW_s[ib * kW + tx + 16 * j];
#pragma unroll 4
      for (int q = 0; q < kBC; ++q) {
        const int rr = ib * kBC + q;
        float qt[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) qt[j] = t5[rr * kLD + tx + 16 * j];
#pragma unroll
        for (int i = 0; i < ib; ++i) {
          const float pr = p_s[rr * LDC + ty + 16 * i];
#pragma unroll
          for (int j = 0; j < 4; ++j) dkI[i][j] = fmaf(pr, qt[j], dkI[i][j]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < TM - 1; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int ss = ty + 16 * i, c = tx + 16 * j;
        dkI[i][j] *= __expf(gend_s[i * kW + c] - t2[ss * kLD + c]);
      }
    // Diagonal blocks, elementwise.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int rr = 16 * i + ty;
      for (int q = 0; q < ty; ++q) {
        const int ss = 16 * i + q;
        const float pr = p_s[rr * LDC + ss];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = tx + 16 * j;
          dqI[i][j] += pr * t1[ss * kLD + c] * __expf(t3[rr * kLD + c] - t2[ss * kLD + c]);
        }
      }
      const int ss = 16 * i + ty;
      for (int q = ty + 1; q < kBC; ++q) {
        const int r2 = 16 * i + q;
        const float pr = p_s[r2 * LDC + ss];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = tx + 16 * j;
          dkI[i][j] += pr * t0[r2 * kLD + c] * __expf(t3[r2 * kLD + c] - t2[ss * kLD + c]);
        }
      }
    }
  }
  if constexpr (kMode == kModeIntra) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int rr = ty + 16 * i;
      if (rr < L)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t o = base + rr * rs + own + tx + 16 * j;
          a.dq_tmp[o] = dqI[i][j];
          a.dk_tmp[o] = dkI[i][j];
        }
    }
    return;
  }
  if constexpr (kMode == kModeInter) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int rr = ty + 16 * i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t o = base + rr * rs + own + tx + 16 * j;
        dqI[i][j] = rr < L ? a.dq_tmp[o] : 0.f;
        dkI[i][j] = rr < L ? a.dk_tmp[o] : 0.f;
      }
    }
  }
  if constexpr (kInter) {
    __syncthreads();  // t4, t5, s0, s1 are reused below
    Tin* dqp = static_cast<Tin*>(a.dr) + base + own;
    Tin* dkp = static_cast<Tin*>(a.dk) + base + own;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int rr = ty + 16 * i, c = tx + 16 * j, o = rr * kLD + c;
        const float qv = t0[o], kv = t1[o], gi = t2[o], ge = t3[o];
        const float ekd = __expf(gam_s[c] - gi);
        const float dqp_ = scale * acc_dqS[i][j] * __expf(ge) + dqI[i][j];
        const float dkp_ = acc_dkS[i][j] * ekd + dkI[i][j];
        const float pd = p_s[rr * LDC + rr];
        const float pdu = pd * u_s[c];
        t4[o] = qv * dqp_;                // x
        t5[o] = kv * dkp_;                // y
        s0[o] = kv * acc_dkS[i][j] * ekd;  // z (dgamma's inter term)
        s1[o] = pd * qv * kv;             // p (du)
        if (rr < L) {
          stg(dqp, rr * rs + c, dqp_ + pdu * kv);
          stg(dkp, rr * rs + c, dkp_ + pdu * qv);
        }
      }
    __syncthreads();
    // Column reverse scan: dw_j = sum_{r>j} x_r - sum_{r>=j} y_r + dgamma.
    constexpr int P = 4, R = C / P;
    const int c = tid / P, seg = tid % P;
    float sx = 0.f, sy = 0.f, sz = 0.f, sp = 0.f;
#pragma unroll
    for (int q = 0; q < R; ++q) {
      const int o = (seg * R + q) * kLD + c;
      sx += t4[o];
      sy += t5[o];
      sz += s0[o];
      sp += s1[o];
    }
    float ix = sx, iy = sy, iz = sz, ip = sp;   // inclusive suffix sums over segments
#pragma unroll
    for (int off = 1; off < P; off <<= 1) {
      const float yx = __shfl_down_sync(0xffffffffu, ix, off, P);
      const float yy = __shfl_down_sync(0xffffffffu, iy, off, P);
      const float yz = __shfl_down_sync(0xffffffffu, iz, off, P);
      const float yp = __shfl_down_sync(0xffffffffu, ip, off, P);
      if (seg + off < P) ix += yx, iy += yy, iz += yz, ip += yp;
    }
    const float ztot = __shfl_sync(0xffffffffu, iz, 0, P);
    const float ptot = __shfl_sync(0xffffffffu, ip, 0, P);
    const float dgam = __expf(gam_s[c]) * dgs_s[c] + ztot;
    float xa = ix - sx, ya = iy - sy;
    Tin* dwp = static_cast<Tin*>(a.dw) + base + own;
#pragma unroll
    for (int q = R - 1; q >= 0; --q) {
      const int rr = seg * R + q, o = rr * kLD + c;
      ya += t5[o];
      if (rr < L) stg(dwp, rr * rs + c, xa - ya + dgam);
      xa += t4[o];
    }
    if (seg == 0) a.du_part[((b * NT + n) * H + h) * D + own + c] = ptot;
  }
}

// du[h, d] = sum_{b, n} du_part[b, n, h, d] in a fixed order (deterministic). grid (H), D threads.
__global__ void __launch_bounds__(256) rwkv6_du_reduce(const CudaArgs a) {
  const int64_t H = a.dims.H, D = a.dims.D;
  const int64_t BN = a.dims.B * ((a.dims.T + a.dims.chunk - 1) / a.dims.chunk);
  const int64_t h = blockIdx.x;
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    int64_t i = 0;
    for (; i + 4 <= BN; i += 4)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[q] += a.du_part[((i + q) * H + h) * D + c];
    for (; i < BN; ++i) acc[0] += a.du_part[(i * H + h) * D + c];
    a.du[h * D + c] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  }
}

// ---------------------------------------------------------------------------------------
// Raises a kernel's dynamic shared-memory limit once per process: `done` is a static of the
// (per-instantiation) launcher, since kernels of one signature share a pointer type.
template <class Kernel>
void set_smem(Kernel kernel, size_t bytes, size_t& done) {
  if (done >= bytes) return;
  LT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  done = bytes;
}

template <class T, int C, int W>
void launch_scan(const CudaArgs& a, int nz, int z_offset, cudaStream_t stream) {
  const size_t smem = (3 * C * (W + 1) + W) * sizeof(float);
  auto kernel = rwkv6_state_scan<T, C, W>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  const int64_t nt = a.dims.D / W;
  dim3 grid(static_cast<unsigned>(nt * nt), static_cast<unsigned>(a.dims.B * a.dims.H), nz);
  LT_LAUNCH(kernel, grid, kThreads, smem, stream, a, z_offset);
}

// State-scan tile width: 64 x 64 tiles, except D = 64 where 32 x 32 tiles give 4x the CTAs
// (B*H alone is below the SM count at the benchmark shapes). LT_RWKV6_SCAN_W=64 overrides
// (development experiments).
bool scan_tile_32(int64_t D) {
  static const int forced = [] {
    const char* e = std::getenv("LT_RWKV6_SCAN_W");
    return e ? std::atoi(e) : 0;
  }();
  return D == 64 && forced != 64;
}

template <class T, int C>
void forward_t(const CudaArgs& a, cudaStream_t stream) {
  {
    StageScope s("state_scan");
    if (scan_tile_32(a.dims.D)) launch_scan<T, C, 32>(a, 1, 0, stream);
    else launch_scan<T, C, 64>(a, 1, 0, stream);
  }
  {
    StageScope s("output");
    const size_t smem = fwd_output_smem_floats<C>() * sizeof(float);
    auto kernel = rwkv6_fwd_output<T, C>;
    static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
    dim3 grid(static_cast<unsigned>(a.dims.D / kW), static_cast<unsigned>(a.dims.num_chunks()),
              static_cast<unsigned>(a.dims.B * a.dims.H));
    LT_LAUNCH(kernel, grid, kThreads, smem, stream, a);
  }
}

template <class T, int C, int kMode>
void launch_bwd_chunk(const CudaArgs& a, cudaStream_t stream) {
  const size_t smem = bwd_smem_floats<C>() * sizeof(float);
  auto kernel = rwkv6_bwd_chunk<T, C, kMode>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  dim3 grid(static_cast<unsigned>(a.dims.D / kW), static_cast<unsigned>(a.dims.num_chunks()),
            static_cast<unsigned>(a.dims.B * a.dims.H));
  LT_LAUNCH(kernel, grid, kThreads, smem, stream, a);
}

template <class T, int C>
void backward_t(const CudaArgs& a0, BwdImpl impl, bool h_is_valid, cudaStream_t stream) {
  CudaArgs a = a0;
  a.ht = nullptr;  // the recomputed forward scan must not touch the forward's outputs
  {
    StageScope s("scans");
    const int nz = h_is_valid ? 1 : 2, z0 = h_is_valid ? 1 : 0;
    if (scan_tile_32(a.dims.D)) launch_scan<T, C, 32>(a, nz, z0, stream);
    else launch_scan<T, C, 64>(a, nz, z0, stream);
  }
  if (impl == BwdImpl::kFused) {
    StageScope s("chunk_fused");
    launch_bwd_chunk<T, C, kModeFused>(a, stream);
  } else {
    {
      StageScope s("chunk_intra");
      launch_bwd_chunk<T, C, kModeIntra>(a, stream);
    }
    StageScope s("chunk_inter");
    launch_bwd_chunk<T, C, kModeInter>(a, stream);
  }
  {
    StageScope s("du_reduce");
    LT_LAUNCH(rwkv6_du_reduce, dim3(static_cast<unsigned>(a.dims.H)), 256, 0, stream, a);
  }
}

template <class T>
void forward_dispatch(const CudaArgs& a, cudaStream_t s) {
  switch (a.dims.chunk) {
    case 16: return forward_t<T, 16>(a, s);
    case 32: return forward_t<T, 32>(a, s);
    default: return forward_t<T, 64>(a, s);
  }
}
template <class T>
void backward_dispatch(const CudaArgs& a, BwdImpl impl, bool hv, cudaStream_t s) {
  switch (a.dims.chunk) {
    case 16: return backward_t<T, 16>(a, impl, hv, s);
    case 32: return backward_t<T, 32>(a, impl, hv, s);
    default: return backward_t<T, 64>(a, impl, hv, s);
  }
}

}  // namespace

size_t cuda_scratch_bytes_forward(const Dims& d) { return static_cast<size_t>(d.states_numel()) * sizeof(float); }

size_t cuda_scratch_bytes_backward(const Dims& d, BwdImpl impl) {
  size_t bytes = 2 * static_cast<size_t>(d.states_numel()) * sizeof(float) +
                 static_cast<size_t>(d.du_part_numel()) * sizeof(float);
  if (impl == BwdImpl::kFallback) bytes += 2 * static_cast<size_t>(d.tokens_numel()) * sizeof(float);
  return bytes;
}

void cuda_check_args(const CudaArgs& a, bool backward, BwdImpl impl) {
  const Dims& d = a.dims;
  auto fail = [](const std::string& why) { throw std::invalid_argument("rwkv6 cuda: " + why); };
  if (d.B < 1 || d.T < 1 || d.H < 1) fail("B, T, H must be >= 1");
  if (d.D < 64 || d.D % 64 != 0) fail("D must be a multiple of 64, got " + std::to_string(d.D));
  if (d.chunk != 16 && d.chunk != 32 && d.chunk != 64) fail("chunk must be 16, 32 or 64");
  if (a.dtype != DType::f32 && a.dtype != DType::bf16) fail("dtype must be f32 or bf16");
  if (d.B * d.H > 65535 || d.num_chunks() > 65535) fail("B*H and T/chunk must be <= 65535");
  if (!a.r || !a.k || !a.v || !a.w || !a.u || !a.h) fail("r, k, v, w, u and the state scratch h are required");
  if (!backward && !a.o) fail("o is required");
  if (backward) {
    if (!a.dout || !a.dr || !a.dk || !a.dv || !a.dw || !a.du || !a.dh || !a.du_part)
      fail("dout, dr, dk, dv, dw, du and the scratch dh, du_part are required");
    if (impl == BwdImpl::kFallback && (!a.dq_tmp || !a.dk_tmp)) fail("the fallback needs dq_tmp and dk_tmp");
  }
}

void cuda_forward(const CudaArgs& a, void* stream) {
  cuda_check_args(a, false, BwdImpl::kFused);
  auto s = static_cast<cudaStream_t>(stream);
  if (a.dtype == DType::bf16) forward_dispatch<bfloat16>(a, s);
  else forward_dispatch<float>(a, s);
}

void cuda_backward(const CudaArgs& a, BwdImpl impl, bool h_is_valid, void* stream) {
  cuda_check_args(a, true, impl);
  auto s = static_cast<cudaStream_t>(stream);
  if (a.dtype == DType::bf16) backward_dispatch<bfloat16>(a, impl, h_is_valid, s);
  else backward_dispatch<float>(a, impl, h_is_valid, s);
}

}  // namespace lt::rwkv6
