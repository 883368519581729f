// RWKV6 tensor-core kernels: the tiles, gates and fragment helpers that the tensor-core kernels
// of the stage files share.
//
// Tensor-core kernels: bf16 inputs, chunk C = 32 or 64. The algebra (bf16 operands, fp32
// accumulation, the safe-column diagonal blocks) is kernels/rwkv6.h's "Tensor-core variant";
// its CPU twin is Variant::tensor_core in kernels/cpu/rwkv6.cpp.
// 8 warps. In the chunk kernels warp w owns the 16-row block rb = w % NB of every C-row
// output and a column slice `part` = w / NB of it: [part*COLS, +COLS) of a 64-wide tile and
// [part*CCOLS, +CCOLS) of a C x C matrix. Accumulators are mma fragments: element e of n8
// tile nt sits at row 16 rb + g + 8 (e >> 1), column base + 8 nt + 2 t + (e & 1)
// (g = lane / 4, t = lane % 4). Operand tiles are bf16 [rows][kLDB] in shared memory, built
// elementwise (gates, exponentials, masks) and read by ldmatrix.
#pragma once
#include "kernels/cuda/rwkv6/common.cuh"

namespace lt::rwkv6 {
namespace {
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

}  // namespace tck
}  // namespace
}  // namespace lt::rwkv6
