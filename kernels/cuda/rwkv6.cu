// RWKV6 chunked forward and backward on CUDA. Math, shapes and accumulation rules:
// kernels/rwkv6.h (top comment); CPU twins of every kernel: kernels/cpu/rwkv6.cpp.
//
// Launches
//   forward   rwkv6_state_scan (z=0: h[n], ht)  |  rwkv6_fwd_output (o)                  2
//   backward  rwkv6_state_scan (z=0: h again, z=1: dh reverse; both in one grid)
//             | rwkv6_bwd_chunk<all>                        | rwkv6_du_reduce         3
//   fallback  rwkv6_state_scan | rwkv6_bwd_chunk<intra> (fp32 dq'/dk' intra to scratch)
//             | rwkv6_bwd_chunk<inter> (reads them back) | rwkv6_du_reduce               4
//
// Two kernel families with the same launches and grids: the tensor-core kernels (namespace
// tck below: bf16 at chunk 32 / 64; mma.m16n8k16, Variant::tensor_core) and the SIMT fp32
// kernels (fp32 inputs, bf16 at chunk 16, or LINTRAIN_RWKV6_KERNELS=simt), described next.
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
#include "kernels/cuda/mma.cuh"
#include "kernels/half.h"
#include "kernels/launch.h"
#include "kernels/rwkv6.h"

namespace lt::rwkv6 {
namespace {

constexpr int kThreads = 256;
constexpr int kW = 64;       // width of a D tile in the chunk kernels
constexpr int kLD = kW + 1;  // its padded row stride (floats)
constexpr int kBC = 16;      // rows per factorisation block

__device__ __forceinline__ int rows_in_chunk(int C, int64_t T, int64_t n) {
  const int64_t left = T - n * C;
  return left < C ? static_cast<int>(left) : C;
}
template <class T>
__device__ __forceinline__ float ldg(const T* p, int64_t i) {
  return load_as_compute(p[i]);
}
template <class T>
__device__ __forceinline__ void stg(T* p, int64_t i, float x) {
  p[i] = store_from_compute<T>(x);
}

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
__global__ void __launch_bounds__(kThreads) rwkv6_state_scan(const FusedArgs a, int z_offset) {
  constexpr int LD = W + 1, TM = W / 16, E = C * W / kThreads;
  static_assert(E >= 1 && (C * W) % kThreads == 0, "tile elements per thread");
  extern __shared__ float smem[];
  float* w_s = smem;            // [C][LD] w, then Gi
  float* x_s = w_s + C * LD;    // [C][LD] k e^{g-Gi}   or  scale q e^{Ge}
  float* y_s = x_s + C * LD;    // [C][LD] v            or  dO
  float* gam_s = y_s + C * LD;  // [W] gamma per key column

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
  const Tin* ysrc = static_cast<const Tin*>(reverse ? a.dO : a.v) + base + tc * W;
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
  static constexpr int tile(int C) { return C * kLD; }                   // [C][65] token tile
  static constexpr int state() { return kW * kLD; }                      // [64][65] state tile
  static constexpr int cc(int C) { return C * (C + 1); }                 // [C][C+1] dP or A
  static constexpr int vecs(int C) { return kW * (4 + 3 * (C / kBC)); }  // gam, u, dgs, spare, gs/gend/eW
};

// Forward output. grid (D/64 value tiles, NT, B*H). The CTA rebuilds A over all key tiles
// (its own copy: one per value tile) and accumulates O[:, own] = scale (Q e^Ge) h[n][:, own] + A V.
template <int C>
constexpr int fwd_output_smem_floats() {
  return 5 * ChunkSmem::tile(C) + ChunkSmem::state() + ChunkSmem::vecs(C);
}

template <class Tin, int C>
__global__ void __launch_bounds__(kThreads) rwkv6_fwd_output(const FusedArgs a) {
  constexpr int TM = C / 16, NB = C / kBC, LDC = C + 1;
  extern __shared__ float smem[];
  float* q_s = smem;                        // q, then q~
  float* k_s = q_s + ChunkSmem::tile(C);    // k, then k~
  float* gi_s = k_s + ChunkSmem::tile(C);   // w, then Gi
  float* ge_s = gi_s + ChunkSmem::tile(C);  // Ge, then q e^Ge
  float* x_s = ge_s + ChunkSmem::tile(C);   // A (after the key loop) [C][C+1]
  float* h_s = x_s + ChunkSmem::tile(C);    // h[n] block [64][65], then V [C][65]
  float* gam_s = h_s + ChunkSmem::state();
  float* u_s = gam_s + kW;
  float* gs_s = u_s + 3 * kW;  // [NB][64]
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
// Backward chunk kernel. grid (D/64 own tiles, NT, B*H). kPart:
//   all    all of dq, dk, dv, dw and the du partials, intra and inter parts in registers,
//          each gradient written once in the input dtype;
//   intra  only the intra-chunk dq', dk' of the own key tile -> fp32 dq_tmp, dk_tmp;
//   inter  everything else, reading dq_tmp, dk_tmp back (the fallback's second half).
// Phases: (1) value-tile loop: dP = dO V^T (full), dO h^T and V dh^T for the own key rows,
//         sum_v h . dh (own rows); (2) key-tile loop, own tile last: gates, A, K' dh for
//         the own value columns; the own tile's q, k, Gi, Ge stay in shared memory;
//         (3) dV = A^T dO + K' dh; intra dq'/dk' (Horner over block decays + diagonal
//         blocks); glue: dgamma, dw by a column reverse scan, u terms, du partials.
template <int C>
constexpr int bwd_smem_floats() {
  return 6 * ChunkSmem::tile(C) + 2 * ChunkSmem::state() + ChunkSmem::cc(C) + ChunkSmem::vecs(C);
}

template <class Tin, int C, BackwardPart kPart>
__global__ void __launch_bounds__(kThreads) rwkv6_bwd_chunk(const FusedArgs a) {
  constexpr bool kIntra = kPart != BackwardPart::inter, kInter = kPart != BackwardPart::intra;
  constexpr int TM = C / 16, NB = C / kBC, LDC = C + 1;
  extern __shared__ float smem[];
  float* t0 = smem;                       // dO | q        (own tile at the end)
  float* t1 = t0 + ChunkSmem::tile(C);    // V  | k
  float* t2 = t1 + ChunkSmem::tile(C);    // w -> Gi
  float* t3 = t2 + ChunkSmem::tile(C);    // Ge
  float* t4 = t3 + ChunkSmem::tile(C);    // k e^{g-Gi}, then k~ ; x = q dq' at the end
  float* t5 = t4 + ChunkSmem::tile(C);    // q~ ; y = k dk' at the end
  float* s0 = t5 + ChunkSmem::tile(C);    // h rows | dh block | dO own | z
  float* s1 = s0 + ChunkSmem::state();    // dh rows | A [C][C+1] | p
  float* p_s = s1 + ChunkSmem::state();   // dP [C][C+1], scaled, zero above the diagonal
  float* gam_s = p_s + ChunkSmem::cc(C);  // [64]
  float* u_s = gam_s + kW;                // [64]
  float* dgs_s = u_s + kW;                // [64] sum_v h . dh of the own key rows
  float* gs_s = dgs_s + 2 * kW;           // [NB][64]
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
  const Tin* dO = static_cast<const Tin*>(a.dO) + base;
  const float* hn = a.h + (bh * NT + n) * D * D;
  const float* dhn = a.dh + (bh * NT + n) * D * D;

  float acc_dP[TM][TM] = {};
  float acc_dqS[TM][4] = {};  // (dO h^T)[r, own key col]
  float acc_dkS[TM][4] = {};  // (V dh^T)[r, own key col]
  float acc_A[TM][TM] = {};
  float acc_dv[TM][4] = {};  // rows s, own value cols
  float dgs = 0.f;

  // ---- phase 1: value-tile loop
  for (int vt = 0; vt < nK; ++vt) {
    load_tokens<Tin, C, kW>(t0, dO + vt * kW, rs, L);
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
    load_tokens<Tin, C, kW>(s0, dO + own, rs, L);
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
  if constexpr (kPart == BackwardPart::intra) {
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
  if constexpr (kPart == BackwardPart::inter) {
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
        t4[o] = qv * dqp_;                 // x
        t5[o] = kv * dkp_;                 // y
        s0[o] = kv * acc_dkS[i][j] * ekd;  // z (dgamma's inter term)
        s1[o] = pd * qv * kv;              // p (du)
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
    float ix = sx, iy = sy, iz = sz, ip = sp;  // inclusive suffix sums over segments
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

// du[h, d] = sum_{b, n} du_part[b, n, h, d] in a fixed order (deterministic). grid (H, D/32),
// 256 threads = 32 columns x 8 row groups: group j sums the partials i = j, j + 8, ... (two
// accumulators), then the 8 group sums are added in order. Coalesced 128-byte rows, 16x the
// threads in flight of one thread per column.
__global__ void __launch_bounds__(256) rwkv6_du_reduce(const FusedArgs a) {
  __shared__ float part[8][33];
  const int64_t H = a.dims.H, D = a.dims.D;
  const int64_t BN = a.dims.B * ((a.dims.T + a.dims.chunk - 1) / a.dims.chunk);
  const int64_t h = blockIdx.x;
  const int cl = threadIdx.x & 31, grp = threadIdx.x >> 5;
  const int64_t c = blockIdx.y * 32 + cl;
  float acc0 = 0.f, acc1 = 0.f;
  int64_t i = grp;
  for (; i + 8 < BN; i += 16) {
    acc0 += a.du_part[(i * H + h) * D + c];
    acc1 += a.du_part[((i + 8) * H + h) * D + c];
  }
  if (i < BN) acc0 += a.du_part[(i * H + h) * D + c];
  part[grp][cl] = acc0 + acc1;
  __syncthreads();
  if (grp == 0) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) s += part[j][cl];
    a.du[h * D + c] = s;
  }
}

// =======================================================================================
// Tensor-core kernels: bf16 inputs, chunk C = 32 or 64. The algebra (bf16 operands, fp32
// accumulation, the safe-column diagonal blocks) is kernels/rwkv6.h's "Tensor-core variant";
// its CPU twin is Variant::tensor_core in kernels/cpu/rwkv6.cpp.
// 8 warps. In the chunk kernels warp w owns the 16-row block rb = w % NB of every C-row
// output and a column slice `part` = w / NB of it: [part*COLS, +COLS) of a 64-wide tile and
// [part*CCOLS, +CCOLS) of a C x C matrix. Accumulators are mma fragments: element e of n8
// tile nt sits at row 16 rb + g + 8 (e >> 1), column base + 8 nt + 2 t + (e & 1)
// (g = lane / 4, t = lane % 4). Operand tiles are bf16 [rows][kLDB] in shared memory, built
// elementwise (gates, exponentials, masks) and read by ldmatrix.
namespace tck {

using tc::bf16;
constexpr int kLDB = 72;  // bf16 [rows][64] tile stride (elements): 144 B rows, ldmatrix conflict-free
constexpr int kLDG = 72;  // fp32 gate / scratch tile stride (floats): float2 fragment access conflict-free

template <int C>
struct Shape {
  static_assert(C == 32 || C == 64, "tensor-core kernels: chunk 32 or 64");
  static constexpr int NB = C / 16;        // 16-row blocks
  static constexpr int NPART = 8 / NB;     // warps per row block
  static constexpr int COLS = 64 / NPART;  // 64-wide outputs: columns per warp
  static constexpr int NT8 = COLS / 8;     //   n8 tiles per warp (even)
  static constexpr int CCOLS = C / NPART;  // C x C outputs: columns per warp
  static constexpr int NC8 = CCOLS / 8;
  static constexpr int LDP = C + 8;                                 // bf16 [C][LDP] (dP, A)
  static constexpr int NF = NB >= 3 ? (NB - 1) * (NB - 2) / 2 : 0;  // folded A operands (j <= i - 2)
  static constexpr int NTPR = 256 / C;                              // threads per row in row-wise loops
  static constexpr int TOKV = C * 8 / 256;                          // uint4 per thread for a [C][64] bf16 tile
  static constexpr int TOK_BYTES = C * kLDB * 2;
  static constexpr int ST_BYTES = 64 * kLDB * 2;
  static constexpr int G_BYTES = (C + 1) * kLDG * 4;
  static constexpr int QF_BYTES = NF * 16 * kLDB * 2;
};
__host__ __device__ constexpr int fold_index(int i, int j) { return (i - 2) * (i - 1) / 2 + j; }

__device__ __forceinline__ float bf2f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void st_pair(bf16* p, float x, float y) {
  *reinterpret_cast<uint32_t*>(p) = tc::pack_bf16(x, y);
}

// A [C][64] bf16 token tile: rows >= L read as 0. `src` at (b, t0, h, col0), rows rs apart.
template <int C>
struct TokTile {
  uint4 v[Shape<C>::TOKV];
  __device__ __forceinline__ void load(const bf16* src, int64_t rs, int L) {
#pragma unroll
    for (int p = 0; p < Shape<C>::TOKV; ++p) {
      const int idx = threadIdx.x + 256 * p, r = idx >> 3, c8 = (idx & 7) * 8;
      v[p] = r < L ? *reinterpret_cast<const uint4*>(src + r * rs + c8) : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  __device__ __forceinline__ void store(bf16* dst) const {
#pragma unroll
    for (int p = 0; p < Shape<C>::TOKV; ++p) {
      const int idx = threadIdx.x + 256 * p, r = idx >> 3, c8 = (idx & 7) * 8;
      *reinterpret_cast<uint4*>(dst + r * kLDB + c8) = v[p];
    }
  }
};

// A [64][64] block of an fp32 [D][D] state (row stride D) -> bf16 smem. Thread: row tid/4,
// columns 4 (tid%4) + 16 p, p < 4 (64 B contiguous per 4 lanes).
struct StateTile {
  float4 v[4];
  __device__ __forceinline__ void load(const float* src, int64_t D) {
    const int r = threadIdx.x >> 2, c0 = (threadIdx.x & 3) * 4;
#pragma unroll
    for (int p = 0; p < 4; ++p) v[p] = *reinterpret_cast<const float4*>(src + r * D + c0 + 16 * p);
  }
  __device__ __forceinline__ void store(bf16* dst) const {
    const int r = threadIdx.x >> 2, c0 = (threadIdx.x & 3) * 4;
#pragma unroll
    for (int p = 0; p < 4; ++p)
      *reinterpret_cast<uint2*>(dst + r * kLDB + c0 + 16 * p) =
          make_uint2(tc::pack_bf16(v[p].x, v[p].y), tc::pack_bf16(v[p].z, v[p].w));
  }
  __device__ __forceinline__ float dot(const StateTile& o) const {
    float s = 0.f;
#pragma unroll
    for (int p = 0; p < 4; ++p) s += v[p].x * o.v[p].x + v[p].y * o.v[p].y + v[p].z * o.v[p].z + v[p].w * o.v[p].w;
    return s;
  }
};

// Gates of one (chunk, 64-wide key tile) in shared memory.
template <int C>
struct Gates {
  float* G;     // [C+1][kLDG]: G[0] = 0, G[r+1] = Gi_r (so Ge_r = G[r])
  float* gam;   // [64] gamma = Gi_{C-1}
  float* gs;    // [NB][64] G at the block start (Gi_{16i-1})
  float* ge;    // [NB][64] G at the block end (Gi_{16i+15})
  float* eW;    // [NB][64] e^{ge - gs} (<= 1)
  float* invW;  // [NB][64] e^{gs - ge} in safe columns (>= 1), 0 in unsafe ones
};

// Column cumsum of the staged bf16 w tile (4 lanes per column, C/4 rows each, width-4
// shuffle scan), then the block references. Returns whether any (block, column) of this
// tile is unsafe (CTA-uniform). Ends with a barrier.
template <int C>
__device__ __forceinline__ bool build_gates(const bf16* w_s, const Gates<C>& s) {
  constexpr int P = 4, R = C / P, NB = Shape<C>::NB;
  {
    const int c = threadIdx.x / P, seg = threadIdx.x % P;
    float loc[R];
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < R; ++k) {
      loc[k] = bf2f(w_s[(seg * R + k) * kLDB + c]);
      sum += loc[k];
    }
    float incl = sum;
#pragma unroll
    for (int off = 1; off < P; off <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, incl, off, P);
      if (seg >= off) incl += y;
    }
    const float gamma = __shfl_sync(0xffffffffu, incl, P - 1, P);
    float g = incl - sum;
#pragma unroll
    for (int k = 0; k < R; ++k) {
      g += loc[k];
      s.G[(seg * R + k + 1) * kLDG + c] = g;
    }
    if (seg == 0) s.G[c] = 0.f, s.gam[c] = gamma;
  }
  __syncthreads();
  bool unsafe = false;
  for (int idx = threadIdx.x; idx < NB * 64; idx += 256) {
    const int blk = idx >> 6, c = idx & 63;
    const float a = s.G[16 * blk * kLDG + c], e = s.G[(16 * blk + 16) * kLDG + c];
    const bool safe = e - a >= -kSafeRange;
    s.gs[idx] = a;
    s.ge[idx] = e;
    s.eW[idx] = __expf(e - a);
    s.invW[idx] = safe ? __expf(a - e) : 0.f;
    unsafe |= !safe;
  }
  return __syncthreads_or(unsafe) != 0;
}

// q~ = q e^{Ge - gs}, k~ = k e^{ge - Gi} (fp32) of element (r, c) of the current key tile.
template <int C>
__device__ __forceinline__ void tilde(const Gates<C>& s, const bf16* q_s, const bf16* k_s, int r, int c, float& qv,
                                      float& kv, float& qx, float& kx) {
  const int blk = r >> 4;
  const float Gi = s.G[(r + 1) * kLDG + c], Ge = s.G[r * kLDG + c];
  qv = bf2f(q_s[r * kLDB + c]);
  kv = bf2f(k_s[r * kLDB + c]);
  qx = qv * __expf(Ge - s.gs[blk * 64 + c]);
  kx = kv * __expf(s.ge[blk * 64 + c] - Gi);
}

// acc += A tiles of the warp for this key tile: rows 16 rb.., columns part*CCOLS + 8 nt.
//   pair (rb, j < rb): R(q~ m_rb,j) R(k~_j)^T   (m = 1 for j = rb - 1: q~ itself)
//   diagonal (rb, rb): R(q~) R(k^)^T  (k^ = 0 in unsafe columns); entries s >= r are discarded later.
template <int C>
__device__ __forceinline__ void mma_attention(float (&acc)[Shape<C>::NC8][4], const bf16* qt_s, const bf16* kt_s,
                                              const bf16* kh_s, const bf16* qf_s, int rb, int part) {
  using S = Shape<C>;
#pragma unroll
  for (int nt = 0; nt < S::NC8; ++nt) {
    const int s0 = part * S::CCOLS + 8 * nt, j = s0 >> 4;
    if (j > rb) continue;
    const bf16* asrc = qt_s + 16 * rb * kLDB;
    if constexpr (S::NF > 0) {
      if (j < rb - 1) asrc = qf_s + fold_index(rb, j) * 16 * kLDB;
    }
    const bf16* bsrc = j == rb ? kh_s : kt_s;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t af[4], bfr[2];
      tc::load_a(af, asrc, kLDB, 0, 16 * ks);
      tc::load_b(bfr, bsrc, kLDB, 16 * ks, s0);
      tc::mma(acc[nt], af, bfr);
    }
  }
}

// Exact elementwise sums of the diagonal block over the unsafe columns of this key tile:
// A[r, s] += sum_{c unsafe} q_rc k_sc e^{Ge_rc - Gi_sc}  (s < r, same block).
template <int C>
__device__ void attention_unsafe(float (&acc)[Shape<C>::NC8][4], const bf16* q_s, const bf16* k_s, const Gates<C>& s,
                                 int rb, int part) {
  using S = Shape<C>;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < S::NC8; ++nt) {
    const int s0 = part * S::CCOLS + 8 * nt;
    if ((s0 >> 4) != rb) continue;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = 16 * rb + g + 8 * (e >> 1), sc = s0 + 2 * t + (e & 1);
      if (sc >= r) continue;
      float sum = 0.f;
      for (int c = 0; c < 64; ++c) {
        if (s.invW[rb * 64 + c] != 0.f) continue;
        sum +=
            bf2f(q_s[r * kLDB + c]) * bf2f(k_s[sc * kLDB + c]) * __expf(s.G[r * kLDG + c] - s.G[(sc + 1) * kLDG + c]);
      }
      acc[nt][e] += sum;
    }
  }
}

// Writes R(scale A) (strictly lower from acc, bonus on the diagonal, 0 above) to A_s [C][LDP].
template <int C>
__device__ __forceinline__ void store_attention(bf16* A_s, const float (&acc)[Shape<C>::NC8][4], const float* bonus_s,
                                                float scale, int rb, int part) {
  using S = Shape<C>;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < S::NC8; ++nt) {
    const int s0 = part * S::CCOLS + 8 * nt + 2 * t;
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int r = 16 * rb + g + 8 * h2;
      float x[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int sc = s0 + e;
        x[e] = sc < r ? scale * acc[nt][2 * h2 + e] : (sc == r ? scale * bonus_s[r] : 0.f);
      }
      st_pair(A_s + r * S::LDP + s0, x[0], x[1]);
    }
  }
}

// Row sums of q . u . k of the current key tile (the u bonus of A's diagonal): NTPR lanes
// per row; the sum lands in every lane of the row group.
template <int C>
__device__ __forceinline__ float bonus_rows(const bf16* q_s, const bf16* k_s, const float* u_s) {
  constexpr int NTPR = Shape<C>::NTPR, CW = 64 / NTPR;
  const int row = threadIdx.x / NTPR, seg = threadIdx.x % NTPR;
  float s = 0.f;
#pragma unroll
  for (int c = seg * CW; c < seg * CW + CW; ++c) s += bf2f(q_s[row * kLDB + c]) * u_s[c] * bf2f(k_s[row * kLDB + c]);
#pragma unroll
  for (int off = 1; off < NTPR; off <<= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  return s;
}

// ---------------------------------------------------------------------------------------
// State scans on tensor cores. grid (tiles, B*H, nz), tiles = (D/64)^2 blocks of 64 x 64 of
// the state; z + z_offset = 0: forward scan (h[n], ht), 1: reverse scan (dh[n], dh0), as
// rwkv6_state_scan. Warp w owns state rows 16 (w % 4).. and columns 32 (w / 4)..; the state
// stays in fp32 mma fragments. Per chunk: S <- e^g S + R(x')^T y with x' = k e^{g - Gi}
// (forward) or scale q e^{Ge} (reverse), y = v or dO. The chunk tiles come through a 3-stage
// cp.async ring: chunk step + 2 is in flight while step is computed (the chain of steps is
// the scan's critical path; one step of lead did not cover the load latency).
constexpr int kScanStages = 3;
template <int C>
constexpr int scan_tc_smem_bytes() {
  return kScanStages * 3 * Shape<C>::TOK_BYTES + 64 * 4;
}

// Issues the cp.async copies of a [C][64] bf16 token tile (rows >= L zero-filled).
template <int C>
__device__ __forceinline__ void async_tile(bf16* dst, const bf16* src, int64_t rs, int L) {
#pragma unroll
  for (int p = 0; p < Shape<C>::TOKV; ++p) {
    const int idx = threadIdx.x + 256 * p, r = idx >> 3, c8 = (idx & 7) * 8;
    const bool ok = r < L;
    tc::cp_async16(dst + r * kLDB + c8, ok ? src + r * rs + c8 : src, ok ? 16 : 0);
  }
}

template <int C>
__global__ void __launch_bounds__(256) rwkv6_state_scan_tc(const FusedArgs a, int z_offset) {
  using S = Shape<C>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* buf = reinterpret_cast<bf16*>(smem);  // [kScanStages][3][C][kLDB]: x, y, w
  float* gam_s = reinterpret_cast<float*>(smem + kScanStages * 3 * S::TOK_BYTES);

  const bool reverse = (blockIdx.z + z_offset) == 1;
  const int64_t T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int64_t NT = (T + C - 1) / C;
  const int ntile = static_cast<int>(D / 64);
  const int tr = blockIdx.x / ntile, tcol = blockIdx.x % ntile;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rb = warp & 3, part = warp >> 2;
  const int64_t rs = H * D, base = (b * T * H + h) * D;
  const bf16* xsrc = static_cast<const bf16*>(reverse ? a.r : a.k) + base + tr * 64;
  const bf16* ysrc = static_cast<const bf16*>(reverse ? a.dO : a.v) + base + tcol * 64;
  const bf16* wsrc = static_cast<const bf16*>(a.w) + base + tr * 64;
  const float scale = a.scale;

  // element e of n8 tile nt: state row 16 rb + g + 8 (e >> 1), column 32 part + 8 nt + 2 t + (e & 1)
  float Sacc[4][4];
  const float* init = reverse ? a.dht : a.h0;
  const int64_t st0 = (bh * D + tr * 64) * D + tcol * 64;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      Sacc[nt][e] = init ? init[st0 + (16 * rb + g + 8 * (e >> 1)) * D + 32 * part + 8 * nt + 2 * t + (e & 1)] : 0.f;
  float* traj = reverse ? a.dh : a.h;

  // Every step commits exactly one (possibly empty) group, so after wait_group<kScanStages - 2>
  // at step s the group of step s has landed (only the groups of later steps may be pending).
  auto issue = [&](int64_t step) {
    if (step < NT) {
      const int64_t n = reverse ? NT - 1 - step : step;
      const int L = rows_in_chunk(C, T, n);
      bf16* xs = buf + (step % kScanStages) * 3 * C * kLDB;
      async_tile<C>(xs, xsrc + n * C * rs, rs, L);
      async_tile<C>(xs + C * kLDB, ysrc + n * C * rs, rs, L);
      async_tile<C>(xs + 2 * C * kLDB, wsrc + n * C * rs, rs, L);
    }
    tc::cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < kScanStages - 1; ++s) issue(s);
  for (int64_t step = 0; step < NT; ++step) {
    const int64_t n = reverse ? NT - 1 - step : step;
    float* out = traj + (bh * NT + n) * D * D + (tr * 64) * D + tcol * 64;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2)
        *reinterpret_cast<float2*>(out + (16 * rb + g + 8 * h2) * D + 32 * part + 8 * nt + 2 * t) =
            make_float2(Sacc[nt][2 * h2], Sacc[nt][2 * h2 + 1]);
    bf16* xs = buf + (step % kScanStages) * 3 * C * kLDB;
    bf16* ys = xs + C * kLDB;
    bf16* ws = ys + C * kLDB;
    tc::cp_async_wait<kScanStages - 2>();
    __syncthreads();                // this step's tiles visible to all; every thread is past step - 1's MMA
    issue(step + kScanStages - 1);  // into the stage that step - 1 used
    {                               // column cumsum of w; x' in place
      constexpr int P = 4, R = C / P;
      const int c = tid / P, seg = tid % P;
      float loc[R];
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        loc[k] = bf2f(ws[(seg * R + k) * kLDB + c]);
        sum += loc[k];
      }
      float incl = sum;
#pragma unroll
      for (int off = 1; off < P; off <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, incl, off, P);
        if (seg >= off) incl += y;
      }
      const float gamma = __shfl_sync(0xffffffffu, incl, P - 1, P);
      float gcur = incl - sum;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const float prev = gcur;
        gcur += loc[k];
        bf16* px_ = xs + (seg * R + k) * kLDB + c;
        const float f = reverse ? scale * __expf(prev) : __expf(gamma - gcur);
        *px_ = __float2bfloat16_rn(bf2f(*px_) * f);
      }
      if (seg == 0) gam_s[c] = gamma;
    }
    __syncthreads();
    const float d0 = __expf(gam_s[16 * rb + g]), d1 = __expf(gam_s[16 * rb + g + 8]);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) { Sacc[nt][0] *= d0, Sacc[nt][1] *= d0, Sacc[nt][2] *= d1, Sacc[nt][3] *= d1; }
#pragma unroll
    for (int ks = 0; ks < C / 16; ++ks) {
      uint32_t af[4];
      tc::load_a_trans(af, xs, kLDB, 16 * rb, 16 * ks);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t b0[2], b1[2];
        tc::load_b_trans_2n(b0, b1, ys, kLDB, 16 * ks, 32 * part + 16 * np);
        tc::mma(Sacc[2 * np], af, b0);
        tc::mma(Sacc[2 * np + 1], af, b1);
      }
    }
  }
  tc::cp_async_wait<0>();
  float* fin = reverse ? a.dh0 : a.ht;
  if (fin) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2)
        *reinterpret_cast<float2*>(fin + st0 + (16 * rb + g + 8 * h2) * D + 32 * part + 8 * nt + 2 * t) =
            make_float2(Sacc[nt][2 * h2], Sacc[nt][2 * h2 + 1]);
  }
}

// ---------------------------------------------------------------------------------------
// Forward output on tensor cores. grid (D/64 value tiles, NT, B*H) as rwkv6_fwd_output:
// loop over key tiles (A accumulated over the full key dim, O_inter = R(Q e^Ge) R(h[n])),
// then O = scale O_inter + R(scale A) V.
template <int C>
struct FwdLayout {
  using S = Shape<C>;
  static constexpr int q = 0, k = q + S::TOK_BYTES, qt = k + S::TOK_BYTES, kt = qt + S::TOK_BYTES;
  static constexpr int kh = kt + S::TOK_BYTES, qe = kh + S::TOK_BYTES, h = qe + S::TOK_BYTES;
  static constexpr int qf = h + S::ST_BYTES, G = qf + S::QF_BYTES, v = G + S::G_BYTES;
  static constexpr int vec = v + S::TOK_BYTES;
  // floats at vec: gam[64], u[64], gs, ge, eW, invW [NB][64], bonus[C]
  static constexpr int bytes = vec + (128 + 4 * S::NB * 64 + C) * 4;
};

template <int C>
__global__ void __launch_bounds__(256, 2) rwkv6_fwd_output_tc(const FusedArgs a) {
  using S = Shape<C>;
  using Lay = FwdLayout<C>;
  constexpr int NB = S::NB;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem + Lay::q);
  bf16* k_s = reinterpret_cast<bf16*>(smem + Lay::k);
  bf16* qt_s = reinterpret_cast<bf16*>(smem + Lay::qt);
  bf16* kt_s = reinterpret_cast<bf16*>(smem + Lay::kt);
  bf16* kh_s = reinterpret_cast<bf16*>(smem + Lay::kh);
  bf16* qe_s = reinterpret_cast<bf16*>(smem + Lay::qe);
  bf16* h_s = reinterpret_cast<bf16*>(smem + Lay::h);
  bf16* qf_s = reinterpret_cast<bf16*>(smem + Lay::qf);
  float* vec = reinterpret_cast<float*>(smem + Lay::vec);
  float* u_s = vec + 64;
  float* bonus_s = vec + 128 + 4 * NB * 64;
  const Gates<C> gts{reinterpret_cast<float*>(smem + Lay::G),
                     vec,
                     vec + 128,
                     vec + 128 + NB * 64,
                     vec + 128 + 2 * NB * 64,
                     vec + 128 + 3 * NB * 64};
  bf16* v_s = reinterpret_cast<bf16*>(smem + Lay::v);  // own value tile, by cp.async from the start
  bf16* w_stage = kt_s;                                // w, until the operands are built
  bf16* A_s = qt_s;                                    // after the key loop

  const int64_t T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int vt = blockIdx.x;
  const int64_t n = blockIdx.y, bh = blockIdx.z, b = bh / H, h = bh % H;
  const int64_t NT = gridDim.y;
  const int L = rows_in_chunk(C, T, n);
  const int nK = static_cast<int>(D / 64);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rb = warp % NB, part = warp / NB, col0 = part * S::COLS;
  const int64_t rs = H * D, base = ((b * T + n * C) * H + h) * D;
  const float scale = a.scale;
  const bf16* rp = static_cast<const bf16*>(a.r) + base;
  const bf16* kp = static_cast<const bf16*>(a.k) + base;
  const bf16* vp = static_cast<const bf16*>(a.v) + base;
  const bf16* wp = static_cast<const bf16*>(a.w) + base;
  const float* hn = a.h + (bh * NT + n) * D * D;

  float accA[S::NC8][4] = {};
  float accO[S::NT8][4] = {};
  float bonus = 0.f;
  async_tile<C>(v_s, vp + vt * 64, rs, L);  // needed only at the end: in flight meanwhile
  tc::cp_async_commit();

  for (int kt = 0; kt < nK; ++kt) {
    {
      TokTile<C> tq, tk, tw;
      StateTile th;
      tq.load(rp + kt * 64, rs, L);
      tk.load(kp + kt * 64, rs, L);
      tw.load(wp + kt * 64, rs, L);
      th.load(hn + static_cast<int64_t>(kt) * 64 * D + vt * 64, D);
      tq.store(q_s);
      tk.store(k_s);
      tw.store(w_stage);
      th.store(h_s);
      if (tid < 64) u_s[tid] = a.u[h * D + kt * 64 + tid];
    }
    __syncthreads();
    const bool unsafe = build_gates<C>(w_stage, gts);
    for (int idx = tid; idx < C * 32; idx += 256) {
      const int r = idx >> 5, c = (idx & 31) * 2, blk = r >> 4;
      float qv[2], kv[2], qx[2], kx[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) tilde<C>(gts, q_s, k_s, r, c + e, qv[e], kv[e], qx[e], kx[e]);
      st_pair(qt_s + r * kLDB + c, qx[0], qx[1]);
      st_pair(kt_s + r * kLDB + c, kx[0], kx[1]);
      st_pair(kh_s + r * kLDB + c, kx[0] * gts.invW[blk * 64 + c], kx[1] * gts.invW[blk * 64 + c + 1]);
      st_pair(qe_s + r * kLDB + c, qv[0] * __expf(gts.G[r * kLDG + c]), qv[1] * __expf(gts.G[r * kLDG + c + 1]));
      if constexpr (S::NF > 0) {
        float m0 = 1.f, m1 = 1.f;
        for (int j = blk - 2; j >= 0; --j) {
          m0 *= gts.eW[(j + 1) * 64 + c];
          m1 *= gts.eW[(j + 1) * 64 + c + 1];
          st_pair(qf_s + (fold_index(blk, j) * 16 + (r & 15)) * kLDB + c, qx[0] * m0, qx[1] * m1);
        }
      }
    }
    bonus += bonus_rows<C>(q_s, k_s, u_s);
    __syncthreads();
    mma_attention<C>(accA, qt_s, kt_s, kh_s, qf_s, rb, part);
    if (unsafe) attention_unsafe<C>(accA, q_s, k_s, gts, rb, part);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      uint32_t af[4];
      tc::load_a(af, qe_s, kLDB, 16 * rb, 16 * ks);
#pragma unroll
      for (int np = 0; np < S::NT8 / 2; ++np) {
        uint32_t b0[2], b1[2];
        tc::load_b_trans_2n(b0, b1, h_s, kLDB, 16 * ks, col0 + 16 * np);
        tc::mma(accO[2 * np], af, b0);
        tc::mma(accO[2 * np + 1], af, b1);
      }
    }
    __syncthreads();
  }
  if (tid % S::NTPR == 0) bonus_s[tid / S::NTPR] = bonus;
  tc::cp_async_wait<0>();
  __syncthreads();
  store_attention<C>(A_s, accA, bonus_s, scale, rb, part);
  __syncthreads();
#pragma unroll
  for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) accO[nt][e] *= scale;
#pragma unroll
  for (int ks = 0; ks < NB; ++ks) {
    if (ks > rb) break;
    uint32_t af[4];
    tc::load_a(af, A_s, S::LDP, 16 * rb, 16 * ks);
#pragma unroll
    for (int np = 0; np < S::NT8 / 2; ++np) {
      uint32_t b0[2], b1[2];
      tc::load_b_trans_2n(b0, b1, v_s, kLDB, 16 * ks, col0 + 16 * np);
      tc::mma(accO[2 * np], af, b0);
      tc::mma(accO[2 * np + 1], af, b1);
    }
  }
  bf16* op = static_cast<bf16*>(a.o) + base + vt * 64 + col0;
#pragma unroll
  for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int r = 16 * rb + g + 8 * h2;
      if (r < L) st_pair(op + r * rs + 8 * nt + 2 * t, accO[nt][2 * h2], accO[nt][2 * h2 + 1]);
    }
}

// ---------------------------------------------------------------------------------------
// Backward chunk kernel on tensor cores. grid (D/64 own tiles, NT, B*H), modes as
// rwkv6_bwd_chunk (fused | intra -> fp32 dq'/dk' scratch | inter reads them back).
//   phase 1, value tiles: dP = dO V^T (blocks on or below the diagonal), dO h^T and V dh^T
//            for the own key rows, sum_v h . dh (fp32);
//   phase 2, key tiles, own last: gates, operands, A (MMA + unsafe columns), dV_inter = K' dh;
//   phase 3: dV += R(scale A)^T dO; dq'/dk' intra (Horner over blocks on the accumulator
//            fragments + the diagonal block on k^ / q^ + unsafe columns elementwise); glue
//            (dgamma, dw by a column reverse scan, u terms, du partials).
constexpr int kLDX = 66;  // fp32 x, y tiles of the dw scan (floats)

// dw_j = sum_{r>j} x_r - sum_{r>=j} y_r (+ dgam[c] when dgam is given): a column reverse scan
// of the fp32 x, y tiles [C][kLDX] (4 lanes per column, C/4 rows each), written over x, then
// stored as bf16 with 16-byte row stores; kAddDw: add the bf16 dw already in the output (the
// intra part left there by the fallback's intra kernel). Starts and ends with the caller's
// barrier discipline: x, y must be complete; the tile is reused only after this returns.
template <int C, bool kAddDw>
__device__ __forceinline__ void dw_scan_store(const FusedArgs& a, float* sx, const float* sy, const float* dgam,
                                              int64_t base, int own, int L, int64_t n, int64_t b, int64_t h) {
  constexpr int P = 4, R = C / P;
  (void)n, (void)b, (void)h;
  {
    const int c = threadIdx.x / P, seg = threadIdx.x % P;
    float sxs = 0.f, sys = 0.f;
#pragma unroll
    for (int q = 0; q < R; ++q) {
      const int o = (seg * R + q) * kLDX + c;
      sxs += sx[o];
      sys += sy[o];
    }
    float ix = sxs, iy = sys;  // inclusive suffix sums over segments
#pragma unroll
    for (int off = 1; off < P; off <<= 1) {
      const float yx = __shfl_down_sync(0xffffffffu, ix, off, P);
      const float yy = __shfl_down_sync(0xffffffffu, iy, off, P);
      if (seg + off < P) ix += yx, iy += yy;
    }
    const float dg = dgam ? dgam[c] : 0.f;
    float xa = ix - sxs, ya = iy - sys;
#pragma unroll
    for (int q = R - 1; q >= 0; --q) {
      const int o = (seg * R + q) * kLDX + c;
      const float xv = sx[o];
      ya += sy[o];
      sx[o] = xa - ya + dg;
      xa += xv;
    }
  }
  __syncthreads();
  const int64_t rs = a.dims.H * a.dims.D;
  bf16* dwp = static_cast<bf16*>(a.dw) + base + own;
  for (int idx = threadIdx.x; idx < C * 8; idx += 256) {
    const int r = idx >> 3, c8 = (idx & 7) * 8;
    if (r >= L) continue;
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = sx[r * kLDX + c8 + i];
    uint4* dst = reinterpret_cast<uint4*>(dwp + r * rs + c8);
    if constexpr (kAddDw) {
      const uint4 old = *dst;
      const uint32_t w4[4] = {old.x, old.y, old.z, old.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = tc::unpack_bf16(w4[i]);
        x[2 * i] += f.x, x[2 * i + 1] += f.y;
      }
    }
    *dst = make_uint4(tc::pack_bf16(x[0], x[1]), tc::pack_bf16(x[2], x[3]), tc::pack_bf16(x[4], x[5]),
                      tc::pack_bf16(x[6], x[7]));
  }
}

template <int C>
struct BwdLayout {
  using S = Shape<C>;
  static constexpr int P = 0, q = P + S::TOK_BYTES, k = q + S::TOK_BYTES, G = k + S::TOK_BYTES;
  static constexpr int qt = G + S::G_BYTES, kt = qt + S::TOK_BYTES, kh = kt + S::TOK_BYTES;
  static constexpr int kd = kh + S::TOK_BYTES, dhk = kd + S::TOK_BYTES, qf = dhk + S::ST_BYTES;
  static constexpr int vec = qf + S::QF_BYTES;
  // floats at vec: gam, u, dgs [64]; gs, ge, eW, invW [NB][64]; pd[C], bonus[C]; zp, pp [NB][64]
  static constexpr int bytes = vec + (3 * 64 + 6 * S::NB * 64 + 2 * C) * 4;
  // phase-1 aliases over [qt, vec): dO_vt, V_vt [C][kLDB], h, dh [64][kLDB]
  static constexpr int p1_do = qt, p1_v = qt + S::TOK_BYTES, p1_h = qt + 2 * S::TOK_BYTES, p1_dh = p1_h + S::ST_BYTES;
  static_assert(p1_dh + S::ST_BYTES <= vec, "phase-1 tiles fit");
  // phase-3 aliases: A over kd, dO_own over dhk; then x, y fp32 [C][kLDX] over [kh, vec)
  static constexpr int sx = kh, sy = kh + C * kLDX * 4;
  static_assert(sy + C * kLDX * 4 <= vec, "x, y fit");
  static_assert(C * S::LDP * 2 <= S::TOK_BYTES, "A fits over kd");
};

template <int C, BackwardPart kPart>
__global__ void __launch_bounds__(256, 2) rwkv6_bwd_chunk_tc(const FusedArgs a) {
  constexpr bool kIntra = kPart != BackwardPart::inter, kInter = kPart != BackwardPart::intra;
  using S = Shape<C>;
  using Lay = BwdLayout<C>;
  constexpr int NB = S::NB;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* P_s = reinterpret_cast<bf16*>(smem + Lay::P);
  bf16* q_s = reinterpret_cast<bf16*>(smem + Lay::q);
  bf16* k_s = reinterpret_cast<bf16*>(smem + Lay::k);
  bf16* qt_s = reinterpret_cast<bf16*>(smem + Lay::qt);
  bf16* kt_s = reinterpret_cast<bf16*>(smem + Lay::kt);
  bf16* kh_s = reinterpret_cast<bf16*>(smem + Lay::kh);
  bf16* kd_s = reinterpret_cast<bf16*>(smem + Lay::kd);
  bf16* dhk_s = reinterpret_cast<bf16*>(smem + Lay::dhk);
  bf16* qf_s = reinterpret_cast<bf16*>(smem + Lay::qf);
  float* vec = reinterpret_cast<float*>(smem + Lay::vec);
  float* u_s = vec + 64;
  float* dgs_s = vec + 128;
  float* ref = vec + 192;  // gs, ge, eW, invW
  float* pd_s = ref + 4 * NB * 64;
  float* bonus_s = pd_s + C;
  float* zp_s = bonus_s + C;
  float* pp_s = zp_s + NB * 64;
  const Gates<C> gts{
      reinterpret_cast<float*>(smem + Lay::G), vec, ref, ref + NB * 64, ref + 2 * NB * 64, ref + 3 * NB * 64};
  bf16* w_stage = kd_s;
  bf16* A_s = kd_s;
  bf16* do3_s = dhk_s;

  const int64_t T = a.dims.T, H = a.dims.H, D = a.dims.D;
  const int jt = blockIdx.x;
  const int64_t n = blockIdx.y, bh = blockIdx.z, b = bh / H, h = bh % H;
  const int64_t NT = gridDim.y;
  const int L = rows_in_chunk(C, T, n);
  const int nK = static_cast<int>(D / 64);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rb = warp % NB, part = warp / NB, col0 = part * S::COLS;
  const int64_t rs = H * D, base = ((b * T + n * C) * H + h) * D;
  const float scale = a.scale;
  const bf16* rp = static_cast<const bf16*>(a.r) + base;
  const bf16* kp = static_cast<const bf16*>(a.k) + base;
  const bf16* vp = static_cast<const bf16*>(a.v) + base;
  const bf16* wp = static_cast<const bf16*>(a.w) + base;
  const bf16* dop = static_cast<const bf16*>(a.dO) + base;
  const float* hn = a.h + (bh * NT + n) * D * D;
  const float* dhn = a.dh + (bh * NT + n) * D * D;

  float accQS[S::NT8][4] = {};  // (dO h^T)[r, own key col]
  float accKS[S::NT8][4] = {};  // (V dh^T)[r, own key col]
  float accA[S::NC8][4] = {};
  float accV[S::NT8][4] = {};  // dV[s, own value col]
  float bonus = 0.f;

  // ---- phase 1: value tiles
  {
    bf16* do_s = reinterpret_cast<bf16*>(smem + Lay::p1_do);
    bf16* v_s = reinterpret_cast<bf16*>(smem + Lay::p1_v);
    bf16* hh_s = reinterpret_cast<bf16*>(smem + Lay::p1_h);
    bf16* dh_s = reinterpret_cast<bf16*>(smem + Lay::p1_dh);
    float accP[S::NC8][4] = {};
    float dgs = 0.f;
    for (int vt = 0; vt < nK; ++vt) {
      TokTile<C> tdo, tv;
      tdo.load(dop + vt * 64, rs, L);
      tv.load(vp + vt * 64, rs, L);
      if constexpr (kInter) {
        StateTile th, tdh;
        th.load(hn + static_cast<int64_t>(jt) * 64 * D + vt * 64, D);
        tdh.load(dhn + static_cast<int64_t>(jt) * 64 * D + vt * 64, D);
        dgs += th.dot(tdh);
        th.store(hh_s);
        tdh.store(dh_s);
      }
      tdo.store(do_s);
      tv.store(v_s);
      __syncthreads();
#pragma unroll
      for (int nt = 0; nt < S::NC8; ++nt) {
        const int s0 = part * S::CCOLS + 8 * nt;
        if ((s0 >> 4) > rb) continue;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          uint32_t af[4], bfr[2];
          tc::load_a(af, do_s, kLDB, 16 * rb, 16 * ks);
          tc::load_b(bfr, v_s, kLDB, 16 * ks, s0);
          tc::mma(accP[nt], af, bfr);
        }
      }
      if constexpr (kInter) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          uint32_t ad[4], av[4];
          tc::load_a(ad, do_s, kLDB, 16 * rb, 16 * ks);
          tc::load_a(av, v_s, kLDB, 16 * rb, 16 * ks);
#pragma unroll
          for (int np = 0; np < S::NT8 / 2; ++np) {
            uint32_t b0[2], b1[2];
            tc::load_b_2n(b0, b1, hh_s, kLDB, 16 * ks, col0 + 16 * np);
            tc::mma(accQS[2 * np], ad, b0);
            tc::mma(accQS[2 * np + 1], ad, b1);
            tc::load_b_2n(b0, b1, dh_s, kLDB, 16 * ks, col0 + 16 * np);
            tc::mma(accKS[2 * np], av, b0);
            tc::mma(accKS[2 * np + 1], av, b1);
          }
        }
      }
      __syncthreads();
    }
    // dP -> P_s: R(scale dP) strictly below the diagonal, 0 elsewhere; pd = scale dP[r, r] (fp32).
#pragma unroll
    for (int nt = 0; nt < S::NC8; ++nt) {
      const int s0 = part * S::CCOLS + 8 * nt + 2 * t;
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int r = 16 * rb + g + 8 * h2;
        float x[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float val = scale * accP[nt][2 * h2 + e];
          if (s0 + e == r) pd_s[r] = val;
          x[e] = s0 + e < r ? val : 0.f;
        }
        st_pair(P_s + r * S::LDP + s0, x[0], x[1]);
      }
    }
    if constexpr (kInter) {
      dgs += __shfl_xor_sync(0xffffffffu, dgs, 1);
      dgs += __shfl_xor_sync(0xffffffffu, dgs, 2);
      if ((tid & 3) == 0) dgs_s[tid >> 2] = dgs;
    }
  }

  // ---- phase 2: key tiles, own tile last
  bool unsafe = false;
  const int nIter = kInter ? nK : 1;
  for (int it = 0; it < nIter; ++it) {
    const int kt = kInter ? (jt + 1 + it) % nK : jt;
    {
      TokTile<C> tq, tk, tw;
      tq.load(rp + kt * 64, rs, L);
      tk.load(kp + kt * 64, rs, L);
      tw.load(wp + kt * 64, rs, L);
      if constexpr (kInter) {
        StateTile tdh;
        tdh.load(dhn + static_cast<int64_t>(kt) * 64 * D + jt * 64, D);
        tdh.store(dhk_s);
        if (tid < 64) u_s[tid] = a.u[h * D + kt * 64 + tid];
      }
      tq.store(q_s);
      tk.store(k_s);
      tw.store(w_stage);
    }
    __syncthreads();
    unsafe = build_gates<C>(w_stage, gts);
    for (int idx = tid; idx < C * 32; idx += 256) {
      const int r = idx >> 5, c = (idx & 31) * 2, blk = r >> 4;
      float qv[2], kv[2], qx[2], kx[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) tilde<C>(gts, q_s, k_s, r, c + e, qv[e], kv[e], qx[e], kx[e]);
      st_pair(qt_s + r * kLDB + c, qx[0], qx[1]);
      st_pair(kt_s + r * kLDB + c, kx[0], kx[1]);
      st_pair(kh_s + r * kLDB + c, kx[0] * gts.invW[blk * 64 + c], kx[1] * gts.invW[blk * 64 + c + 1]);
      if constexpr (kInter) {
        const float* Gi = gts.G + (r + 1) * kLDG + c;
        st_pair(kd_s + r * kLDB + c, kv[0] * __expf(gts.gam[c] - Gi[0]), kv[1] * __expf(gts.gam[c + 1] - Gi[1]));
        if constexpr (S::NF > 0) {
          float m0 = 1.f, m1 = 1.f;
          for (int j = blk - 2; j >= 0; --j) {
            m0 *= gts.eW[(j + 1) * 64 + c];
            m1 *= gts.eW[(j + 1) * 64 + c + 1];
            st_pair(qf_s + (fold_index(blk, j) * 16 + (r & 15)) * kLDB + c, qx[0] * m0, qx[1] * m1);
          }
        }
      }
    }
    if constexpr (kInter) bonus += bonus_rows<C>(q_s, k_s, u_s);
    __syncthreads();
    if constexpr (kInter) {
      mma_attention<C>(accA, qt_s, kt_s, kh_s, qf_s, rb, part);
      if (unsafe) attention_unsafe<C>(accA, q_s, k_s, gts, rb, part);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        uint32_t af[4];
        tc::load_a(af, kd_s, kLDB, 16 * rb, 16 * ks);
#pragma unroll
        for (int np = 0; np < S::NT8 / 2; ++np) {
          uint32_t b0[2], b1[2];
          tc::load_b_trans_2n(b0, b1, dhk_s, kLDB, 16 * ks, col0 + 16 * np);
          tc::mma(accV[2 * np], af, b0);
          tc::mma(accV[2 * np + 1], af, b1);
        }
      }
      if (it + 1 < nIter) __syncthreads();
    }
  }

  // ---- phase 3
  const int own = jt * 64;
  __syncthreads();  // phase-2 MMAs done: kd, dhk, qf are free
  if constexpr (kInter) {
    if (tid % S::NTPR == 0) bonus_s[tid / S::NTPR] = bonus;
    TokTile<C> tdo;
    tdo.load(dop + own, rs, L);
    tdo.store(do3_s);
    __syncthreads();
    store_attention<C>(A_s, accA, bonus_s, scale, rb, part);
    __syncthreads();
    // dV = K' dh (accumulated) + R(scale A)^T dO_own
#pragma unroll
    for (int ks = 0; ks < NB; ++ks) {
      if (ks < rb) continue;
      uint32_t af[4];
      tc::load_a_trans(af, A_s, S::LDP, 16 * rb, 16 * ks);
#pragma unroll
      for (int np = 0; np < S::NT8 / 2; ++np) {
        uint32_t b0[2], b1[2];
        tc::load_b_trans_2n(b0, b1, do3_s, kLDB, 16 * ks, col0 + 16 * np);
        tc::mma(accV[2 * np], af, b0);
        tc::mma(accV[2 * np + 1], af, b1);
      }
    }
    bf16* dvp = static_cast<bf16*>(a.dv) + base + own + col0;
#pragma unroll
    for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int r = 16 * rb + g + 8 * h2;
        if (r < L) st_pair(dvp + r * rs + 8 * nt + 2 * t, accV[nt][2 * h2], accV[nt][2 * h2 + 1]);
      }
  }

  float dqI[S::NT8][4] = {}, dkI[S::NT8][4] = {};
  float* sx = reinterpret_cast<float*>(smem + Lay::sx);
  float* sy = reinterpret_cast<float*>(smem + Lay::sy);
  if constexpr (kIntra) {
    if constexpr (kInter) __syncthreads();  // A_s, do3_s reads done: x, y may overwrite kh..qf
    // Per-column scale before the diagonal step: e^{W_rb} in safe columns, 1 in unsafe ones.
    auto diag_scale = [&](int c) { return gts.invW[rb * 64 + c] != 0.f ? gts.eW[rb * 64 + c] : 1.f; };
    // dq' intra, rows of block rb: Horner over column blocks j < rb on R(k~) (x e^{W_j} before
    // block j), then the diagonal block on R(k~) after x diag_scale: acc = sc Off + Dg.
#pragma unroll
    for (int j = 0; j < NB; ++j) {
      if (j > rb) break;
      if (j > 0) {
#pragma unroll
        for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = col0 + 8 * nt + 2 * t + (e & 1);
            dqI[nt][e] *= j < rb ? gts.eW[j * 64 + c] : diag_scale(c);
          }
      }
      uint32_t af[4];
      tc::load_a(af, P_s, S::LDP, 16 * rb, 16 * j);
#pragma unroll
      for (int np = 0; np < S::NT8 / 2; ++np) {
        uint32_t b0[2], b1[2];
        tc::load_b_trans_2n(b0, b1, kt_s, kLDB, 16 * j, col0 + 16 * np);
        tc::mma(dqI[2 * np], af, b0);
        tc::mma(dqI[2 * np + 1], af, b1);
      }
    }
    // dk' intra, rows (s) of block rb: Horner over row blocks i > rb from the last one down on
    // R(q~) (x e^{W_i} before block i, except the first), then the diagonal block likewise.
#pragma unroll
    for (int i = NB - 1; i >= 0; --i) {
      if (i < rb) break;
      if (i < NB - 1) {
#pragma unroll
        for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = col0 + 8 * nt + 2 * t + (e & 1);
            dkI[nt][e] *= i > rb ? gts.eW[i * 64 + c] : diag_scale(c);
          }
      }
      uint32_t af[4];
      tc::load_a_trans(af, P_s, S::LDP, 16 * rb, 16 * i);
#pragma unroll
      for (int np = 0; np < S::NT8 / 2; ++np) {
        uint32_t b0[2], b1[2];
        tc::load_b_trans_2n(b0, b1, qt_s, kLDB, 16 * i, col0 + 16 * np);
        tc::mma(dkI[2 * np], af, b0);
        tc::mma(dkI[2 * np + 1], af, b1);
      }
    }
    // D = e^{-W} acc (safe) or acc - Dg (unsafe, plus the exact diagonal sum fb);
    // dq'_intra = e^{Ge - gs} Dq + fbq, x_intra = R(q~) Dq + q fbq (and dk', y likewise).
#pragma unroll
    for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 16 * rb + g + 8 * (e >> 1), c = col0 + 8 * nt + 2 * t + (e & 1);
        const float Ge = gts.G[r * kLDG + c], Gi = gts.G[(r + 1) * kLDG + c];
        const float iw = gts.invW[rb * 64 + c];
        float Dq = iw * dqI[nt][e], Dk = iw * dkI[nt][e], fbq = 0.f, fbk = 0.f;
        if (unsafe && iw == 0.f) {
          float dgq = 0.f, dgk = 0.f;
          for (int s2 = 16 * rb; s2 < r; ++s2) {
            const float p = bf2f(P_s[r * S::LDP + s2]);
            dgq += p * bf2f(kt_s[s2 * kLDB + c]);
            fbq += p * bf2f(k_s[s2 * kLDB + c]) * __expf(Ge - gts.G[(s2 + 1) * kLDG + c]);
          }
          for (int r2 = r + 1; r2 < 16 * rb + 16; ++r2) {
            const float p = bf2f(P_s[r2 * S::LDP + r]);
            dgk += p * bf2f(qt_s[r2 * kLDB + c]);
            fbk += p * bf2f(q_s[r2 * kLDB + c]) * __expf(gts.G[r2 * kLDG + c] - Gi);
          }
          Dq = dqI[nt][e] - dgq;
          Dk = dkI[nt][e] - dgk;
        }
        dqI[nt][e] = __expf(Ge - gts.gs[rb * 64 + c]) * Dq + fbq;
        dkI[nt][e] = __expf(gts.ge[rb * 64 + c] - Gi) * Dk + fbk;
        sx[r * kLDX + c] = bf2f(qt_s[r * kLDB + c]) * Dq + bf2f(q_s[r * kLDB + c]) * fbq;
        sy[r * kLDX + c] = bf2f(kt_s[r * kLDB + c]) * Dk + bf2f(k_s[r * kLDB + c]) * fbk;
      }
    if constexpr (kPart == BackwardPart::intra) {
#pragma unroll
      for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) {
          const int r = 16 * rb + g + 8 * h2;
          if (r < L) {
            const int64_t o = base + r * rs + own + col0 + 8 * nt + 2 * t;
            *reinterpret_cast<float2*>(a.dq_tmp + o) = make_float2(dqI[nt][2 * h2], dqI[nt][2 * h2 + 1]);
            *reinterpret_cast<float2*>(a.dk_tmp + o) = make_float2(dkI[nt][2 * h2], dkI[nt][2 * h2 + 1]);
          }
        }
      // The fallback's intra kernel finishes dw's intra part here (the consistent x, y exist
      // only here) and leaves it in dw (bf16); the inter kernel adds the rest.
      __syncthreads();
      dw_scan_store<C, false>(a, sx, sy, nullptr, base, own, L, n, b, h);
      return;
    }
  }
  if constexpr (kPart == BackwardPart::inter) {
#pragma unroll
    for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int r = 16 * rb + g + 8 * h2;
        const int64_t o = base + r * rs + own + col0 + 8 * nt + 2 * t;
        const float2 x = r < L ? *reinterpret_cast<const float2*>(a.dq_tmp + o) : make_float2(0.f, 0.f);
        const float2 y = r < L ? *reinterpret_cast<const float2*>(a.dk_tmp + o) : make_float2(0.f, 0.f);
        dqI[nt][2 * h2] = x.x, dqI[nt][2 * h2 + 1] = x.y;
        dkI[nt][2 * h2] = y.x, dkI[nt][2 * h2 + 1] = y.y;
      }
  }
  if constexpr (kInter) {
    // ---- glue: dq' = scale (dO h^T) e^Ge + dq'_intra, dk' = (V dh^T) e^{g - Gi} + dk'_intra,
    // u terms; x += q dq'_inter, y += k dk'_inter (dw); column sums of z = k (V dh^T) e^{g-Gi}
    // (dgamma) and p = pd q k (du).
    if constexpr (kPart == BackwardPart::inter) __syncthreads();  // phase-3 MMA reads done before x, y writes
    bf16* dqp = static_cast<bf16*>(a.dr) + base + own + col0;
    bf16* dkp = static_cast<bf16*>(a.dk) + base + own + col0;
    float zc[S::NT8][2] = {}, pc[S::NT8][2] = {};
#pragma unroll
    for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int r = 16 * rb + g + 8 * h2;
        float oq[2], ok[2];
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const int e = 2 * h2 + e2, c = col0 + 8 * nt + 2 * t + e2;
          const float Ge = gts.G[r * kLDG + c], Gi = gts.G[(r + 1) * kLDG + c];
          const float dqS = scale * accQS[nt][e] * __expf(Ge);
          const float kz = accKS[nt][e] * __expf(gts.gam[c] - Gi);
          const float qv = bf2f(q_s[r * kLDB + c]), kv = bf2f(k_s[r * kLDB + c]);
          const float pd = pd_s[r], pu = pd * u_s[c];
          const float xi = kIntra ? sx[r * kLDX + c] : 0.f, yi = kIntra ? sy[r * kLDX + c] : 0.f;
          sx[r * kLDX + c] = qv * dqS + xi;
          sy[r * kLDX + c] = kv * kz + yi;
          zc[nt][e2] += kv * kz;
          pc[nt][e2] += pd * qv * kv;
          oq[e2] = dqS + dqI[nt][e] + pu * kv;
          ok[e2] = kz + dkI[nt][e] + pu * qv;
        }
        if (r < L) {
          st_pair(dqp + r * rs + 8 * nt + 2 * t, oq[0], oq[1]);
          st_pair(dkp + r * rs + 8 * nt + 2 * t, ok[0], ok[1]);
        }
      }
#pragma unroll
    for (int nt = 0; nt < S::NT8; ++nt)
#pragma unroll
      for (int e2 = 0; e2 < 2; ++e2) {
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) {
          zc[nt][e2] += __shfl_xor_sync(0xffffffffu, zc[nt][e2], off);
          pc[nt][e2] += __shfl_xor_sync(0xffffffffu, pc[nt][e2], off);
        }
        if (g == 0) {
          const int c = col0 + 8 * nt + 2 * t + e2;
          zp_s[rb * 64 + c] = zc[nt][e2];
          pp_s[rb * 64 + c] = pc[nt][e2];
        }
      }
    __syncthreads();
    // dgamma = e^gamma sum_v h . dh + sum_s z_s;  du partial = sum_s p_s   (own key columns)
    if (tid < 64) {
      float ztot = 0.f, ptot = 0.f;
#pragma unroll
      for (int i = 0; i < NB; ++i) ztot += zp_s[i * 64 + tid], ptot += pp_s[i * 64 + tid];
      zp_s[tid] = __expf(gts.gam[tid]) * dgs_s[tid] + ztot;
      a.du_part[((b * NT + n) * H + h) * D + own + tid] = ptot;
    }
    __syncthreads();
    dw_scan_store<C, kPart == BackwardPart::inter>(a, sx, sy, zp_s, base, own, L, n, b, h);
  }
}

}  // namespace tck

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
void launch_scan(const FusedArgs& a, int nz, int z_offset, cudaStream_t stream) {
  const size_t smem = (3 * C * (W + 1) + W) * sizeof(float);
  auto kernel = rwkv6_state_scan<T, C, W>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  const int64_t nt = a.dims.D / W;
  dim3 grid(static_cast<unsigned>(nt * nt), static_cast<unsigned>(a.dims.B * a.dims.H), nz);
  LT_LAUNCH(kernel, grid, kThreads, smem, stream, a, z_offset);
}

// State-scan tile width: 64 x 64 tiles, except D = 64 where 32 x 32 tiles give 4x the CTAs
// (B*H alone is below the SM count at the benchmark shapes; docs/notes-rwkv6.md).
bool scan_tile_32(int64_t D) { return D == 64; }

template <class T, int C>
void forward_t(const FusedArgs& a, cudaStream_t stream) {
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

template <class T, int C, BackwardPart kPart>
void launch_bwd_chunk(const FusedArgs& a, cudaStream_t stream) {
  const size_t smem = bwd_smem_floats<C>() * sizeof(float);
  auto kernel = rwkv6_bwd_chunk<T, C, kPart>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  dim3 grid(static_cast<unsigned>(a.dims.D / kW), static_cast<unsigned>(a.dims.num_chunks()),
            static_cast<unsigned>(a.dims.B * a.dims.H));
  LT_LAUNCH(kernel, grid, kThreads, smem, stream, a);
}

template <class T, int C>
void backward_t(const FusedArgs& a0, BwdImpl impl, bool h_is_valid, cudaStream_t stream) {
  FusedArgs a = a0;
  a.ht = nullptr;  // the recomputed forward scan must not touch the forward's outputs
  {
    StageScope s("scans");
    const int nz = h_is_valid ? 1 : 2, z0 = h_is_valid ? 1 : 0;
    if (scan_tile_32(a.dims.D)) launch_scan<T, C, 32>(a, nz, z0, stream);
    else launch_scan<T, C, 64>(a, nz, z0, stream);
  }
  if (impl == BwdImpl::fused) {
    StageScope s("chunk_fused");
    launch_bwd_chunk<T, C, BackwardPart::all>(a, stream);
  } else {
    {
      StageScope s("chunk_intra");
      launch_bwd_chunk<T, C, BackwardPart::intra>(a, stream);
    }
    StageScope s("chunk_inter");
    launch_bwd_chunk<T, C, BackwardPart::inter>(a, stream);
  }
  {
    StageScope s("du_reduce");
    LT_LAUNCH(rwkv6_du_reduce, dim3(static_cast<unsigned>(a.dims.H), static_cast<unsigned>(a.dims.D / 32)), 256, 0,
              stream, a);
  }
}

// ---- tensor-core path (bf16, chunk 32 / 64)
template <int C>
void launch_scan_tc(const FusedArgs& a, int nz, int z_offset, cudaStream_t stream) {
  const size_t smem = tck::scan_tc_smem_bytes<C>();
  auto kernel = tck::rwkv6_state_scan_tc<C>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  const int64_t nt = a.dims.D / 64;
  dim3 grid(static_cast<unsigned>(nt * nt), static_cast<unsigned>(a.dims.B * a.dims.H), nz);
  LT_LAUNCH(kernel, grid, kThreads, smem, stream, a, z_offset);
}

template <int C>
void forward_tc(const FusedArgs& a, cudaStream_t stream) {
  {
    StageScope s("state_scan");
    launch_scan_tc<C>(a, 1, 0, stream);
  }
  StageScope s("output");
  const size_t smem = tck::FwdLayout<C>::bytes;
  auto kernel = tck::rwkv6_fwd_output_tc<C>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  dim3 grid(static_cast<unsigned>(a.dims.D / kW), static_cast<unsigned>(a.dims.num_chunks()),
            static_cast<unsigned>(a.dims.B * a.dims.H));
  LT_LAUNCH(kernel, grid, kThreads, smem, stream, a);
}

template <int C, BackwardPart kPart>
void launch_bwd_chunk_tc(const FusedArgs& a, cudaStream_t stream) {
  const size_t smem = tck::BwdLayout<C>::bytes;
  auto kernel = tck::rwkv6_bwd_chunk_tc<C, kPart>;
  static size_t smem_set = 0;
  set_smem(kernel, smem, smem_set);
  dim3 grid(static_cast<unsigned>(a.dims.D / kW), static_cast<unsigned>(a.dims.num_chunks()),
            static_cast<unsigned>(a.dims.B * a.dims.H));
  LT_LAUNCH(kernel, grid, kThreads, smem, stream, a);
}

template <int C>
void backward_tc(const FusedArgs& a0, BwdImpl impl, bool h_is_valid, cudaStream_t stream) {
  FusedArgs a = a0;
  a.ht = nullptr;  // the recomputed forward scan must not touch the forward's outputs
  {
    StageScope s("scans");
    launch_scan_tc<C>(a, h_is_valid ? 1 : 2, h_is_valid ? 1 : 0, stream);
  }
  if (impl == BwdImpl::fused) {
    StageScope s("chunk_fused");
    launch_bwd_chunk_tc<C, BackwardPart::all>(a, stream);
  } else {
    {
      StageScope s("chunk_intra");
      launch_bwd_chunk_tc<C, BackwardPart::intra>(a, stream);
    }
    StageScope s("chunk_inter");
    launch_bwd_chunk_tc<C, BackwardPart::inter>(a, stream);
  }
  StageScope s("du_reduce");
  LT_LAUNCH(rwkv6_du_reduce, dim3(static_cast<unsigned>(a.dims.H), static_cast<unsigned>(a.dims.D / 32)), 256, 0,
            stream, a);
}

// Environment variable LINTRAIN_RWKV6_KERNELS, read once per process:
//   simt   the SIMT fp32 kernels for bf16 too (same-run comparisons with the tensor-core
//          kernels; kbench rwkv6 reports which family ran);
//   unset or anything else: the default choice (tensor cores for bf16 at chunk 32 / 64).
bool simt_forced() {
  static const bool forced = [] {
    const char* e = std::getenv("LINTRAIN_RWKV6_KERNELS");
    return e && std::string(e) == "simt";
  }();
  return forced;
}

template <class T>
void forward_dispatch(const FusedArgs& a, cudaStream_t s) {
  switch (a.dims.chunk) {
    case 16: return forward_t<T, 16>(a, s);
    case 32: return forward_t<T, 32>(a, s);
    default: return forward_t<T, 64>(a, s);
  }
}
template <class T>
void backward_dispatch(const FusedArgs& a, BwdImpl impl, bool hv, cudaStream_t s) {
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
  if (impl == BwdImpl::fallback) bytes += 2 * static_cast<size_t>(d.tokens_numel()) * sizeof(float);
  return bytes;
}

void cuda_check_args(const FusedArgs& a, bool backward, BwdImpl impl) {
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
    if (!a.dO || !a.dr || !a.dk || !a.dv || !a.dw || !a.du || !a.dh || !a.du_part)
      fail("dO, dr, dk, dv, dw, du and the scratch dh, du_part are required");
    if (impl == BwdImpl::fallback && (!a.dq_tmp || !a.dk_tmp)) fail("the fallback needs dq_tmp and dk_tmp");
  }
}

bool cuda_uses_tensor_cores(const Dims& d, DType dtype) {
  return dtype == DType::bf16 && (d.chunk == 32 || d.chunk == 64) && !simt_forced();
}

void cuda_forward(const FusedArgs& a, void* stream) {
  cuda_check_args(a, false, BwdImpl::fused);
  auto s = static_cast<cudaStream_t>(stream);
  if (cuda_uses_tensor_cores(a.dims, a.dtype)) {
    if (a.dims.chunk == 64) forward_tc<64>(a, s);
    else forward_tc<32>(a, s);
  } else if (a.dtype == DType::bf16) forward_dispatch<bfloat16>(a, s);
  else forward_dispatch<float>(a, s);
}

void cuda_backward(const FusedArgs& a, BwdImpl impl, bool h_is_valid, void* stream) {
  cuda_check_args(a, true, impl);
  auto s = static_cast<cudaStream_t>(stream);
  if (cuda_uses_tensor_cores(a.dims, a.dtype)) {
    if (a.dims.chunk == 64) backward_tc<64>(a, impl, h_is_valid, s);
    else backward_tc<32>(a, impl, h_is_valid, s);
  } else if (a.dtype == DType::bf16) backward_dispatch<bfloat16>(a, impl, h_is_valid, s);
  else backward_dispatch<float>(a, impl, h_is_valid, s);
}

}  // namespace lt::rwkv6
