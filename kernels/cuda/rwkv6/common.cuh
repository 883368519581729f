// RWKV6 CUDA kernels: what the stage files (kernels/cuda/rwkv6/*.cu) share: the SIMT
// kernels' tiling, device helpers and shared-memory plan; set_smem; the per-stage launchers
// (declared here, defined beside their kernels and instantiated there for every (dtype,
// chunk) the dispatch in rwkv6/launch.cu uses). Kernels and helpers have internal linkage
// (anonymous namespace): each stage file gets its own copy of the helpers it uses.
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
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/half.h"
#include "kernels/launch.h"
#include "kernels/rwkv6.h"

namespace lt::rwkv6 {

// The stage launchers: one launch each, on `stream`, with the grid, block and dynamic shared
// memory of its kernel. Scans: nz grid layers from z_offset (0 forward, 1 reverse).
template <class T, int C, int W>
void launch_scan(const FusedArgs& a, int nz, int z_offset, cudaStream_t stream);  // rwkv6_state_scan
template <int C>
void launch_scan_tc(const FusedArgs& a, int nz, int z_offset, cudaStream_t stream);  // rwkv6_state_scan_tc
template <class T, int C>
void launch_fwd_output(const FusedArgs& a, cudaStream_t stream);  // rwkv6_fwd_output
template <int C>
void launch_fwd_output_tc(const FusedArgs& a, cudaStream_t stream);  // rwkv6_fwd_output_tc
template <class T, int C, ChunkBwdTerms kPart>
void launch_bwd_chunk(const FusedArgs& a, cudaStream_t stream);  // rwkv6_bwd_chunk
template <int C, ChunkBwdTerms kPart>
void launch_bwd_chunk_tc(const FusedArgs& a, cudaStream_t stream);  // rwkv6_bwd_chunk_tc
void launch_du_reduce(const FusedArgs& a, cudaStream_t stream);     // rwkv6_du_reduce

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
// Chunk-parallel kernels: shared memory plan (floats), C = chunk rows, NB = C / 16.
struct ChunkSmem {
  static constexpr int tile(int C) { return C * kLD; }                   // [C][65] token tile
  static constexpr int state() { return kW * kLD; }                      // [64][65] state tile
  static constexpr int cc(int C) { return C * (C + 1); }                 // [C][C+1] dP or A
  static constexpr int vecs(int C) { return kW * (4 + 3 * (C / kBC)); }  // gam, u, dgs, spare, gs/gend/eW
};

// Forward output. grid (D/64 value tiles, NT, B*H). The CTA rebuilds A over all key tiles

// Raises a kernel's dynamic shared-memory limit once per process: `done` is a static of the
// (per-instantiation) launcher, since kernels of one signature share a pointer type.
template <class Kernel>
void set_smem(Kernel kernel, size_t bytes, size_t& done) {
  if (done >= bytes) return;
  LT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  done = bytes;
}

}  // namespace
}  // namespace lt::rwkv6
