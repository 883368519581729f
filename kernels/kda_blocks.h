// KDA fused path: the block programs. One definition serves two executors:
//   kernels/cuda/kda.cu   each program is the body of a __global__ kernel (Blk = CUDA block)
//   kernels/cpu/kda.cpp   the CPU twin runs the same program on an emulated block: NTHR host
//                         threads, sync() = std::barrier, warp_sum over 32 emulated lanes.
// So the twins test the kernels' own index arithmetic, masking and barriers without a GPU.
//
// A program sees: FusedArgs and its pass's workspace (ForwardWorkspace / BackwardWorkspace),
// a Blk, its block coordinates and a float* to its shared memory. Blk provides: tid(); sync()
// (block barrier); warp_sum(v) (sum over the 32 lanes, every lane gets it); shfl_xor(v, mask)
// (the value of lane ^ mask); fence() (device-scope fence of this thread's writes);
// arrive(counter) (atomic increment, returns the old value); acquire() (fence before reading
// other blocks' published data); load_cg(p) (load bypassing L1); prefetch_l2(p) (a hint: fetch
// p's line into L2; no-op on the CPU); mma_tf32 (one warp-wide m16n8k8 product);
// copy16_async(dst, src) (4 floats global -> shared, both 16-byte aligned: landed once this
// thread's wait_copies() returns, visible to the block after a later sync(); at once on the CPU).
// The split inter adjoint's Blk (a block of a thread-block cluster) also provides
// cluster_sync() and peer(p, rank) (see inter_adjoint_split_program).
// Rules that keep both executors equivalent: every sync(), warp_sum() and shfl_xor() is
// reached by all threads (the warp ones: all 32 lanes); shared memory is carved by byte counts below;
// global memory written by one block is read by another only across launches (or after
// arrive()/acquire() in the intra adjoint's last-block reduction).
//
// Chunk algorithm (per (b, h), chunk n of C rows r, s; L = valid rows of the chunk):
//   Gamma_r = sum_{s<=r} g_s (chunk-local, fp32; kept in log2 units inside the programs so
//   exp2 is one instruction; derivatives are taken w.r.t. natural Gamma)
//   P(x,y)[r,s] = sum_d x_rd y_sd e^{Gamma_rd - Gamma_sd}
//   A_qk = scale P(q^,k^) (s<=r);  A = diag(beta) P(k^,k^) (s<r);  Tm = (I + A)^{-1}
//   W = Tm diag(beta) K~,  U = Tm diag(beta) V,  K~ = K^ e^{Gamma},  Q~ = Q^ e^{Gamma},
//   Kbar = K^ e^{gamma - Gamma},  gamma = Gamma_last
//   state scan:  Delta = U - W S;  O = scale Q~ S + A_qk Delta;  S <- e^gamma S + Kbar^T Delta
// Safe exponentials (math doc F): pairs (r, s) in the same 16-row sub-block use
// e^{Gamma_r - Gamma_s} elementwise (computed only for s <= r, so <= 1); pairs in
// different sub-blocks factor through the first row n of r's sub-block:
// (x_r e^{Gamma_r - Gamma_n}) . (y_s e^{Gamma_n - Gamma_s}), both factors <= 1. Gates are
// <= 0, so nothing overflows for any gate value and any chunk size.
//
// Launches (grids are 1-D, block index = bh * NT + n or bh * NV + vt):
//   intra      (fwd)  grid NT*B*H   : Gamma, A_qk, Tm -> the ForwardWorkspace tiles W, U,
//                                     Qp = scale Q~ - A_qk W, Kbar, Ob = A_qk U, gamma, and,
//                                     kept for the backward, sQ = scale Q~ and Aqk
//   inter      (fwd)  grid NV*B*H   : per V tile of 16 columns, sequential over chunks:
//                                     h[n] = S; Delta = U - W S; O = Ob + Qp S;
//                                     S <- e^gamma S + Kbar^T Delta
//   aqk_dO     (bwd)  grid NT*B*H   : AqkT_dO = A_qk^T dO from the saved Aqk (the forward's
//                                     W, U, scale Q~, Kbar and gamma are reused as saved:
//                                     the backward recomputes no intra-chunk product)
//   inter_adjoint     grid B*H      : reverse over chunks with S' (dS after the chunk):
//                                     Delta = U - W S, dDelta = A_qk^T dO + Kbar S',
//                                     X_q = dO S^T, X_w = dDelta S^T, X_k = Delta S'^T,
//                                     dgamma_s = e^gamma sum_v S S',
//                                     S' <- e^gamma S' + scale Q~^T dO - W^T dDelta
//                                     (in place over the saved tiles; no dS trajectory)
//                     or grid NV*B*H: clusters of NV = 2 or 4 blocks per (b, h) (4 where
//                                     B*H is small: kda.h inter_adjoint_split), each owning
//                                     D/NV state columns (Delta, dDelta, S') and D/NV K rows
//                                     (X_*, dgamma_s), exchanging columns through DSMEM
//                                     (inter_adjoint_split_program; FusedArgs::scan_split)
//   intra_adjoint     grid NT*B*H   : everything chunk-local: dA_qk = dO Delta^T, dTm,
//                                     dA = -Tm^T dTm Tm^T, dV, dbeta, the P adjoints, the
//                                     chunk-decay terms, reverse cumsum, gate / L2 / sigmoid
//                                     backward, and dA_log / ddt_bias by a deterministic
//                                     last-block reduction.
#pragma once
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "kernels/half.h"
#include "kernels/kda.h"
#if defined(__CUDACC__)
#include "kernels/cuda/mma.cuh"  // bf16_bits_rn, pack_bf16x2_rn
#endif

// The CUDA and the CPU translation units both instantiate these programs. nvcc's host pass
// emits host stubs for __device__ functions under their own names, which would collide
// with the CPU twins' inline definitions at link time; so each side gets its namespace.
#if defined(__CUDACC__)
#define KDA_BLOCKS_NS blocks_dev
#define KDA_DEV __device__ __forceinline__
#define KDA_UNROLL _Pragma("unroll")
#define KDA_UNROLL_N(n) _Pragma("unroll 8")  // only n = 8 is used
#else
#define KDA_BLOCKS_NS blocks
#define KDA_DEV inline
#define KDA_UNROLL
#define KDA_UNROLL_N(n)
#endif

namespace lt::kda::KDA_BLOCKS_NS {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr int kSub = 16;  // sub-block rows of the safe factorisation and of the solve

// ---- per-configuration constants --------------------------------------------------------
template <int D_, int C_, int NT_ = 256>
struct Cfg {
  static constexpr int D = D_;         // head dim (K = V = D)
  static constexpr int C = C_;         // chunk length
  static constexpr int KS = 32;        // column slice of the chunk-parallel programs
  static constexpr int NKS = D / KS;   // slices per row
  static constexpr int NB = C / kSub;  // sub-blocks per chunk
  static constexpr int LS = KS + 1;    // slice row stride (odd: conflict-free columns)
  static constexpr int LC = C + 4;     // C x C row stride: 4 mod 32 makes the mma A-fragment
                                       // reads (g, t) of C x C tiles conflict-free (odd: up
                                       // to 4-way) and the transposed ones (t, g) 2-way
  static constexpr int LD = D + 1;     // D-wide row stride
  static constexpr int NTHR = NT_;     // threads of the chunk-parallel programs
  static constexpr int SLICE = C * LS;
  static constexpr int CC = C * LC;
  // inter (forward scan): V tiles of BV columns, NTHR_I threads. Not narrower: every block
  // loads the chunk's full C x D W / Qp / Kbar tiles, so more V tiles mean more per-chunk
  // loads (BV = 8 is slower: docs/notes-kda.md, "Measurements behind the kernel constants").
  // At D = 128, C = 64 the 16-column tile (128 threads) keeps 132 KB of shared memory a block
  // (one block an SM: the 8 V tiles of 32 heads are two waves of the whole sequential scan)
  // and 208 prefetch floats a thread (over the 128 of the register prefetch, so each chunk's
  // tiles load on the critical path); 32 columns on 256 threads halve the blocks and the
  // per-thread loads: 5.32 -> 1.45 ms at B2 T16384 H16 (docs/notes-kda.md, "2026-12-01: the
  // D128 chunk programs").
  static constexpr bool kWideInter = D_ == 128 && C_ == 64;
  static constexpr int BV = kWideInter ? 32 : 16;
  static constexpr int NV = D / BV;
  static constexpr int LDA = D + 4;   // row stride of D-wide tiles read as mma A operands:
                                      // 4 mod 32 makes the (g, t) fragment pattern conflict-free
  static constexpr int LBV = BV + 8;  // (BV + 8) t + g = 8 t + g (mod 32), t < 4, g < 8: the
                                      // (k = t, n = g) B-fragment pattern is conflict-free
  static constexpr int NTHR_I = kWideInter ? 256 : 128;
  // inter adjoint: full V per block (one block per (b, h): 96 blocks at B8 H12, one per SM),
  // row blocks of RB rows, TPW adjacent 16x8 tiles of the row-block products per warp. At
  // D = 64 and C >= 32 the row block is 32 rows, so 16 warps share each chunk's work (8 warps
  // leave the SM's schedulers idle). At D = 128 a warp takes two tiles (8 warps): every A
  // fragment it loads then serves two mma and its S' tiles are one whole row of tiles, so a
  // step loads a third fewer shared-memory operands, and the cap of 255 registers (not 128 at
  // 512 threads, which spilled) holds the 64 S' accumulators. Measured 10.24 -> 9.14 ms at B2
  // T16384 H16 C64 (docs/notes-kda.md, "2026-12-01: the D128 chunk programs").
  static constexpr int RB = (D == 64 && C >= 32) ? 2 * kSub : kSub;
  static constexpr int TPW = D == 128 ? 2 : 1;
  static constexpr int NTHR_A = (RB / 16) * (D / 8) / TPW * 32;  // S' accumulator: D*D/NTHR_A registers
  static_assert(D % KS == 0 && C % kSub == 0 && NTHR % 32 == 0);
  static_assert((C * KS) % (2 * NTHR) == 0, "slice loops (column pairs) are uniform over threads");
  static_assert((C * D) % NTHR == 0 && (C * C) % NTHR == 0);
  static_assert((C * BV) % NTHR_I == 0 && (D * BV) % NTHR_I == 0 && NTHR_I % BV == 0);
  static_assert((D * D) % NTHR_A == 0 && (RB * D) % (2 * NTHR_A) == 0);
  static_assert((C * D) % (2 * NTHR_I) == 0 && (C * BV) % (2 * NTHR_I) == 0, "scan loads: column pairs");

  // shared memory, in floats
  static constexpr int kIntraFloats = 3 * CC + kSub * LC + 11 * C + 6 * SLICE;
  static constexpr int kAqkFloats = CC + SLICE;
  static constexpr int kInterFloats = 3 * C * LDA + 3 * C * LBV + D * LBV + D;
  static constexpr int kAdjFloats = 2 * D * LDA + 6 * RB * LDA + D;
  // The intra adjoint at C = 64 runs one block per SM (its shared memory): 512 threads hide
  // more latency there. At C <= 32 several 256-thread blocks fit per SM and 256 threads are
  // faster (both measured: docs/notes-kda.md, "Measurements behind the kernel constants").
  using Adj = Cfg<D_, C_, C_ == 64 ? 512 : 256>;
  // Blocks per SM the intra adjoint is compiled for (register cap 65536 / (3 * 256) -> 80):
  // at D = 64, C = 32 its shared memory (76 KB) admits 3 blocks, and the kernel is bound by
  // latency (wait / long scoreboard / barrier stalls), which more resident blocks hide.
  // At C = 16 (33 KB) a cap of 64 registers gives 4 blocks without spills (ptxas -v).
  static constexpr int kIntraAdjMinBlocks = NTHR != 256 || D != 64 ? 1 : C == 32 ? 3 : 4;
  static constexpr int kIntraAdjFloats = 5 * CC + 14 * C + 12 * SLICE + D + KS + NTHR / 32 + 4;
};

// ---- scalar helpers ---------------------------------------------------------------------
// 2^x in one MUFU.EX2 on the GPU (ex2.approx.ftz: ~2 ulp, subnormal results flushed to 0).
// exp2f wraps the same instruction in a subnormal range check and two predicated
// multiplies: 4 instructions where this is 1.
KDA_DEV float exp2_fast(float x) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return exp2f(x);
#endif
}
// a / b without the IEEE division's slow path (__fdividef: ~2 ulp for |b| < 2^126).
KDA_DEV float div_fast(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdividef(a, b);
#else
  return a / b;
#endif
}
KDA_DEV float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

struct GateVal {
  float g;     // log decay (natural)
  float dgdx;  // dg/dx
  float dgda;  // dg/dA_log
};
KDA_DEV GateVal gate_value(float x, float ea, const Gate& gate) {
  if (gate.use_lower_bound) {
    const float s = sigmoid_f(ea * x);
    const float dgdz = gate.lower_bound * s * (1.0f - s);
    return {gate.lower_bound * s, dgdz * ea, dgdz * ea * x};
  }
  // one exponential serves softplus and its derivative: sigmoid(x) = e^x / (1 + e^x)
  const bool lin = x > 20.0f;
  const float ex = exp2_fast(x * kLog2e);
  const float sp = lin ? x : log1pf(ex);
  const float g = -ea * sp;
  return {g, -ea * (lin ? 1.0f : div_fast(ex, 1.0f + ex)), g};
}

template <class T>
KDA_DEV float ld(const T* p, int64_t i) {
  return static_cast<float>(load_as_compute(p[i]));
}
template <class T>
KDA_DEV void st(T* p, int64_t i, float v) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, bfloat16>) {  // one cvt (RNE, as float_to_bf16_bits) instead of 5
    p[i] = bfloat16::from_bits(tc::bf16_bits_rn(v));
    return;
  }
#endif
  p[i] = store_from_compute<T>(v);
}
// v0 = p[i], v1 = p[i + 1] in one load on the GPU (i even, p aligned to 2 elements).
template <class T>
KDA_DEV void ld2(const T* p, int64_t i, float& v0, float& v1) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, bfloat16>) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(p + i);
    v0 = __uint_as_float(u << 16);
    v1 = __uint_as_float(u & 0xffff0000u);
    return;
  } else if constexpr (std::is_same_v<T, float>) {
    const float2 f = *reinterpret_cast<const float2*>(p + i);
    v0 = f.x;
    v1 = f.y;
    return;
  }
#endif
  v0 = ld(p, i);
  v1 = ld(p, i + 1);
}
// p[0] = v0, p[1] = v1 (shared memory, p 8-byte aligned): one 64-bit store on the GPU.
KDA_DEV void sts2(float* p, float v0, float v1) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
#else
  p[0] = v0;
  p[1] = v1;
#endif
}
// dst[0..3] = src[0..3]; both 16-byte aligned: one 128-bit load and store on the GPU.
KDA_DEV void copy4(float* dst, const float* src) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
#else
  for (int u = 0; u < 4; ++u) dst[u] = src[u];
#endif
}
// p[i] = v0, p[i + 1] = v1 in one store on the GPU (i even, p aligned to 2 elements): the two
// adjacent columns an mma C fragment holds per row (c0 c1, c2 c3).
template <class T>
KDA_DEV void st2(T* p, int64_t i, float v0, float v1) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, bfloat16>) {
    *reinterpret_cast<uint32_t*>(p + i) = tc::pack_bf16x2_rn(v0, v1);
    return;
  } else if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float2*>(p + i) = make_float2(v0, v1);
    return;
  }
#endif
  st(p, i, v0);
  st(p, i + 1, v1);
}

// ---- warp-level tensor-core tiles: mma.sync m16n8k8, TF32 operands, fp32 accumulate ------
// Fragments (PTX ISA, m16n8k8 .tf32), lane = 4 g + t:
//   A 16x8 (row):  a0 (g, t)   a1 (g+8, t)   a2 (g, t+4)   a3 (g+8, t+4)
//   B 8x8  (col):  b0 (k=t, n=g)             b1 (k=t+4, n=g)
//   C 16x8:        c0 (g, 2t)  c1 (g, 2t+1)  c2 (g+8, 2t)  c3 (g+8, 2t+1)
// kSplit (3xTF32): x = hi + lo with hi = tf32(x), lo = tf32(x - hi); a b ~ al bh + ah bl + ah bh
// keeps fp32-level accuracy (the dropped lo lo term is ~2^-22 relative); used for f32 inputs.
// Without it (bf16 inputs) one TF32 product: ~2^-11 relative per operand.
// TF32 operand of a single-product mma: the fp32 bits plus half a TF32 ulp (0x1000). The
// tensor core ignores the low 13 bits, so this is round-to-nearest (ties away from zero, as
// cvt.rna) in one integer add; cvt.rna.tf32.f32 is emulated on sm_90 by a finiteness test,
// a predicated add and a mask (3 instructions). Finite x only (an infinite operand reads as
// NaN; no product here sees one). Operands are rounded, not passed as raw fp32 bits for the
// tensor core to truncate: truncation is biased toward zero, so its errors would add up
// coherently in the cancelling dA_log sum (docs/notes-kda.md, "Measurements behind the kernel constants").
KDA_DEV uint32_t tf32_op(float x) { return float_bits(x) + 0x1000u; }
// The TF32 value itself (low 13 bits zero), for the hi part of a 3xTF32 split.
KDA_DEV uint32_t tf32_round(float x) { return tf32_op(x) & 0xffffe000u; }
KDA_DEV void frag_rc(int lane, int e, int& r, int& c) {  // C-fragment element e -> (row, col)
  r = (lane >> 2) + ((e & 2) ? 8 : 0);
  c = 2 * (lane & 3) + (e & 1);
}
// hi / lo TF32 parts of one operand value
KDA_DEV void tf32_split(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32_round(x);
  lo = tf32_op(x - bits_float(hi));  // an mma operand only: its low bits are ignored
}
// An NA x NB block of 16x8 tensor-core products (m16n8k8 TF32, one warp):
//   acc_at(i, u) += sum_{k<K} A_i(r, k) B_u(k, c)   for r < 16, c < 8,
// with a_at(i, r, k), b_at(u, k, c) reading the tiles (relative coordinates) and acc_at(i, u)
// returning the float[4] C fragment of tile (i, u). K a multiple of 8 (a compile-time constant
// after inlining where it can be). Each A and each B fragment is loaded and converted once per
// k step for all the tiles that use it (NA + NB loads for NA NB mma). kSplit: 3xTF32
// (hi hi + hi lo + lo hi, fp32-level accuracy); otherwise one TF32 product.
template <bool kSplit, int NA, int NB, class Blk, class FC, class FA, class FB>
KDA_DEV void mma_tiles(Blk& blk, FC acc_at, int K, FA a_at, FB b_at) {
  const int lane = blk.tid() & 31, g = lane >> 2, t = lane & 3;
  auto split = [](float x, uint32_t& hi, uint32_t& lo) {
    if constexpr (kSplit) tf32_split(x, hi, lo);
    else hi = tf32_op(x);  // the low parts are never formed
  };
  KDA_UNROLL
  for (int k0 = 0; k0 < K; k0 += 8) {
    uint32_t ah[NA][4], al[NA][4] = {}, bh[NB][2], bl[NB][2] = {};
    KDA_UNROLL
    for (int i = 0; i < NA; ++i) {
      split(a_at(i, g, k0 + t), ah[i][0], al[i][0]);
      split(a_at(i, g + 8, k0 + t), ah[i][1], al[i][1]);
      split(a_at(i, g, k0 + t + 4), ah[i][2], al[i][2]);
      split(a_at(i, g + 8, k0 + t + 4), ah[i][3], al[i][3]);
    }
    KDA_UNROLL
    for (int u = 0; u < NB; ++u) {
      split(b_at(u, k0 + t, g), bh[u][0], bl[u][0]);
      split(b_at(u, k0 + t + 4, g), bh[u][1], bl[u][1]);
    }
    KDA_UNROLL
    for (int i = 0; i < NA; ++i) {
      KDA_UNROLL
      for (int u = 0; u < NB; ++u) {
        float(&d)[4] = acc_at(i, u);
        if constexpr (kSplit) {
          blk.mma_tf32(d, al[i], bh[u]);
          blk.mma_tf32(d, ah[i], bl[u]);
        }
        blk.mma_tf32(d, ah[i], bh[u]);
      }
    }
  }
}
// One tile: acc (16x8) += sum_{k<K} A(r, k) B(k, c).
template <bool kSplit, class Blk, class FA, class FB>
KDA_DEV void mma_acc(Blk& blk, float (&acc)[4], int K, FA a_at, FB b_at) {
  mma_tiles<kSplit, 1, 1>(
      blk, [&](int, int) -> float(&)[4] { return acc; }, K, [&](int, int r, int k) { return a_at(r, k); },
      [&](int, int k, int c) { return b_at(k, c); });
}
// Two products sharing B: acc1 += A1 B, acc2 += A2 B.
template <bool kSplit, class Blk, class FA1, class FA2, class FB>
KDA_DEV void mma_acc2(Blk& blk, float (&acc1)[4], float (&acc2)[4], int K, FA1 a1_at, FA2 a2_at, FB b_at) {
  mma_tiles<kSplit, 2, 1>(
      blk, [&](int i, int) -> float(&)[4] { return i == 0 ? acc1 : acc2; }, K,
      [&](int i, int r, int k) { return i == 0 ? a1_at(r, k) : a2_at(r, k); },
      [&](int, int k, int c) { return b_at(k, c); });
}
// NA x NB tiles stored contiguously: tile (i, u) at acc + 4 (i NB + u).
template <bool kSplit, int NA, int NB, class Blk, class FA, class FB>
KDA_DEV void mma_acc_block(Blk& blk, float* acc, int K, FA a_at, FB b_at) {
  mma_tiles<kSplit, NA, NB>(
      blk, [&](int i, int u) -> float(&)[4] { return *reinterpret_cast<float(*)[4]>(acc + 4 * (i * NB + u)); }, K, a_at,
      b_at);
}

// ---- block-level products -------------------------------------------------------------
// A finish that also takes (r, c, v0, v1), the adjacent columns c and c + 1 of one row, is
// called that way on the tensor-core path (an mma C fragment holds such pairs), so that a
// store to global memory goes out as one 32-bit (bf16) or 64-bit (fp32) store: per-element
// 2-byte stores stall the scans (measured: docs/notes-kda.md, "Measurements behind the
// kernel constants").
template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;
// For r < M, c < N (M a multiple of 16, N of 8; runtime values):
//   finish(r, c, init(r, c) + sum_k A(r, k) B(k, c))
// need(m0, n0): whether the 16x8 tile at (m0, n0) is needed (skipped tiles are not written).
// kTC: tensor cores, one warp per tile, k over [0, K) (K a multiple of 8; entries outside the
// product's true range must read as 0). Otherwise one thread per element, k over
// krange(r, c, lo, hi) (defaults [0, K)), fp32 FMAs.
struct AllTiles {
  KDA_DEV bool operator()(int, int) const { return true; }
};
struct FullK {
  KDA_DEV void operator()(int, int, int&, int&) const {}
};
template <bool kTC, bool kSplit, int NTHR, class Blk, class FA, class FB, class FI, class FO, class FN = AllTiles,
          class FK = FullK>
KDA_DEV void block_product(Blk& blk, int M, int N, int K, FA a_at, FB b_at, FI init, FO finish, FN need = FN(),
                           FK krange = FK()) {
  if constexpr (kTC) {
    const int lane = blk.tid() & 31, warp = blk.tid() >> 5;
    const int ntn = N / 8, ntiles = (M / 16) * ntn;
    for (int ti = warp; ti < ntiles; ti += NTHR / 32) {
      const int m0 = (ti / ntn) * 16, n0 = (ti % ntn) * 8;
      if (!need(m0, n0)) continue;  // warp-uniform
      float acc[4];
      KDA_UNROLL
      for (int e = 0; e < 4; ++e) {
        int r, c;
        frag_rc(lane, e, r, c);
        acc[e] = init(m0 + r, n0 + c);
      }
      mma_acc<kSplit>(
          blk, acc, K, [&](int r, int k) { return a_at(m0 + r, k); }, [&](int k, int c) { return b_at(k, n0 + c); });
      if constexpr (std::is_invocable_v<FO&, int, int, float, float>) {  // (c, c + 1) pairs
        KDA_UNROLL
        for (int e = 0; e < 4; e += 2) {
          int r, c;
          frag_rc(lane, e, r, c);
          finish(m0 + r, n0 + c, acc[e], acc[e + 1]);
        }
      } else {
        KDA_UNROLL
        for (int e = 0; e < 4; ++e) {
          int r, c;
          frag_rc(lane, e, r, c);
          finish(m0 + r, n0 + c, acc[e]);
        }
      }
    }
  } else {
    for (int e = blk.tid(); e < M * N; e += NTHR) {
      const int r = e / N, c = e % N;
      if (!need((r / 16) * 16, (c / 8) * 8)) continue;
      int lo = 0, hi = K;
      krange(r, c, lo, hi);
      float acc = init(r, c);
      for (int k = lo; k < hi; ++k) acc += a_at(r, k) * b_at(k, c);
      finish(r, c, acc);
    }
  }
}
// Two products with a shared B: finish(r, c, sum_k A1(r,k) B(k,c), sum_k A2(r,k) B(k,c)).
template <bool kTC, bool kSplit, int NTHR, class Blk, class FA1, class FA2, class FB, class FO, class FK = FullK>
KDA_DEV void block_product2(Blk& blk, int M, int N, int K, FA1 a1_at, FA2 a2_at, FB b_at, FO finish, FK krange = FK()) {
  if constexpr (kTC) {
    const int lane = blk.tid() & 31, warp = blk.tid() >> 5;
    const int ntn = N / 8, ntiles = (M / 16) * ntn;
    for (int ti = warp; ti < ntiles; ti += NTHR / 32) {
      const int m0 = (ti / ntn) * 16, n0 = (ti % ntn) * 8;
      float acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_acc2<kSplit>(
          blk, acc1, acc2, K, [&](int r, int k) { return a1_at(m0 + r, k); },
          [&](int r, int k) { return a2_at(m0 + r, k); }, [&](int k, int c) { return b_at(k, n0 + c); });
      KDA_UNROLL
      for (int e = 0; e < 4; ++e) {
        int r, c;
        frag_rc(lane, e, r, c);
        finish(m0 + r, n0 + c, acc1[e], acc2[e]);
      }
    }
  } else {
    for (int e = blk.tid(); e < M * N; e += NTHR) {
      const int r = e / N, c = e % N;
      int lo = 0, hi = K;
      krange(r, c, lo, hi);
      float acc1 = 0.0f, acc2 = 0.0f;
      for (int k = lo; k < hi; ++k) {
        const float b = b_at(k, c);
        acc1 += a1_at(r, k) * b;
        acc2 += a2_at(r, k) * b;
      }
      finish(r, c, acc1, acc2);
    }
  }
}

// Where chunk n of sequence (b, h) lives. The int64 bases are computed once per block, so
// the per-element index is one multiply-add: Dims::NT() is an int64 division (a long
// software sequence on the GPU), too costly to evaluate per element.
struct ChunkPos {
  int64_t b, h, bh, n, t0;
  int L;               // valid rows
  int64_t NT;          // chunks per sequence
  int64_t in_base;     // element (0, 0) of the chunk in a [B,T,H,D] input
  int64_t in_rstride;  // H * D: one token row of a [B,T,H,D] input
  int64_t row_base;    // row 0 of the chunk in a [B,T,H] input
  int64_t ws_row;      // row 0 of the chunk in a [B,H,Tp,*] workspace tile
  int64_t ws_base;     // element (0, 0) of the chunk in a [B,H,Tp,D] workspace tile
  int D;
  KDA_DEV ChunkPos(const Dims& dm, int64_t bh_, int64_t n_)
      : b(bh_ / dm.H), h(bh_ % dm.H), bh(bh_), n(n_), t0(n_ * dm.C) {
    const int64_t rest = dm.T - t0;
    L = static_cast<int>(rest < dm.C ? rest : dm.C);
    NT = dm.NT();
    D = dm.D;
    in_rstride = dm.H * dm.D;
    row_base = (b * dm.T + t0) * dm.H + h;
    in_base = row_base * dm.D;
    ws_row = bh * NT * dm.C + t0;
    ws_base = ws_row * dm.D;
  }
  // element (r, col) of a [B,T,H,D] input; row of a [B,T,H] input
  KDA_DEV int64_t in(const Dims&, int r, int col) const { return in_base + r * in_rstride + col; }
  KDA_DEV int64_t in_row(const Dims& dm, int r) const { return row_base + r * dm.H; }
  // element (r, col) of a [B,H,Tp,D] workspace tile (r < C, so r * D fits in int)
  KDA_DEV int64_t ws(const Dims&, int r, int col) const { return ws_base + (r * D + col); }
  KDA_DEV int64_t gam(const Dims&, int col) const { return (bh * NT + n) * D + col; }
};

KDA_DEV float resolved_scale(const FusedArgs& a) {
  return a.scale != 0.0f ? a.scale : 1.0f / sqrtf(static_cast<float>(a.dims.D));
}

// ---- warp-parallel column scans and row / column reductions over slices -----------------
// Column work on a slice [C][LS] (KS = 32 columns) is spread over all warps: a column is
// covered by kLanes = 8 lanes holding kRows = C / 8 consecutive rows each, so a warp covers
// kCols = 4 columns at once and the KS columns take kPasses = 8 warp passes (one per warp at
// 256 threads). The dependent chain is kRows adds and 3 shuffles, where a thread per column
// walking all C rows would be a C-long chain with 7 of 8 warps idle (one warp per column,
// 32 lanes and 4 passes per warp, is slower than both: docs/notes-kda.md, "Measurements
// behind the kernel constants").
template <class G>
struct ColLanes {
  static constexpr int kLanes = 8;               // lanes per column
  static constexpr int kRows = G::C / kLanes;    // consecutive rows per lane
  static constexpr int kCols = 32 / kLanes;      // columns per warp pass
  static constexpr int kPasses = G::KS / kCols;  // warp passes per slice
  static_assert(G::C % kLanes == 0 && G::KS % kCols == 0);
};
// Recursive doubling over the kLanes lanes of a segment (seg = lane % kLanes): returns the
// sum of `tot` over the lanes before this one in scan order (kReverse: the later lanes) and
// leaves the segment's total in tot. Every lane of the warp must call it.
template <int kLanes, bool kReverse, class Blk>
KDA_DEV float segment_prefix(Blk& blk, float& tot, int seg) {
  float pre = 0.0f;
  KDA_UNROLL
  for (int o = 1; o < kLanes; o <<= 1) {
    const float t = blk.shfl_xor(tot, o);
    if (kReverse ? !(seg & o) : (seg & o)) pre += t;  // the partner precedes in scan order
    tot += t;
  }
  return pre;
}
// In place: x[r][c] = sum_{s <= r} x[s][c]. No sync.
template <class G, class Blk>
KDA_DEV void cumsum_columns(Blk& blk, float* x) {
  using L = ColLanes<G>;
  const int lane = blk.tid() & 31, seg = lane % L::kLanes;
  for (int p = blk.tid() >> 5; p < L::kPasses; p += G::NTHR / 32) {  // warp-uniform
    const int c = p * L::kCols + lane / L::kLanes, r0 = seg * L::kRows;
    float v[L::kRows], tot = 0.0f;
    KDA_UNROLL
    for (int i = 0; i < L::kRows; ++i) v[i] = tot += x[(r0 + i) * G::LS + c];
    const float pre = segment_prefix<L::kLanes, false>(blk, tot, seg);
    KDA_UNROLL
    for (int i = 0; i < L::kRows; ++i) x[(r0 + i) * G::LS + c] = v[i] + pre;
  }
}
// dst[r] += sum_{c < N} f(r, c) for r < M: 8 lanes per row (N / 8 columns each, strided so a
// row's lanes read consecutive columns), 4 rows per warp pass. f is evaluated at every c < N.
template <int M, int N, int NTHR, class Blk, class F>
KDA_DEV void add_row_sums(Blk& blk, float* dst, F f) {
  constexpr int kLanes = 8, kRowsPerPass = 32 / kLanes;
  static_assert(N % kLanes == 0 && M % kRowsPerPass == 0);
  const int lane = blk.tid() & 31, seg = lane % kLanes;
  for (int p = blk.tid() >> 5; p < M / kRowsPerPass; p += NTHR / 32) {  // warp-uniform
    const int r = p * kRowsPerPass + lane / kLanes;
    float v = 0.0f;
    KDA_UNROLL
    for (int c = seg; c < N; c += kLanes) v += f(r, c);
    segment_prefix<kLanes, false>(blk, v, seg);
    if (seg == 0) dst[r] += v;
  }
}

// Asks L2 for every 128-byte line of the chunk's rows of the arrays a program will read, at
// its start: the loads of each later phase then wait on L2 instead of DRAM.
// Ranges are dealt to consecutive threads, continuing where the previous range stopped.
template <int NTHR>
struct L2Prefetch {
  int next = 0;  // thread that takes the next range's first line
  // rows r < L of a [B,T,H,D] input (row r at in(r, 0), D elements each)
  template <class T, class Blk>
  KDA_DEV void in_rows(Blk& blk, const ChunkPos& cp, const T* src) {
    const int per_row = (cp.D * static_cast<int>(sizeof(T)) + 127) / 128;
    range(blk, cp.L * per_row, [&](int i) {
      return reinterpret_cast<const char*>(src + cp.in_base + (i / per_row) * cp.in_rstride) + 128 * (i % per_row);
    });
  }
  // `bytes` contiguous bytes from p (e.g. the chunk's C x D block of a [B,H,Tp,D] tile)
  template <class Blk>
  KDA_DEV void bytes(Blk& blk, const void* p, int n) {
    range(blk, (n + 127) / 128, [&](int i) { return static_cast<const char*>(p) + 128 * i; });
  }
  template <class T, class Blk>
  KDA_DEV void tile(Blk& blk, const ChunkPos& cp, int C, const void* t) {
    bytes(blk, static_cast<const T*>(t) + cp.ws_base, C * cp.D * static_cast<int>(sizeof(T)));
  }
  template <class Blk, class F>
  KDA_DEV void range(Blk& blk, int n, F addr) {
    for (int i = (blk.tid() - next + NTHR) % NTHR; i < n; i += NTHR) blk.prefetch_l2(addr(i));
    next = (next + n) % NTHR;
  }
};

// ---- shared building blocks of the chunk-parallel programs -------------------------------

// rstd of q and k rows (0 for rows >= L) and beta (0 for rows >= L).
// part: C * (D/32) floats of scratch.
template <class G, class T, class Blk>
KDA_DEV void chunk_row_stats(Blk& blk, const FusedArgs& a, const ChunkPos& cp, float* rq, float* rk, float* be,
                             float* part) {
  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* bl = static_cast<const T*>(a.b);
  constexpr int NW = G::D / 32;
  // A warp covers 32 consecutive columns of one row (NTHR and D are multiples of 32).
  KDA_UNROLL_N(8)
  for (int m = 0; m < G::C * G::D / G::NTHR; ++m) {  // unrolled: the loads issue together
    const int e = blk.tid() + m * G::NTHR;
    const int r = e / G::D, d = e % G::D;
    float xq = 0.0f, xk = 0.0f;
    if (r < cp.L) {
      xq = ld(q, cp.in(a.dims, r, d));
      xk = ld(k, cp.in(a.dims, r, d));
    }
    const float sq = blk.warp_sum(xq * xq);
    const float sk = blk.warp_sum(xk * xk);
    if ((d & 31) == 0) {
      part[r * 2 * NW + d / 32] = sq;
      part[r * 2 * NW + NW + d / 32] = sk;
    }
  }
  blk.sync();
  for (int r = blk.tid(); r < G::C; r += G::NTHR) {
    float sq = 0.0f, sk = 0.0f;
    for (int w = 0; w < NW; ++w) {
      sq += part[r * 2 * NW + w];
      sk += part[r * 2 * NW + NW + w];
    }
    const bool valid = r < cp.L;
    rq[r] = valid ? 1.0f / sqrtf(sq + 1e-6f) : 0.0f;
    rk[r] = valid ? 1.0f / sqrtf(sk + 1e-6f) : 0.0f;
    be[r] = valid ? sigmoid_f(ld(bl, cp.in_row(a.dims, r))) : 0.0f;
  }
  blk.sync();
}

// Loads columns [k0, k0+KS) of q^ and k^ (normalised; 0 on rows >= L) and the gate, and
// leaves Gamma (log2 units, chunk-local cumsum, g = 0 on rows >= L so Gamma_{C-1} = gamma)
// in gs. Optional gx / ga receive dg/dx and dg/dA_log (0 on rows >= L).
// Ends with a sync.
template <class G, class T, class Blk>
KDA_DEV void load_qk_gate_slice(Blk& blk, const FusedArgs& a, const ChunkPos& cp, int k0, const float* rq,
                                const float* rk, float* sq, float* sk, float* gs, float* gx, float* ga) {
  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* f = static_cast<const T*>(a.f);
  const float ea = expf(a.A_log[cp.h]);
  KDA_UNROLL
  for (int m = 0; m < G::C * G::KS / (2 * G::NTHR); ++m) {  // columns c, c + 1 per thread
    const int e = blk.tid() + m * G::NTHR;
    const int r = e / (G::KS / 2), c = 2 * (e % (G::KS / 2));
    float qv[2] = {0.0f, 0.0f}, kv[2] = {0.0f, 0.0f}, xv[2];
    GateVal gv[2] = {{0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}};
    if (r < cp.L) {
      const int64_t i = cp.in(a.dims, r, k0 + c);
      ld2(q, i, qv[0], qv[1]);
      ld2(k, i, kv[0], kv[1]);
      ld2(f, i, xv[0], xv[1]);
      KDA_UNROLL
      for (int u = 0; u < 2; ++u) {
        qv[u] *= rq[r];
        kv[u] *= rk[r];
        gv[u] = gate_value(xv[u] + a.dt_bias[cp.h * a.dims.D + k0 + c + u], ea, a.gate);
      }
    }
    KDA_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int at = r * G::LS + c + u;
      if (sq) sq[at] = qv[u];
      if (sk) sk[at] = kv[u];
      gs[at] = gv[u].g * kLog2e;
      if (gx) gx[at] = gv[u].dgdx;
      if (ga) ga[at] = gv[u].dgda;
    }
  }
  blk.sync();
  cumsum_columns<G>(blk, gs);
  blk.sync();
}

// Loads columns [k0, k0+KS) of a [B,T,H,D] input into a slice, times rowscale[r] if given;
// 0 on rows >= L. No sync.
template <class G, class T, class Blk>
KDA_DEV void load_in_slice(Blk& blk, const Dims& dm, const ChunkPos& cp, const T* src, int k0, const float* rowscale,
                           float* dst) {
  KDA_UNROLL
  for (int m = 0; m < G::C * G::KS / (2 * G::NTHR); ++m) {  // columns c, c + 1 per thread
    const int e = blk.tid() + m * G::NTHR;
    const int r = e / (G::KS / 2), c = 2 * (e % (G::KS / 2));
    float v0 = 0.0f, v1 = 0.0f;
    if (r < cp.L) {
      ld2(src, cp.in(dm, r, k0 + c), v0, v1);
      const float sc = rowscale ? rowscale[r] : 1.0f;
      v0 *= sc;
      v1 *= sc;
    }
    dst[r * G::LS + c] = v0;
    dst[r * G::LS + c + 1] = v1;
  }
}
// Loads columns [k0, k0+KS) of the chunk's rows of a workspace tile. No sync.
template <class G, class T, class Blk>
KDA_DEV void load_ws_slice(Blk& blk, const Dims& dm, const ChunkPos& cp, const T* src, int k0, float* dst) {
  KDA_UNROLL
  for (int m = 0; m < G::C * G::KS / (2 * G::NTHR); ++m) {  // columns c, c + 1 per thread
    const int e = blk.tid() + m * G::NTHR;
    const int r = e / (G::KS / 2), c = 2 * (e % (G::KS / 2));
    ld2(src, cp.ws(dm, r, k0 + c), dst[r * G::LS + c], dst[r * G::LS + c + 1]);
  }
}

// x'_r = x_r e^{Gamma_r - Gamma_n(r)} with n(r) the first row of r's sub-block. No sync.
template <class G, class Blk>
KDA_DEV void row_to_block_start(Blk& blk, const float* gs, const float* x, float* xo) {
  for (int e = blk.tid(); e < G::C * G::KS; e += G::NTHR) {
    const int r = e / G::KS, c = e % G::KS;
    const int n0 = (r / kSub) * kSub;
    xo[r * G::LS + c] = x[r * G::LS + c] * exp2_fast(gs[r * G::LS + c] - gs[n0 * G::LS + c]);
  }
}

// For target sub-block i (first row ni): fc[s] = e^{Gamma_ni - Gamma_s} and
// y[s] = k_s fc[s] for s < ni. fc may be null. No sync.
template <class G, class Blk>
KDA_DEV void col_to_block_start(Blk& blk, int ni, const float* gs, const float* kx, float* y, float* fc) {
  for (int e = blk.tid(); e < ni * G::KS; e += G::NTHR) {
    const int s = e / G::KS, c = e % G::KS;
    const float fac = exp2_fast(gs[ni * G::LS + c] - gs[s * G::LS + c]);
    y[s * G::LS + c] = kx[s * G::LS + c] * fac;
    if (fc) fc[s * G::LS + c] = fac;
  }
}

// Accumulates one K slice into Pq (P(q^,k^), s <= r; only when kWithQ) and Pk (P(k^,k^);
// the diagonal is accumulated too and masked by the caller). Needs sq, sk, gs and
// xq = row_to_block_start(sq), xk = row_to_block_start(sk); y is scratch for C-16 rows.
// Diagonal sub-blocks elementwise (CUDA cores); off-diagonal ones as products of the
// factored operands (tensor cores when kTC). Ends with a sync.
template <class G, bool kTC, bool kSplit, bool kWithQ, class Blk>
KDA_DEV void accumulate_scores(Blk& blk, const float* sq, const float* sk, const float* gs, const float* xq,
                               const float* xk, float* y, float* Pq, float* Pk) {
  constexpr int KS = G::KS, LS = G::LS, LC = G::LC;
  // Diagonal sub-blocks: only the kPairs pairs s <= r of each are enumerated, and each pair's
  // KS columns are split over kSplitC adjacent lanes (combined by shuffles), so that the
  // lanes stay busy (one thread per (r, s) of the full 16 x 16 square leaves 47 % of them
  // idle on s > r).
  constexpr int kPairs = kSub * (kSub + 1) / 2;
  constexpr int kSplitC = G::C == 16 ? 4 : 2, KC = KS / kSplitC;
  constexpr int kItems = G::NB * kPairs * kSplitC;
  for (int it = 0; it < (kItems + G::NTHR - 1) / G::NTHR; ++it) {  // uniform: shuffles below
    const int w = blk.tid() + it * G::NTHR;
    const int pair = w / kSplitC, part = w % kSplitC;
    const int sb = pair / kPairs, q = pair % kPairs;
    int rr = static_cast<int>((sqrtf(8.0f * static_cast<float>(q) + 1.0f) - 1.0f) * 0.5f);
    if ((rr + 1) * (rr + 2) / 2 <= q) ++rr;  // exact integer fix-ups of the float estimate
    if (rr * (rr + 1) / 2 > q) --rr;
    const int ss = q - rr * (rr + 1) / 2;
    const bool valid = w < kItems;
    const int r = valid ? sb * kSub + rr : 0, s = valid ? sb * kSub + ss : 0;
    float aq = 0.0f, ak = 0.0f;
    if (valid) {
      KDA_UNROLL
      for (int cc = 0; cc < KC; ++cc) {
        const int c = part * KC + cc;
        const float ks = sk[s * LS + c] * exp2_fast(gs[r * LS + c] - gs[s * LS + c]);
        if (kWithQ) aq += sq[r * LS + c] * ks;
        ak += sk[r * LS + c] * ks;
      }
    }
    KDA_UNROLL
    for (int o = 1; o < kSplitC; o <<= 1) {
      if (kWithQ) aq += blk.shfl_xor(aq, o);
      ak += blk.shfl_xor(ak, o);
    }
    if (valid && part == 0) {
      if (kWithQ) Pq[r * LC + s] += aq;
      Pk[r * LC + s] += ak;
    }
  }
  for (int i = 1; i < G::NB; ++i) {
    const int ni = i * kSub;
    blk.sync();  // previous readers of y done
    col_to_block_start<G>(blk, ni, gs, sk, y, nullptr);
    blk.sync();
    // rows of sub-block i against every s < ni: (x_r e^{G_r - G_ni}) . (k_s e^{G_ni - G_s})
    auto b_y = [&](int k, int s) { return y[s * LS + k]; };
    if (kWithQ) {
      block_product2<kTC, kSplit, G::NTHR>(
          blk, kSub, ni, KS, [&](int r, int k) { return xq[(ni + r) * LS + k]; },
          [&](int r, int k) { return xk[(ni + r) * LS + k]; }, b_y,
          [&](int r, int s, float vq, float vk) {
            Pq[(ni + r) * LC + s] += vq;
            Pk[(ni + r) * LC + s] += vk;
          });
    } else {
      block_product<kTC, kSplit, G::NTHR>(
          blk, kSub, ni, KS, [&](int r, int k) { return xk[(ni + r) * LS + k]; }, b_y,
          [&](int r, int s) { return Pk[(ni + r) * LC + s]; },
          [&](int r, int s, float v) { Pk[(ni + r) * LC + s] = v; });
    }
  }
  blk.sync();
}

// Tm = (I + A)^{-1}, A strictly lower (C x C, stride LC); Tm fully written (0 above the
// diagonal). Z: kSub * LC floats of scratch. Diagonal 16x16 blocks by forward substitution
// (one thread per column), then block rows merged: X_ij = -X_ii sum_{j<=m<i} A_im X_mj.
// Ends with a sync.
template <class G, class Blk>
KDA_DEV void solve_unit_lower(Blk& blk, const float* A, float* Tm, float* Z) {
  for (int e = blk.tid(); e < G::C * G::C; e += G::NTHR) Tm[(e / G::C) * G::LC + e % G::C] = 0.0f;
  blk.sync();
  for (int t = blk.tid(); t < G::C; t += G::NTHR) {
    const int base = (t / kSub) * kSub, c = t % kSub;
    Tm[(base + c) * G::LC + base + c] = 1.0f;
    for (int r = c + 1; r < kSub; ++r) {
      float acc = 0.0f;
      for (int m = c; m < r; ++m) acc += A[(base + r) * G::LC + base + m] * Tm[(base + m) * G::LC + base + c];
      Tm[(base + r) * G::LC + base + c] = -acc;
    }
  }
  blk.sync();
  for (int i = 1; i < G::NB; ++i) {
    const int ni = i * kSub;
    for (int e = blk.tid(); e < kSub * ni; e += G::NTHR) {
      const int r = e / ni, col = e % ni;
      const int m0 = (col / kSub) * kSub;
      float acc = 0.0f;
      for (int m = m0; m < ni; ++m) acc += A[(ni + r) * G::LC + m] * Tm[m * G::LC + col];
      Z[r * G::LC + col] = acc;
    }
    blk.sync();
    for (int e = blk.tid(); e < kSub * ni; e += G::NTHR) {
      const int r = e / ni, col = e % ni;
      float acc = 0.0f;
      for (int m = 0; m <= r; ++m) acc += Tm[(ni + r) * G::LC + ni + m] * Z[m * G::LC + col];
      Tm[(ni + r) * G::LC + col] = -acc;
    }
    blk.sync();
  }
}

// A block_product finish: element (r, c) goes to slice `keep` and to column col0 + c of the
// chunk's rows of workspace tile `dst` (pairs: one 32/64-bit store).
template <class G, class TO>
struct KeepAndStore {
  float* keep;
  TO* dst;
  const ChunkPos* cp;
  int col0;
  KDA_DEV void operator()(int r, int c, float v) const {
    keep[r * G::LS + c] = v;
    st(dst, cp->ws_base + (r * cp->D + col0 + c), v);
  }
  KDA_DEV void operator()(int r, int c, float v0, float v1) const {
    keep[r * G::LS + c] = v0;
    keep[r * G::LS + c + 1] = v1;
    st2(dst, cp->ws_base + (r * cp->D + col0 + c), v0, v1);
  }
};

// Lower-triangular helpers for block_product: tiles with some s <= r / s < r, k ranges.
struct TileLowerIncl {  // tile (m0, n0) of a C x C result holds an element with c <= r
  KDA_DEV bool operator()(int m0, int n0) const { return n0 < m0 + 16; }
};
struct KUpToRow {  // sum over k <= r
  KDA_DEV void operator()(int r, int, int&, int& hi) const { hi = r + 1; }
};
struct KFromRow {  // sum over k >= r
  KDA_DEV void operator()(int r, int, int& lo, int&) const { lo = r; }
};

// ======================================================================================
// intra (forward)
// ======================================================================================
template <class G, class T, bool kTC, class Blk>
KDA_DEV void intra_program(const FusedArgs& a, const ForwardWorkspace& ws, Blk& blk, int64_t bh, int64_t n,
                           float* smem) {
  const Dims& dm = a.dims;
  constexpr int C = G::C, KS = G::KS, LS = G::LS, LC = G::LC, NTHR = G::NTHR;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const ChunkPos cp(dm, bh, n);
  const float scale = resolved_scale(a);
  // shared memory (floats): Pq, Pk, Tm [C][LC]; Z [16][LC]; rq, rk, be [C]; part [8C];
  // six slices [C][LS]
  float* Pq = smem;        // P(q^,k^) -> A_qk = scale P (s <= r)
  float* Pk = Pq + G::CC;  // P(k^,k^) -> A = diag(beta) P (s < r)
  float* Tm = Pk + G::CC;  // (I + A)^{-1}
  float* Z = Tm + G::CC;   // solve scratch
  float* rq = Z + kSub * LC;
  float* rk = rq + C;
  float* be = rk + C;
  float* part = be + C;      // 8C (row-stats scratch: 2 * C * D/32)
  float* s0 = part + 8 * C;  // slices
  float* s1 = s0 + G::SLICE;
  float* s2 = s1 + G::SLICE;
  float* s3 = s2 + G::SLICE;
  float* gs = s3 + G::SLICE;
  float* s5 = gs + G::SLICE;

  {
    L2Prefetch<NTHR> pf;
    pf.in_rows(blk, cp, static_cast<const T*>(a.q));
    pf.in_rows(blk, cp, static_cast<const T*>(a.k));
    pf.in_rows(blk, cp, static_cast<const T*>(a.f));
    pf.in_rows(blk, cp, static_cast<const T*>(a.v));
  }
  chunk_row_stats<G, T>(blk, a, cp, rq, rk, be, part);
  for (int e = blk.tid(); e < C * LC; e += NTHR) {
    Pq[e] = 0.0f;
    Pk[e] = 0.0f;
  }
  // ---- scores: K slices --------------------------------------------------------------
  for (int ks = 0; ks < G::NKS; ++ks) {
    const int k0 = ks * KS;
    load_qk_gate_slice<G, T>(blk, a, cp, k0, rq, rk, s0, s1, gs, nullptr, nullptr);
    row_to_block_start<G>(blk, gs, s0, s2);
    row_to_block_start<G>(blk, gs, s1, s3);
    blk.sync();
    accumulate_scores<G, kTC, kSplit, true>(blk, s0, s1, gs, s2, s3, s5, Pq, Pk);
  }
  T* aqk = static_cast<T*>(ws.Aqk) + cp.ws_row * C;  // row 0 of the chunk, [C][C]
  for (int e = blk.tid(); e < C * C; e += NTHR) {
    const int r = e / C, s = e % C;
    const float aq = s <= r ? scale * Pq[r * LC + s] : 0.0f;
    Pq[r * LC + s] = aq;
    st(aqk, e, aq);
    Pk[r * LC + s] = s < r ? be[r] * Pk[r * LC + s] : 0.0f;
  }
  blk.sync();
  solve_unit_lower<G>(blk, Pk, Tm, Z);

  // ---- W, Qp (or scale Q~), Kbar, gamma: K slices ------------------------------------------
  // In reverse slice order: s0 (q^), s1 (k^) and gs (Gamma) still hold the last slice of the
  // score loop (accumulate_scores and the solve write only s2, s3, s5, Pq, Pk, Tm, Z), so
  // that slice is not loaded and its gate not computed a second time.
  auto zero = [](int, int) { return 0.0f; };
  for (int ks = G::NKS - 1; ks >= 0; --ks) {
    const int k0 = ks * KS;
    if (ks != G::NKS - 1) load_qk_gate_slice<G, T>(blk, a, cp, k0, rq, rk, s0, s1, gs, nullptr, nullptr);
    for (int e = blk.tid(); e < C * KS / 2; e += NTHR) {  // columns c, c + 1 per thread
      const int r = e / (KS / 2), c = 2 * (e % (KS / 2));
      float kb[2];
      KDA_UNROLL
      for (int u = 0; u < 2; ++u) {
        const int at = r * LS + c + u;
        const float g = gs[at];
        const float eg = exp2_fast(g);
        s2[at] = be[r] * s1[at] * eg;                              // beta K~
        s3[at] = scale * s0[at] * eg;                              // scale Q~
        kb[u] = s1[at] * exp2_fast(gs[(C - 1) * LS + c + u] - g);  // Kbar
      }
      st2(ws.Kbar, cp.ws(dm, r, k0 + c), kb[0], kb[1]);
      st2(static_cast<T*>(ws.sQ), cp.ws(dm, r, k0 + c), s3[r * LS + c], s3[r * LS + c + 1]);
    }
    for (int c = blk.tid(); c < KS; c += NTHR) ws.gamma[cp.gam(dm, k0 + c)] = gs[(C - 1) * LS + c] * kLn2;
    blk.sync();
    // W = Tm (beta K~)
    block_product<kTC, kSplit, NTHR>(
        blk, C, KS, C, [&](int r, int s) { return Tm[r * LC + s]; }, [&](int s, int c) { return s2[s * LS + c]; }, zero,
        KeepAndStore<G, T>{s5, static_cast<T*>(ws.W), &cp, k0}, AllTiles(), KUpToRow());
    blk.sync();
    // Qp = scale Q~ - A_qk W
    block_product<kTC, kSplit, NTHR>(
        blk, C, KS, C, [&](int r, int s) { return Pq[r * LC + s]; }, [&](int s, int c) { return s5[s * LS + c]; }, zero,
        Overload{[&](int r, int c, float v) { st(static_cast<T*>(ws.Qp), cp.ws(dm, r, k0 + c), s3[r * LS + c] - v); },
                 [&](int r, int c, float v0, float v1) {
                   st2(static_cast<T*>(ws.Qp), cp.ws(dm, r, k0 + c), s3[r * LS + c] - v0, s3[r * LS + c + 1] - v1);
                 }},
        AllTiles(), KUpToRow());
    blk.sync();
  }
  // ---- U, Ob: V slices ----------------------------------------------------------------------
  for (int vs = 0; vs < G::NKS; ++vs) {
    const int v0 = vs * KS;
    load_in_slice<G>(blk, dm, cp, static_cast<const T*>(a.v), v0, be, s0);  // beta V
    blk.sync();
    block_product<kTC, kSplit, NTHR>(
        blk, C, KS, C, [&](int r, int s) { return Tm[r * LC + s]; }, [&](int s, int c) { return s0[s * LS + c]; }, zero,
        KeepAndStore<G, float>{s2, ws.U, &cp, v0}, AllTiles(), KUpToRow());
    blk.sync();
    // Ob = A_qk U
    block_product<kTC, kSplit, NTHR>(
        blk, C, KS, C, [&](int r, int s) { return Pq[r * LC + s]; }, [&](int s, int c) { return s2[s * LS + c]; }, zero,
        Overload{[&](int r, int c, float v) { st(static_cast<T*>(ws.Ob), cp.ws(dm, r, v0 + c), v); },
                 [&](int r, int c, float x0, float x1) { st2(static_cast<T*>(ws.Ob), cp.ws(dm, r, v0 + c), x0, x1); }},
        AllTiles(), KUpToRow());
    blk.sync();
  }
}

// ======================================================================================
// aqk_dO (backward, first launch): AqkT_dO = A_qk^T dO from the forward's saved A_qk; also zeroes
// the intra adjoint's per-head counters. Shared: A_qk [C][LC] and one dO slice [C][LS].
// ======================================================================================
template <class G, class T, bool kTC, class Blk>
KDA_DEV void aqk_dO_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, int64_t n,
                            float* smem) {
  const Dims& dm = a.dims;
  constexpr int C = G::C, KS = G::KS, LS = G::LS, LC = G::LC, NTHR = G::NTHR;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const ChunkPos cp(dm, bh, n);
  float* Aq = smem;         // [C][LC] A_qk
  float* dOs = Aq + G::CC;  // [C][LS] dO slice (0 on rows >= L)
  if (bh == 0 && n == 0)
    for (int64_t i = blk.tid(); i < dm.H; i += NTHR) ws.counters[i] = 0u;
  const T* aqk = static_cast<const T*>(ws.Aqk) + cp.ws_row * C;
  KDA_UNROLL_N(8)
  for (int m = 0; m < C * C / NTHR; ++m) {
    const int e = blk.tid() + m * NTHR;
    Aq[(e / C) * LC + e % C] = ld(aqk, e);
  }
  auto zero = [](int, int) { return 0.0f; };
  for (int vs = 0; vs < G::NKS; ++vs) {
    const int v0 = vs * KS;
    load_in_slice<G>(blk, dm, cp, static_cast<const T*>(a.dO), v0, nullptr, dOs);
    blk.sync();  // (first pass: also orders the A_qk loads)
    block_product<kTC, kSplit, NTHR>(
        blk, C, KS, C, [&](int r, int m) { return Aq[m * LC + r]; }, [&](int m, int c) { return dOs[m * LS + c]; },
        zero, [&](int r, int c, float v) { st(static_cast<T*>(ws.AqkT_dO), cp.ws(dm, r, v0 + c), v); }, AllTiles(),
        KFromRow());
    blk.sync();
  }
}

// ======================================================================================
// inter (forward state scan), one block per (b, h, V tile of BV columns)
// kTC: the three products per chunk on tensor cores (mma_acc); else fp32 CUDA cores.
// ======================================================================================
template <class G, class T, bool kTC, class Blk>
KDA_DEV void inter_program(const FusedArgs& a, const ForwardWorkspace& ws, Blk& blk, int64_t bh, int vt, float* smem) {
  const Dims& dm = a.dims;
  constexpr int C = G::C, D = G::D, BV = G::BV, LDA = G::LDA, LBV = G::LBV, NT_ = G::NTHR_I;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const int64_t NT = dm.NT(), Tp = dm.Tp();
  const int v0 = vt * BV;
  T* o = static_cast<T*>(a.o);
  float* Ws = smem;          // [C][LDA] W
  float* Qs = Ws + C * LDA;  // [C][LDA] Qp
  float* Ks = Qs + C * LDA;  // [C][LDA] Kbar
  float* Us = Ks + C * LDA;  // [C][LBV] U
  float* Os = Us + C * LBV;  // [C][LBV] Ob
  float* Ds = Os + C * LBV;  // [C][LBV] Delta
  float* S = Ds + C * LBV;   // [D][LBV] state tile
  float* eg = S + D * LBV;   // [D] e^gamma
  const int tid = blk.tid();
  const int lane = tid & 31, warp = tid >> 5;

  for (int e = tid; e < D * BV; e += NT_) {
    const int i = e / BV, jj = e % BV;
    S[i * LBV + jj] = a.h0 ? a.h0[(bh * D + i) * D + v0 + jj] : 0.0f;
  }
  const int64_t b = bh / dm.H, h = bh % dm.H;
  // Register prefetch (as in the inter adjoint): chunk n+1's tiles are loaded while chunk n
  // computes, where they fit in registers (<= 128 floats a thread: every configuration since
  // D = 128, C = 64 runs 256 threads; a wider one would load each chunk at its start).
  static_assert(NT_ >= D, "one gamma per thread");
  constexpr int MA = C * D / NT_, MB = C * BV / NT_;
  constexpr bool kPrefetch = 3 * MA + 2 * MB <= 128;
  float pW[MA], pQ[MA], pK[MA], pU[MB], pO[MB], pE = 0.0f;
  auto fetch = [&](int64_t n) {
    const int64_t row0 = bh * Tp + n * C;
    // two adjacent columns a thread: one 32-bit (bf16) / 64-bit (fp32) load each
    KDA_UNROLL
    for (int m = 0; m < MA / 2; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int64_t gi = row0 * D + e;  // (row0 + e / D) * D + e % D
      ld2(static_cast<const T*>(ws.W), gi, pW[2 * m], pW[2 * m + 1]);
      ld2(static_cast<const T*>(ws.Qp), gi, pQ[2 * m], pQ[2 * m + 1]);
      ld2(ws.Kbar, gi, pK[2 * m], pK[2 * m + 1]);
    }
    KDA_UNROLL
    for (int m = 0; m < MB / 2; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int r = e / BV, jj = e % BV;
      const int64_t gi = (row0 + r) * D + v0 + jj;
      ld2(ws.U, gi, pU[2 * m], pU[2 * m + 1]);
      ld2(static_cast<const T*>(ws.Ob), gi, pO[2 * m], pO[2 * m + 1]);
    }
    if (tid < D) pE = ws.gamma[(bh * NT + n) * D + tid];
  };
  if (kPrefetch) fetch(0);
  for (int64_t n = 0; n < NT; ++n) {
    const int64_t t0 = n * C;
    if (!kPrefetch) fetch(n);
    KDA_UNROLL
    for (int m = 0; m < MA / 2; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int r = e / D, i = e % D;
      sts2(Ws + r * LDA + i, pW[2 * m], pW[2 * m + 1]);
      sts2(Qs + r * LDA + i, pQ[2 * m], pQ[2 * m + 1]);
      sts2(Ks + r * LDA + i, pK[2 * m], pK[2 * m + 1]);
    }
    KDA_UNROLL
    for (int m = 0; m < MB / 2; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int r = e / BV, jj = e % BV;
      sts2(Us + r * LBV + jj, pU[2 * m], pU[2 * m + 1]);
      sts2(Os + r * LBV + jj, pO[2 * m], pO[2 * m + 1]);
    }
    if (tid < D) eg[tid] = expf(pE);
    if (kPrefetch && n + 1 < NT) fetch(n + 1);
    blk.sync();                                    // S of the previous step complete, tiles stored
    for (int e = tid; e < D * BV / 4; e += NT_) {  // 4 columns a thread: one 128-bit store
      const int i = e / (BV / 4), jj = (e % (BV / 4)) * 4;
      copy4(a.h + ((bh * NT + n) * D + i) * D + v0 + jj, S + i * LBV + jj);
    }
    if constexpr (kTC) {
      // Delta = U - W S, O = Ob + Qp S: 16x8 tiles of [C x BV], one warp per tile
      constexpr int NTN = BV / 8, NTILE = (C / 16) * NTN;
      for (int ti = warp; ti < NTILE; ti += NT_ / 32) {
        const int m0 = (ti / NTN) * 16, n0 = (ti % NTN) * 8;
        float ws_[4] = {0.0f, 0.0f, 0.0f, 0.0f}, oo[4];
        for (int e = 0; e < 4; ++e) {
          int r, c;
          frag_rc(lane, e, r, c);
          oo[e] = Os[(m0 + r) * LBV + n0 + c];
        }
        mma_acc2<kSplit>(
            blk, ws_, oo, D, [&](int r, int k) { return Ws[(m0 + r) * LDA + k]; },
            [&](int r, int k) { return Qs[(m0 + r) * LDA + k]; }, [&](int k, int c) { return S[k * LBV + n0 + c]; });
        for (int e = 0; e < 4; e += 2) {  // columns c, c + 1 of row r
          int r, c;
          frag_rc(lane, e, r, c);
          Ds[(m0 + r) * LBV + n0 + c] = Us[(m0 + r) * LBV + n0 + c] - ws_[e];
          Ds[(m0 + r) * LBV + n0 + c + 1] = Us[(m0 + r) * LBV + n0 + c + 1] - ws_[e + 1];
          if (t0 + m0 + r < dm.T) st2(o, ((b * dm.T + t0 + m0 + r) * dm.H + h) * D + v0 + n0 + c, oo[e], oo[e + 1]);
        }
      }
    } else {
      constexpr int RG = NT_ / BV, RM = C / RG;
      const int j = tid % BV, rg = tid / BV;
      float dl[RM], oo[RM];
      KDA_UNROLL
      for (int m = 0; m < RM; ++m) {
        dl[m] = Us[(rg + m * RG) * LBV + j];
        oo[m] = Os[(rg + m * RG) * LBV + j];
      }
      for (int i = 0; i < D; ++i) {
        const float sv = S[i * LBV + j];
        KDA_UNROLL
        for (int m = 0; m < RM; ++m) {
          dl[m] -= Ws[(rg + m * RG) * LDA + i] * sv;
          oo[m] += Qs[(rg + m * RG) * LDA + i] * sv;
        }
      }
      KDA_UNROLL
      for (int m = 0; m < RM; ++m) {
        const int r = rg + m * RG;
        Ds[r * LBV + j] = dl[m];
        if (t0 + r < dm.T) st(o, ((b * dm.T + t0 + r) * dm.H + h) * D + v0 + j, oo[m]);
      }
    }
    blk.sync();  // Delta complete; everybody done reading S
    if constexpr (kTC) {
      // S <- e^gamma S + Kbar^T Delta: 16x8 tiles of [D x BV]; each warp owns its tiles of S
      constexpr int NTN = BV / 8, NTILE = (D / 16) * NTN;
      for (int ti = warp; ti < NTILE; ti += NT_ / 32) {
        const int m0 = (ti / NTN) * 16, n0 = (ti % NTN) * 8;
        float acc[4];
        for (int e = 0; e < 4; ++e) {
          int r, c;
          frag_rc(lane, e, r, c);
          acc[e] = eg[m0 + r] * S[(m0 + r) * LBV + n0 + c];
        }
        mma_acc<kSplit>(
            blk, acc, C, [&](int r, int k) { return Ks[k * LDA + m0 + r]; },
            [&](int k, int c) { return Ds[k * LBV + n0 + c]; });
        for (int e = 0; e < 4; ++e) {
          int r, c;
          frag_rc(lane, e, r, c);
          S[(m0 + r) * LBV + n0 + c] = acc[e];
        }
      }
    } else {
      constexpr int RG = NT_ / BV, IM = D / RG;
      const int j = tid % BV, rg = tid / BV;
      float acc[IM];
      KDA_UNROLL
      for (int m = 0; m < IM; ++m) acc[m] = eg[rg + m * RG] * S[(rg + m * RG) * LBV + j];
      for (int r = 0; r < C; ++r) {
        const float dv = Ds[r * LBV + j];
        KDA_UNROLL
        for (int m = 0; m < IM; ++m) acc[m] += Ks[r * LDA + rg + m * RG] * dv;
      }
      KDA_UNROLL
      for (int m = 0; m < IM; ++m) S[(rg + m * RG) * LBV + j] = acc[m];
    }
    blk.sync();  // S updated before the next step's tiles overwrite Ws..Ds
  }
  if (a.ht)
    for (int e = tid; e < D * BV; e += NT_) {
      const int i = e / BV, jj = e % BV;
      a.ht[(bh * D + i) * D + v0 + jj] = S[i * LBV + jj];
    }
}

// ======================================================================================
// inter adjoint (backward, reverse scan), one block per (b, h), full V
// kTC: products on tensor cores; else fp32 CUDA cores.
// ======================================================================================
template <class G, class T, bool kTC, class Blk>
KDA_DEV void inter_adjoint_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, float* smem) {
  const Dims& dm = a.dims;
  constexpr int C = G::C, D = G::D, LD = G::LDA, RB = G::RB, NT_ = G::NTHR_A, NW = NT_ / 32;
  constexpr bool kSplit = std::is_same_v<T, float>;
  // S' accumulator: SIMT owns elements tid + m NT_; TC: see the warp roles below
  constexpr int NACC = D * D / NT_;
  constexpr int TN = D / 8, NTILE_ACC = (D / 16) * TN;
  // Tensor cores at D = 64: warp roles. The first NXW warps compute the X products, two
  // adjacent 16x8 tiles each (one A fragment, two B); the other NSW warps hold the S' tiles
  // (NACC_T each, one row of tiles: one A fragment for all). The scan is bound by shared-memory
  // traffic (mio throttle), and every fragment a warp loads now serves two or more mma. At
  // D = 128 the S' tiles would need 128 accumulator registers a thread on half the warps, so
  // every warp does both, TPW = 2 X tiles and NTILE_ACC / NW = 16 S' tiles (64 registers).
  constexpr int XT = (RB / 16) * TN;  // X tiles (16x8) of a row block
  constexpr int TPW = G::TPW;         // Delta / dDelta tiles a warp computes (adjacent columns)
  constexpr bool kRoles = kTC && D == 64;
  constexpr int XN = kRoles ? 2 : TPW, NXW = XT / XN, NSW = kRoles ? NW - NXW : NW;
  constexpr int NACC_T = NTILE_ACC / NSW;
  static_assert(XT % XN == 0 && (!kRoles || NXW < NW) && (kRoles || NXW == NW));
  static_assert((RB / 16) * TN == NW * TPW && TN % TPW == 0, "TPW 16x8 tiles per warp in the row-block products");
  static_assert(NTILE_ACC % NSW == 0 && (!kTC || NACC_T * 4 >= NACC));
  static_assert(TN % NACC_T == 0, "a warp's S' tiles share one row of tiles (one A operand)");
  const int64_t NT = dm.NT(), Tp = dm.Tp();
  const T* dO = static_cast<const T*>(a.dO);
  float* S = smem;           // [D][LD]  h[n]
  float* Sp = S + D * LD;    // [D][LD]  S' = dL/dS after chunk n
  float* Wr = Sp + D * LD;   // [RB][LD] W rows
  float* Qr = Wr + RB * LD;  // [RB][LD] scale Q~ rows
  float* Kr = Qr + RB * LD;  // [RB][LD] Kbar rows
  float* Ur = Kr + RB * LD;  // [RB][LD] U -> Delta
  float* Or = Ur + RB * LD;  // [RB][LD] dO
  float* Dr = Or + RB * LD;  // [RB][LD] A_qk^T dO -> dDelta
  float* eg = Dr + RB * LD;  // [D]
  const int tid = blk.tid();
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t b = bh / dm.H, h = bh % dm.H;

  for (int e = tid; e < D * D; e += NT_) Sp[(e / D) * LD + e % D] = a.dht ? a.dht[bh * D * D + e] : 0.0f;
  constexpr int kAccN = kTC ? 4 * NACC_T : NACC;
  float acc[kAccN];
  KDA_UNROLL
  for (int m = 0; m < kAccN; ++m) acc[m] = 0.0f;

  // Register prefetch: the global loads of each step (chunk n, row block rb) are issued one
  // step ahead, while the previous step computes; they do not depend on S', so only the
  // smem stores wait. (Loading at the start of each step would put a global round trip on
  // the scan's critical path.) The state h[n] is prefetched in registers where it is at most
  // 32 floats a thread; at D = 128 (64 floats, on top of the 64 S' accumulators) it is copied
  // straight into S instead (asynchronous copies, no registers), issued once S is free, after
  // the chunk's last reads of it (dgamma_s), so that they land while S' is updated.
  static_assert(NT_ >= D, "one gamma per thread");
  constexpr int MS = D * D / NT_, MR = RB * D / NT_;
  constexpr bool kStatePrefetch = MS <= 32;
  static_assert(kStatePrefetch || MS % 4 == 0);
  [[maybe_unused]] float pS[kStatePrefetch ? MS : 1];
  float pW[MR], pQ[MR], pK[MR], pU[MR], pD[MR], pO[MR], pE = 0.0f;
  auto fetch_state = [&](int64_t n) {  // h[n] (register prefetch only) and gamma[n]
    if constexpr (kStatePrefetch) {
      KDA_UNROLL
      for (int m = 0; m < MS; ++m) pS[m] = a.h[(bh * NT + n) * D * D + tid + m * NT_];
    }
    if (tid < D) pE = ws.gamma[(bh * NT + n) * D + tid];
  };
  [[maybe_unused]] auto copy_state = [&](int64_t n) {  // no register prefetch: h[n] -> S (S unread until the next sync)
    KDA_UNROLL
    for (int m = 0; m < MS / 4; ++m) {
      const int e = 4 * (tid + m * NT_);
      blk.copy16_async(S + (e / D) * LD + e % D, a.h + (bh * NT + n) * D * D + e);
    }
  };
  auto fetch_rows = [&](int64_t n, int rb) {
    const int64_t row0 = bh * Tp + n * C + rb * RB;  // workspace row
    const int64_t t0 = n * C + rb * RB;              // token row
    KDA_UNROLL
    for (int m = 0; m < MR / 2; ++m) {  // two adjacent columns a thread
      const int e = 2 * (tid + m * NT_);
      const int r = e / D, i = e % D;
      const int64_t gi = (row0 + r) * D + i;
      ld2(static_cast<const T*>(ws.W), gi, pW[2 * m], pW[2 * m + 1]);
      ld2(static_cast<const T*>(ws.sQ), gi, pQ[2 * m], pQ[2 * m + 1]);
      ld2(ws.Kbar, gi, pK[2 * m], pK[2 * m + 1]);
      ld2(ws.U, gi, pU[2 * m], pU[2 * m + 1]);
      ld2(static_cast<const T*>(ws.AqkT_dO), gi, pD[2 * m], pD[2 * m + 1]);
      pO[2 * m] = pO[2 * m + 1] = 0.0f;
      if (t0 + r < dm.T) ld2(dO, ((b * dm.T + t0 + r) * dm.H + h) * D + i, pO[2 * m], pO[2 * m + 1]);
    }
  };
  fetch_state(NT - 1);
  if constexpr (!kStatePrefetch) copy_state(NT - 1);
  fetch_rows(NT - 1, 0);
  for (int64_t n = NT - 1; n >= 0; --n) {
    if constexpr (kStatePrefetch) {
      KDA_UNROLL
      for (int m = 0; m < MS; ++m) {
        const int e = tid + m * NT_;
        S[(e / D) * LD + e % D] = pS[m];
      }
    } else {
      blk.wait_copies();  // this thread's copies of h[n] landed; the row block's sync publishes them
    }
    if (tid < D) eg[tid] = expf(pE);
    for (int rb = 0; rb < C / RB; ++rb) {
      const int64_t row0 = bh * Tp + n * C + rb * RB;  // workspace row
      KDA_UNROLL
      for (int m = 0; m < MR / 2; ++m) {
        const int e = 2 * (tid + m * NT_);
        const int r = e / D, i = e % D;
        sts2(Wr + r * LD + i, pW[2 * m], pW[2 * m + 1]);
        sts2(Qr + r * LD + i, pQ[2 * m], pQ[2 * m + 1]);
        sts2(Kr + r * LD + i, pK[2 * m], pK[2 * m + 1]);
        sts2(Ur + r * LD + i, pU[2 * m], pU[2 * m + 1]);
        sts2(Dr + r * LD + i, pD[2 * m], pD[2 * m + 1]);
        sts2(Or + r * LD + i, pO[2 * m], pO[2 * m + 1]);
      }
      if (rb + 1 < C / RB) {
        fetch_rows(n, rb + 1);
      } else if (n > 0) {
        fetch_rows(n - 1, 0);
        fetch_state(n - 1);
      }
      blk.sync();  // also orders the S / eg stores above
      // Delta = U - W S, dDelta = A_qk^T dO + Kbar S'  (in place over U, dD0)
      if constexpr (kTC) {
        const int ti = warp * TPW, m0 = (ti / TN) * 16, n0 = (ti % TN) * 8;  // tiles (m0, n0 + 8 w), w < TPW
        float p[4 * TPW] = {}, q[4 * TPW] = {};
        mma_acc_block<kSplit, 1, TPW>(
            blk, p, D, [&](int, int r, int k) { return Wr[(m0 + r) * LD + k]; },
            [&](int w, int k, int c) { return S[k * LD + n0 + 8 * w + c]; });
        mma_acc_block<kSplit, 1, TPW>(
            blk, q, D, [&](int, int r, int k) { return Kr[(m0 + r) * LD + k]; },
            [&](int w, int k, int c) { return Sp[k * LD + n0 + 8 * w + c]; });
        KDA_UNROLL
        for (int w = 0; w < TPW; ++w) {
          KDA_UNROLL
          for (int e = 0; e < 4; e += 2) {  // e, e + 1: columns j, j + 1 of row r
            int r, c;
            frag_rc(lane, e, r, c);
            r += m0;
            const int j = n0 + 8 * w + c;
            float dl[2], dd[2];
            for (int u = 0; u < 2; ++u) {
              dl[u] = Ur[r * LD + j + u] - p[4 * w + e + u];
              dd[u] = Dr[r * LD + j + u] + q[4 * w + e + u];
              Ur[r * LD + j + u] = dl[u];
              Dr[r * LD + j + u] = dd[u];
            }
            st2(ws.Delta, (row0 + r) * D + j, dl[0], dl[1]);
            st2(static_cast<T*>(ws.dDelta), (row0 + r) * D + j, dd[0], dd[1]);
          }
        }
      } else {
        for (int e = tid; e < RB * D; e += NT_) {
          const int r = e / D, j = e % D;
          float dl = Ur[r * LD + j], dd = Dr[r * LD + j];
          for (int i = 0; i < D; ++i) {
            dl -= Wr[r * LD + i] * S[i * LD + j];
            dd += Kr[r * LD + i] * Sp[i * LD + j];
          }
          Ur[r * LD + j] = dl;
          Dr[r * LD + j] = dd;
          const int64_t gi = (row0 + r) * D + j;
          st(ws.Delta, gi, dl);
          st(static_cast<T*>(ws.dDelta), gi, dd);
        }
      }
      blk.sync();
      // X_q = dO S^T, X_w = dDelta S^T, X_k = Delta S'^T  (element (r, i));
      // S' accumulator += scale Q~^T dO - W^T dDelta over the block's rows
      if constexpr (kTC) {
        if (warp < NXW) {  // X tiles (r0, n0 + 8u), u < XN: rows of dO / dDelta / Delta
          const int xt = warp * XN, r0 = (xt / TN) * 16, n0 = (xt % TN) * 8;
          float xqw[2 * XN * 4] = {}, xk[XN * 4] = {};  // [X_q | X_w][u][e], [u][e]
          mma_acc_block<kSplit, 2, XN>(
              blk, xqw, D, [&](int i, int r, int k) { return (i == 0 ? Or : Dr)[(r0 + r) * LD + k]; },
              [&](int u, int k, int c) { return S[(n0 + 8 * u + c) * LD + k]; });
          mma_acc_block<kSplit, 1, XN>(
              blk, xk, D, [&](int, int r, int k) { return Ur[(r0 + r) * LD + k]; },
              [&](int u, int k, int c) { return Sp[(n0 + 8 * u + c) * LD + k]; });
          KDA_UNROLL
          for (int u = 0; u < XN; ++u) {
            const float* xq = xqw + 4 * u;
            const float* xw = xqw + 4 * (XN + u);
            KDA_UNROLL
            for (int e = 0; e < 4; e += 2) {
              int r, c;
              frag_rc(lane, e, r, c);
              const int64_t gi = (row0 + r0 + r) * D + n0 + 8 * u + c;
              st2(static_cast<T*>(ws.Xq), gi, xq[e], xq[e + 1]);
              st2(static_cast<T*>(ws.Xw), gi, xw[e], xw[e + 1]);
              st2(ws.Xk, gi, xk[4 * u + e], xk[4 * u + e + 1]);
            }
          }
        }
        if (!kRoles || warp >= NXW) {  // this warp's NACC_T S' tiles: one row of tiles (m0)
          const int ti = (warp - (kRoles ? NXW : 0)) * NACC_T, m0 = (ti / TN) * 16, c0 = (ti % TN) * 8;
          mma_acc_block<kSplit, 1, NACC_T>(
              blk, acc, RB, [&](int, int r, int k) { return Qr[k * LD + m0 + r]; },
              [&](int u, int k, int c) { return Or[k * LD + c0 + 8 * u + c]; });
          mma_acc_block<kSplit, 1, NACC_T>(
              blk, acc, RB, [&](int, int r, int k) { return -Wr[k * LD + m0 + r]; },
              [&](int u, int k, int c) { return Dr[k * LD + c0 + 8 * u + c]; });
        }
      } else {
        for (int e = tid; e < RB * D; e += NT_) {
          const int r = e / D, i = e % D;
          float xq = 0.0f, xw = 0.0f, xk = 0.0f;
          for (int j = 0; j < D; ++j) {
            const float sv = S[i * LD + j];
            xq += Or[r * LD + j] * sv;
            xw += Dr[r * LD + j] * sv;
            xk += Ur[r * LD + j] * Sp[i * LD + j];
          }
          const int64_t gi = (row0 + r) * D + i;
          st(static_cast<T*>(ws.Xq), gi, xq);
          st(static_cast<T*>(ws.Xw), gi, xw);
          st(ws.Xk, gi, xk);
        }
        KDA_UNROLL
        for (int m = 0; m < NACC; ++m) {
          const int e = tid + m * NT_;
          const int i = e / D, j = e % D;
          float s = 0.0f;
          for (int r = 0; r < RB; ++r) s += Qr[r * LD + i] * Or[r * LD + j] - Wr[r * LD + i] * Dr[r * LD + j];
          acc[m] += s;
        }
      }
      blk.sync();  // row tiles free for the next block
    }
    // dgamma_s = e^gamma * sum_v S S'  (one warp per state row)
    for (int i = warp; i < D; i += NW) {
      float s = 0.0f;
      for (int j = lane; j < D; j += 32) s += S[i * LD + j] * Sp[i * LD + j];
      s = blk.warp_sum(s);
      if (lane == 0) ws.dgamma_s[(bh * NT + n) * D + i] = eg[i] * s;
    }
    blk.sync();
    if constexpr (!kStatePrefetch)
      if (n > 0) copy_state(n - 1);  // S is read no more in this chunk
    if constexpr (kTC) {
      KDA_UNROLL
      for (int u = 0; u < NACC_T; ++u) {
        if (kRoles && warp < NXW) break;                          // X warps hold no S' tiles (warp-uniform)
        const int ti = (warp - (kRoles ? NXW : 0)) * NACC_T + u;  // as in the accumulation above
        const int m0 = (ti / TN) * 16, c0 = (ti % TN) * 8;
        for (int e = 0; e < 4; ++e) {
          int r, c;
          frag_rc(lane, e, r, c);
          const int i = m0 + r, j = c0 + c;
          Sp[i * LD + j] = eg[i] * Sp[i * LD + j] + acc[4 * u + e];
          acc[4 * u + e] = 0.0f;
        }
      }
    } else {
      KDA_UNROLL
      for (int m = 0; m < NACC; ++m) {
        const int e = tid + m * NT_;
        const int i = e / D, j = e % D;
        Sp[i * LD + j] = eg[i] * Sp[i * LD + j] + acc[m];
        acc[m] = 0.0f;
      }
    }
    blk.sync();
  }
  if (a.dh0)
    for (int e = tid; e < D * D; e += NT_) a.dh0[bh * D * D + e] = Sp[(e / D) * LD + e % D];
}

// ======================================================================================
// inter adjoint split over V (backward, reverse scan): a cluster of NV blocks per (b, h)
// ======================================================================================
// The scan's state columns are independent (column j of S and S' depends only on column j of
// U, A_qk^T dO and dO), so block t of the cluster owns the columns [t VT, (t+1) VT) of S' and
// computes there Delta, dDelta and the S' update. The outputs that sum over v are rows of
// the transposed products: block t also owns the K rows [t VT, (t+1) VT) and computes X_q,
// X_w, X_k and dgamma_s for them over the full V width, from
//   S     rows and columns it needs, loaded from the saved trajectory h[n];
//   S'    a full copy per block: after each chunk's update every block gathers the other
//         blocks' columns from their shared memory (DSMEM);
//   Delta, dDelta of the row block: gathered likewise after each row block's phase A.
// No partial sums: every output element is computed by one block, with the same operands in
// the same order as the single-block program, so the results are bit-identical to it.
// Per row block: prefetched rows -> sync -> A (Delta, dDelta: own columns) -> cluster sync
// -> gather -> sync -> B (X: own rows; S' accumulator: own columns) -> cluster sync (the
// peers' gathers of this block's Delta / dDelta done; every block's reads of the saved
// rows done, so X may go over W / sQ / Kbar). Blk provides cluster_sync() (barrier of all
// the cluster's threads, with release / acquire of their shared-memory writes) and
// peer(p, rank) (the address of p in block `rank`'s shared memory).
template <class G, int NV_>
struct SplitCfg {
  static constexpr int D = G::D, C = G::C, NV = NV_;
  static constexpr int VT = D / NV;  // own columns / own K rows
  static constexpr int RB = G::RB;   // as the single-block program: the S' sums in its order
  static constexpr int NTHR = 256, NW = NTHR / 32;
  static constexpr int LD = G::LDA;
  static constexpr int MT = RB / 16, TNV = VT / 8;
  static constexpr int NACC_T = (D / 16) * TNV / NW;           // S' tiles a warp holds (tensor cores)
  static constexpr int NACC_S = D * VT / NTHR;                 // S' elements a thread holds (CUDA cores)
  static constexpr int MS = D * VT / (2 * NTHR);               // state pairs a thread loads per region
  static constexpr int MR = RB * D / (2 * NTHR);               // full-width row pairs a thread loads
  static constexpr int MRV = (RB * VT / 2 + NTHR - 1) / NTHR;  // own-column row pairs (guarded)
  static_assert(NV == 2 || NV == 4);
  static_assert(VT % 8 == 0 && (D / 16) * TNV % NW == 0 && (D * VT) % NTHR == 0);
  static_assert((D * VT) % (2 * NTHR) == 0 && (RB * D) % (2 * NTHR) == 0 && NTHR >= D);
  static constexpr int kFloats = 2 * D * LD + 6 * RB * LD + D;
};

template <class G, class T, bool kTC, int NV, class Blk>
KDA_DEV void inter_adjoint_split_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, int vt,
                                         float* smem) {
  using SC = SplitCfg<G, NV>;
  const Dims& dm = a.dims;
  constexpr int C = G::C, D = G::D, LD = SC::LD, RB = SC::RB, VT = SC::VT, NT_ = SC::NTHR, NW = SC::NW;
  constexpr int MT = SC::MT, TNV = SC::TNV;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const int64_t NT = dm.NT(), Tp = dm.Tp();
  const int c0 = vt * VT;  // own columns [c0, c0 + VT) and own K rows [c0, c0 + VT)
  const T* dO = static_cast<const T*>(a.dO);
  float* S = smem;           // [D][LD]  h[n]: own columns (all rows) and own rows (all columns)
  float* Sp = S + D * LD;    // [D][LD]  S' (all columns; own columns computed here)
  float* Wr = Sp + D * LD;   // [RB][LD] W rows
  float* Qr = Wr + RB * LD;  // [RB][LD] scale Q~ rows
  float* Kr = Qr + RB * LD;  // [RB][LD] Kbar rows
  float* Ur = Kr + RB * LD;  // [RB][LD] U -> Delta (own columns; the rest gathered)
  float* Or = Ur + RB * LD;  // [RB][LD] dO
  float* Dr = Or + RB * LD;  // [RB][LD] A_qk^T dO -> dDelta (own columns; the rest gathered)
  float* eg = Dr + RB * LD;  // [D]
  const int tid = blk.tid();
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t b = bh / dm.H, h = bh % dm.H;

  for (int e = tid; e < D * D; e += NT_) Sp[(e / D) * LD + e % D] = a.dht ? a.dht[bh * D * D + e] : 0.0f;
  constexpr int kAccN = kTC ? 4 * SC::NACC_T : SC::NACC_S;
  float acc[kAccN];
  KDA_UNROLL
  for (int m = 0; m < kAccN; ++m) acc[m] = 0.0f;

  // Register prefetch one step ahead, as in the single-block program.
  constexpr int MS = SC::MS, MR = SC::MR, MRV = SC::MRV;
  float pSc[2 * MS], pSr[2 * MS], pW[2 * MR], pQ[2 * MR], pK[2 * MR], pO[2 * MR], pU[2 * MRV], pD[2 * MRV];
  float pE = 0.0f;
  auto fetch_state = [&](int64_t n) {  // own columns and own rows of h[n]; gamma[n]
    const float* hn = a.h + (bh * NT + n) * D * D;
    KDA_UNROLL
    for (int m = 0; m < MS; ++m) {
      const int e = 2 * (tid + m * NT_);
      ld2(hn, (e / VT) * D + c0 + e % VT, pSc[2 * m], pSc[2 * m + 1]);
      ld2(hn, c0 * D + e, pSr[2 * m], pSr[2 * m + 1]);
    }
    if (tid < D) pE = ws.gamma[(bh * NT + n) * D + tid];
  };
  auto fetch_rows = [&](int64_t n, int rb) {
    const int64_t row0 = bh * Tp + n * C + rb * RB;  // workspace row
    const int64_t t0 = n * C + rb * RB;              // token row
    KDA_UNROLL
    for (int m = 0; m < MR; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int r = e / D, i = e % D;
      const int64_t gi = (row0 + r) * D + i;
      ld2(static_cast<const T*>(ws.W), gi, pW[2 * m], pW[2 * m + 1]);
      ld2(static_cast<const T*>(ws.sQ), gi, pQ[2 * m], pQ[2 * m + 1]);
      ld2(ws.Kbar, gi, pK[2 * m], pK[2 * m + 1]);
      pO[2 * m] = pO[2 * m + 1] = 0.0f;
      if (t0 + r < dm.T) ld2(dO, ((b * dm.T + t0 + r) * dm.H + h) * D + i, pO[2 * m], pO[2 * m + 1]);
    }
    KDA_UNROLL
    for (int m = 0; m < MRV; ++m) {
      const int e = 2 * (tid + m * NT_);
      if (e >= RB * VT) break;
      const int64_t gi = (row0 + e / VT) * D + c0 + e % VT;
      ld2(ws.U, gi, pU[2 * m], pU[2 * m + 1]);
      ld2(static_cast<const T*>(ws.AqkT_dO), gi, pD[2 * m], pD[2 * m + 1]);
    }
  };
  // gathers columns [p VT, (p+1) VT) of rows [0, rows) of x from every other block p
  auto gather = [&](float* x, int rows) {
    for (int p = 1; p < NV; ++p) {
      const int src = (vt + p) % NV;
      const float* px = blk.peer(x, src);
      for (int e = tid; e < rows * VT / 4; e += NT_) {
        const int r = e / (VT / 4), cc = src * VT + (e % (VT / 4)) * 4;
        copy4(x + r * LD + cc, px + r * LD + cc);
      }
    }
  };
  fetch_state(NT - 1);
  fetch_rows(NT - 1, 0);
  for (int64_t n = NT - 1; n >= 0; --n) {
    KDA_UNROLL
    for (int m = 0; m < MS; ++m) {
      const int e = 2 * (tid + m * NT_);
      sts2(S + (e / VT) * LD + c0 + e % VT, pSc[2 * m], pSc[2 * m + 1]);
      sts2(S + (c0 + e / D) * LD + e % D, pSr[2 * m], pSr[2 * m + 1]);
    }
    if (tid < D) eg[tid] = expf(pE);
    for (int rb = 0; rb < C / RB; ++rb) {
      const int64_t row0 = bh * Tp + n * C + rb * RB;  // workspace row
      KDA_UNROLL
      for (int m = 0; m < MR; ++m) {
        const int e = 2 * (tid + m * NT_);
        const int r = e / D, i = e % D;
        sts2(Wr + r * LD + i, pW[2 * m], pW[2 * m + 1]);
        sts2(Qr + r * LD + i, pQ[2 * m], pQ[2 * m + 1]);
        sts2(Kr + r * LD + i, pK[2 * m], pK[2 * m + 1]);
        sts2(Or + r * LD + i, pO[2 * m], pO[2 * m + 1]);
      }
      KDA_UNROLL
      for (int m = 0; m < MRV; ++m) {
        const int e = 2 * (tid + m * NT_);
        if (e >= RB * VT) break;
        const int at = (e / VT) * LD + c0 + e % VT;
        sts2(Ur + at, pU[2 * m], pU[2 * m + 1]);
        sts2(Dr + at, pD[2 * m], pD[2 * m + 1]);
      }
      if (rb + 1 < C / RB) {
        fetch_rows(n, rb + 1);
      } else if (n > 0) {
        fetch_rows(n - 1, 0);
        fetch_state(n - 1);
      }
      blk.sync();  // also orders the S / eg stores above
      // ---- A: Delta = U - W S, dDelta = A_qk^T dO + Kbar S' on the own columns ----------
      if constexpr (kTC) {
        constexpr int NJ = MT * TNV;                  // 16x8 tiles of [RB x VT] per product
        for (int jb = warp; jb < 2 * NJ; jb += NW) {  // warp-uniform
          const bool is_dd = jb >= NJ;
          const int ti = jb % NJ, m0 = (ti / TNV) * 16, n0 = c0 + (ti % TNV) * 8;
          const float* A = is_dd ? Kr : Wr;
          const float* B = is_dd ? Sp : S;
          float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          mma_acc<kSplit>(
              blk, p, D, [&](int r, int k) { return A[(m0 + r) * LD + k]; },
              [&](int k, int c) { return B[k * LD + n0 + c]; });
          for (int e = 0; e < 4; e += 2) {  // e, e + 1: columns j, j + 1 of row r
            int r, c;
            frag_rc(lane, e, r, c);
            r += m0;
            const int j = n0 + c;
            float v[2];
            for (int u = 0; u < 2; ++u) {
              float* x = (is_dd ? Dr : Ur) + r * LD + j + u;
              v[u] = is_dd ? *x + p[e + u] : *x - p[e + u];
              *x = v[u];
            }
            if (is_dd) st2(static_cast<T*>(ws.dDelta), (row0 + r) * D + j, v[0], v[1]);
            else st2(ws.Delta, (row0 + r) * D + j, v[0], v[1]);
          }
        }
      } else {
        for (int e = tid; e < RB * VT; e += NT_) {
          const int r = e / VT, j = c0 + e % VT;
          float dl = Ur[r * LD + j], dd = Dr[r * LD + j];
          for (int i = 0; i < D; ++i) {
            dl -= Wr[r * LD + i] * S[i * LD + j];
            dd += Kr[r * LD + i] * Sp[i * LD + j];
          }
          Ur[r * LD + j] = dl;
          Dr[r * LD + j] = dd;
          const int64_t gi = (row0 + r) * D + j;
          st(ws.Delta, gi, dl);
          st(static_cast<T*>(ws.dDelta), gi, dd);
        }
      }
      blk.cluster_sync();  // every block's Delta / dDelta columns written; saved rows all read
      gather(Ur, RB);
      gather(Dr, RB);
      blk.sync();
      // ---- B: X_q = dO S^T, X_w = dDelta S^T, X_k = Delta S'^T on the own K rows (full V);
      // S' accumulator += scale Q~^T dO - W^T dDelta on the own columns ---------------------
      if constexpr (kTC) {
        constexpr int NJ = MT * TNV;                  // 16x8 tiles of [RB x VT] per product
        for (int jb = warp; jb < 3 * NJ; jb += NW) {  // warp-uniform
          const int prod = jb / NJ, ti = jb % NJ, m0 = (ti / TNV) * 16, n0 = c0 + (ti % TNV) * 8;
          const float* A = prod == 0 ? Or : prod == 1 ? Dr : Ur;
          const float* B = prod == 2 ? Sp : S;
          float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          mma_acc<kSplit>(
              blk, x, D, [&](int r, int k) { return A[(m0 + r) * LD + k]; },
              [&](int k, int c) { return B[(n0 + c) * LD + k]; });
          for (int e = 0; e < 4; e += 2) {
            int r, c;
            frag_rc(lane, e, r, c);
            const int64_t gi = (row0 + m0 + r) * D + n0 + c;
            if (prod == 0) st2(static_cast<T*>(ws.Xq), gi, x[e], x[e + 1]);
            else if (prod == 1) st2(static_cast<T*>(ws.Xw), gi, x[e], x[e + 1]);
            else st2(ws.Xk, gi, x[e], x[e + 1]);
          }
        }
        KDA_UNROLL
        for (int u = 0; u < SC::NACC_T; ++u) {
          const int ti = warp * SC::NACC_T + u, m0 = (ti / TNV) * 16, n0 = c0 + (ti % TNV) * 8;
          float(&ac)[4] = *reinterpret_cast<float(*)[4]>(acc + 4 * u);
          mma_acc<kSplit>(
              blk, ac, RB, [&](int r, int k) { return Qr[k * LD + m0 + r]; },
              [&](int k, int c) { return Or[k * LD + n0 + c]; });
          mma_acc<kSplit>(
              blk, ac, RB, [&](int r, int k) { return -Wr[k * LD + m0 + r]; },
              [&](int k, int c) { return Dr[k * LD + n0 + c]; });
        }
      } else {
        for (int e = tid; e < RB * VT; e += NT_) {
          const int r = e / VT, i = c0 + e % VT;
          float xq = 0.0f, xw = 0.0f, xk = 0.0f;
          for (int j = 0; j < D; ++j) {
            const float sv = S[i * LD + j];
            xq += Or[r * LD + j] * sv;
            xw += Dr[r * LD + j] * sv;
            xk += Ur[r * LD + j] * Sp[i * LD + j];
          }
          const int64_t gi = (row0 + r) * D + i;
          st(static_cast<T*>(ws.Xq), gi, xq);
          st(static_cast<T*>(ws.Xw), gi, xw);
          st(ws.Xk, gi, xk);
        }
        KDA_UNROLL
        for (int m = 0; m < SC::NACC_S; ++m) {
          const int e = tid + m * NT_;
          const int i = e / VT, j = c0 + e % VT;
          float s = 0.0f;
          for (int r = 0; r < RB; ++r) s += Qr[r * LD + i] * Or[r * LD + j] - Wr[r * LD + i] * Dr[r * LD + j];
          acc[m] += s;
        }
      }
      blk.cluster_sync();  // the peers' gathers of Ur / Dr done: row tiles free for the next step
    }
    // dgamma_s = e^gamma * sum_v S S' on the own K rows (one warp per state row)
    for (int i = c0 + warp; i < c0 + VT; i += NW) {
      float s = 0.0f;
      for (int j = lane; j < D; j += 32) s += S[i * LD + j] * Sp[i * LD + j];
      s = blk.warp_sum(s);
      if (lane == 0) ws.dgamma_s[(bh * NT + n) * D + i] = eg[i] * s;
    }
    blk.sync();
    if constexpr (kTC) {
      KDA_UNROLL
      for (int u = 0; u < SC::NACC_T; ++u) {
        const int ti = warp * SC::NACC_T + u, m0 = (ti / TNV) * 16, n0 = c0 + (ti % TNV) * 8;
        for (int e = 0; e < 4; ++e) {
          int r, c;
          frag_rc(lane, e, r, c);
          const int i = m0 + r, j = n0 + c;
          Sp[i * LD + j] = eg[i] * Sp[i * LD + j] + acc[4 * u + e];
          acc[4 * u + e] = 0.0f;
        }
      }
    } else {
      KDA_UNROLL
      for (int m = 0; m < SC::NACC_S; ++m) {
        const int e = tid + m * NT_;
        const int i = e / VT, j = c0 + e % VT;
        Sp[i * LD + j] = eg[i] * Sp[i * LD + j] + acc[m];
        acc[m] = 0.0f;
      }
    }
    if (n > 0) {
      blk.cluster_sync();  // every block's S' columns updated
      gather(Sp, D);       // (a peer updates its columns again only after the next chunk's cluster syncs)
    }
    blk.sync();
  }
  if (a.dh0)
    for (int e = tid; e < D * VT; e += NT_) {
      const int i = e / VT, j = c0 + e % VT;
      a.dh0[(bh * D + i) * D + j] = Sp[i * LD + j];
    }
}

// ======================================================================================
// intra adjoint (backward, chunk-parallel)
// ======================================================================================
template <class G, class T, bool kTC, class Blk>
KDA_DEV void intra_adjoint_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, int64_t n,
                                   float* smem) {
  const Dims& dm = a.dims;
  constexpr int C = G::C, KS = G::KS, LS = G::LS, LC = G::LC, NTHR = G::NTHR;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const ChunkPos cp(dm, bh, n);
  const float scale = resolved_scale(a);
  const int tid = blk.tid();
  // shared memory (floats)
  float* Pk = smem;        // P(k^,k^) raw (s < r)
  float* Tm = Pk + G::CC;  // (I + A)^{-1}
  float* dT = Tm + G::CC;  // dTm -> dA -> dP_kk = beta_r dA
  float* dQ = dT + G::CC;  // solve scratch (A), then dA_qk -> dP_qk = scale dA_qk
  float* Zc = dQ + G::CC;  // scratch
  float* rq = Zc + G::CC;  // [C]
  float* rk = rq + C;
  float* be = rk + C;
  float* dbe = be + C;
  float* dotq = dbe + C;
  float* dotk = dotq + C;
  float* part = dotk + C;    // 8C (row-stats scratch: 2 * C * D/32)
  float* sl = part + 8 * C;  // 13 slices
  float* sq = sl;
  float* sk = sq + G::SLICE;
  float* gs = sk + G::SLICE;
  float* gx = gs + G::SLICE;
  float* ga = gx + G::SLICE;
  float* X = ga + G::SLICE;
  float* dG = X + G::SLICE;
  float* xq = dG + G::SLICE;
  float* xk = xq + G::SLICE;
  float* yv = xk + G::SLICE;
  float* DQ = yv + G::SLICE;
  float* DK = DQ + G::SLICE;
  float* ddt = DK + G::SLICE;  // [D] ddt_bias partial of this chunk
  float* dgam = ddt + G::D;    // [KS]
  float* red = dgam + KS;      // [NTHR/32 + 4]
  // The chunk's pre-norm dq^ / dk^ (phase g), staged over its rows of X_q / X_k, which are
  // read by then; the L2-norm backward (P6) reads them back.
  T* const dq_hat = static_cast<T*>(ws.Xq);
  float* const dk_hat = ws.Xk;
  auto zero = [](int, int) { return 0.0f; };

  {
    L2Prefetch<NTHR> pf;
    pf.in_rows(blk, cp, static_cast<const T*>(a.q));
    pf.in_rows(blk, cp, static_cast<const T*>(a.k));
    pf.in_rows(blk, cp, static_cast<const T*>(a.f));
    pf.in_rows(blk, cp, static_cast<const T*>(a.v));
    pf.in_rows(blk, cp, static_cast<const T*>(a.dO));
    pf.template tile<T>(blk, cp, C, ws.Xw);
    pf.template tile<float>(blk, cp, C, ws.Delta);
    pf.template tile<T>(blk, cp, C, ws.Xq);
    pf.template tile<float>(blk, cp, C, ws.Xk);
    pf.template tile<T>(blk, cp, C, ws.dDelta);
  }
  chunk_row_stats<G, T>(blk, a, cp, rq, rk, be, part);
  for (int e = tid; e < C * LC; e += NTHR) {
    Pk[e] = 0.0f;
    dT[e] = 0.0f;
  }
  for (int r = tid; r < C; r += NTHR) {
    dbe[r] = 0.0f;
    dotq[r] = 0.0f;
    dotk[r] = 0.0f;
  }
  for (int d = tid; d < G::D; d += NTHR) ddt[d] = 0.0f;
  float dA_acc = 0.0f;  // this thread's share of dA_log

  // ---- P1: P(k^,k^) and dTm_W = -X_w (beta K~)^T, K slices -------------------------------
  for (int ks = 0; ks < G::NKS; ++ks) {
    const int k0 = ks * KS;
    load_qk_gate_slice<G, T>(blk, a, cp, k0, rq, rk, sq, sk, gs, nullptr, nullptr);
    load_ws_slice<G>(blk, dm, cp, static_cast<const T*>(ws.Xw), k0, X);
    row_to_block_start<G>(blk, gs, sk, xk);
    for (int e = tid; e < C * KS; e += NTHR) {
      const int r = e / KS, c = e % KS;
      xq[r * LS + c] = sk[r * LS + c] * exp2_fast(gs[r * LS + c]);  // K~
    }
    blk.sync();
    accumulate_scores<G, kTC, kSplit, false>(blk, sq, sk, gs, xq, xk, yv, nullptr, Pk);
    block_product<kTC, kSplit, NTHR>(
        blk, C, C, KS, [&](int r, int c) { return X[r * LS + c]; }, [&](int c, int s) { return xq[s * LS + c]; }, zero,
        [&](int r, int s, float v) {
          if (s < r) dT[r * LC + s] -= be[s] * v;
        },
        TileLowerIncl());
    blk.sync();
  }
  // ---- P2: Tm ------------------------------------------------------------------------------
  for (int e = tid; e < C * C; e += NTHR) {
    const int r = e / C, s = e % C;
    dQ[r * LC + s] = s < r ? be[r] * Pk[r * LC + s] : 0.0f;
  }
  blk.sync();
  solve_unit_lower<G>(blk, dQ, Tm, Zc);
  for (int e = tid; e < C * LC; e += NTHR) dQ[e] = 0.0f;
  blk.sync();

  // ---- P3: dA_qk = dO Delta^T, dTm += dDelta (beta V)^T, Y_U = Tm^T dDelta, V slices ------
  {
    const T* dO = static_cast<const T*>(a.dO);
    const T* v = static_cast<const T*>(a.v);
    T* dv = static_cast<T*>(a.dv);
    for (int vs = 0; vs < G::NKS; ++vs) {
      const int v0 = vs * KS;
      load_in_slice<G>(blk, dm, cp, dO, v0, nullptr, sq);                          // dO
      load_ws_slice<G>(blk, dm, cp, static_cast<const float*>(ws.Delta), v0, sk);  // Delta
      load_ws_slice<G>(blk, dm, cp, static_cast<const T*>(ws.dDelta), v0, X);      // dDelta
      load_in_slice<G>(blk, dm, cp, v, v0, nullptr, yv);                           // V
      blk.sync();
      for (int e = tid; e < C * KS; e += NTHR) {
        const int r = e / KS, c = e % KS;
        xq[r * LS + c] = be[r] * yv[r * LS + c];  // beta V
      }
      blk.sync();
      block_product<kTC, kSplit, NTHR>(
          blk, C, C, KS, [&](int r, int c) { return sq[r * LS + c]; }, [&](int c, int s) { return sk[s * LS + c]; },
          zero,
          [&](int r, int s, float val) {
            if (s <= r) dQ[r * LC + s] += val;
          },
          TileLowerIncl());
      block_product<kTC, kSplit, NTHR>(
          blk, C, C, KS, [&](int r, int c) { return X[r * LS + c]; }, [&](int c, int s) { return xq[s * LS + c]; },
          zero,
          [&](int r, int s, float val) {
            if (s < r) dT[r * LC + s] += val;
          },
          TileLowerIncl());
      // Y_U = Tm^T dDelta -> dv = beta Y_U; dbeta += Y_U . v
      block_product<kTC, kSplit, NTHR>(
          blk, C, KS, C, [&](int s, int r) { return Tm[r * LC + s]; }, [&](int r, int c) { return X[r * LS + c]; },
          zero,
          Overload{[&](int s, int c, float yu) {
                     if (s < cp.L) st(dv, cp.in(dm, s, v0 + c), be[s] * yu);
                     xk[s * LS + c] = yu * yv[s * LS + c];
                   },
                   [&](int s, int c, float y0, float y1) {
                     if (s < cp.L) st2(dv, cp.in(dm, s, v0 + c), be[s] * y0, be[s] * y1);
                     xk[s * LS + c] = y0 * yv[s * LS + c];
                     xk[s * LS + c + 1] = y1 * yv[s * LS + c + 1];
                   }},
          AllTiles(), KFromRow());
      blk.sync();
      add_row_sums<C, KS, NTHR>(blk, dbe, [&](int s, int c) { return xk[s * LS + c]; });
      blk.sync();
    }
  }
  // ---- P4: dA = -Tm^T dTm Tm^T (strict lower), dbeta, dP_kk, dP_qk --------------------------
  block_product<kTC, kSplit, NTHR>(  // Zc = dTm Tm^T
      blk, C, C, C, [&](int m, int c) { return dT[m * LC + c]; }, [&](int c, int s) { return Tm[s * LC + c]; }, zero,
      [&](int m, int s, float v) { Zc[m * LC + s] = v; }, AllTiles(),
      [](int m, int s, int&, int& hi) { hi = m < s + 1 ? m : s + 1; });
  blk.sync();
  block_product<kTC, kSplit, NTHR>(  // dA = -Tm^T Zc on the strict lower triangle
      blk, C, C, C, [&](int r, int m) { return Tm[m * LC + r]; }, [&](int m, int s) { return Zc[m * LC + s]; }, zero,
      [&](int r, int s, float v) { dT[r * LC + s] = s < r ? -v : 0.0f; }, TileLowerIncl(), KFromRow());
  blk.sync();
  add_row_sums<C, C, NTHR>(blk, dbe, [&](int r, int s) { return s < r ? dT[r * LC + s] * Pk[r * LC + s] : 0.0f; });
  blk.sync();
  for (int e = tid; e < C * C; e += NTHR) {
    const int r = e / C, s = e % C;
    dT[r * LC + s] = s < r ? be[r] * dT[r * LC + s] : 0.0f;   // dP_kk
    dQ[r * LC + s] = s <= r ? scale * dQ[r * LC + s] : 0.0f;  // dP_qk
  }
  blk.sync();

  // ---- P5: per K slice: Y_W, decay terms, P adjoints, reverse cumsum, gate backward --------
  {
    T* df = static_cast<T*>(a.df);
    const float* dgs = ws.dgamma_s;
    for (int ks = 0; ks < G::NKS; ++ks) {
      const int k0 = ks * KS;
      load_qk_gate_slice<G, T>(blk, a, cp, k0, rq, rk, sq, sk, gs, gx, ga);
      load_ws_slice<G>(blk, dm, cp, static_cast<const T*>(ws.Xw), k0, X);  // X_w
      row_to_block_start<G>(blk, gs, sq, xq);
      row_to_block_start<G>(blk, gs, sk, xk);
      blk.sync();
      // (a) Y_W = -Tm^T X_w;  dK~ = beta Y_W;  dbeta += Y_W . K~
      block_product<kTC, kSplit, NTHR>(
          blk, C, KS, C, [&](int s, int r) { return Tm[r * LC + s]; }, [&](int r, int c) { return X[r * LS + c]; },
          zero,
          [&](int s, int c, float v) {
            const float yw = -v;
            const float eg = exp2_fast(gs[s * LS + c]);
            const float kt = sk[s * LS + c] * eg;
            const float t = be[s] * yw;
            DK[s * LS + c] = t * eg;
            dG[s * LS + c] = t * kt;
            yv[s * LS + c] = yw * kt;
          },
          AllTiles(), KFromRow());
      blk.sync();
      add_row_sums<C, KS, NTHR>(blk, dbe, [&](int s, int c) { return yv[s * LS + c]; });
      load_ws_slice<G>(blk, dm, cp, static_cast<const T*>(ws.Xq), k0, X);  // X_q (X_w no longer read)
      blk.sync();
      // (b) dQ~ = scale X_q
      for (int e = tid; e < C * KS; e += NTHR) {
        const int r = e / KS, c = e % KS;
        const float t = scale * X[r * LS + c] * exp2_fast(gs[r * LS + c]);
        DQ[r * LS + c] = t;
        dG[r * LS + c] += t * sq[r * LS + c];
      }
      blk.sync();
      load_ws_slice<G>(blk, dm, cp, static_cast<const float*>(ws.Xk), k0, X);  // X_k = dKbar
      blk.sync();
      // (c) Kbar = K^ e^{gamma - Gamma}
      for (int e = tid; e < C * KS; e += NTHR) {
        const int r = e / KS, c = e % KS;
        const float t = X[r * LS + c] * exp2_fast(gs[(C - 1) * LS + c] - gs[r * LS + c]);
        DK[r * LS + c] += t;
        dG[r * LS + c] -= t * sk[r * LS + c];
      }
      using L = ColLanes<G>;
      const int lane = tid & 31, seg = lane % L::kLanes;
      for (int p = tid >> 5; p < L::kPasses; p += NTHR / 32) {  // dgam[c] = dgamma_s + column sum
        const int c = p * L::kCols + lane / L::kLanes, r0 = seg * L::kRows;
        float v = 0.0f;
        KDA_UNROLL
        for (int i = 0; i < L::kRows; ++i) {
          const int r = r0 + i;
          v += X[r * LS + c] * sk[r * LS + c] * exp2_fast(gs[(C - 1) * LS + c] - gs[r * LS + c]);
        }
        segment_prefix<L::kLanes, false>(blk, v, seg);
        if (seg == 0) dgam[c] = dgs[cp.gam(dm, k0 + c)] + v;
      }
      // (d) P adjoints, diagonal sub-blocks: element (x, c) takes its row terms (x = r)
      // and its column terms (x = s); same element ownership as (c), so no barrier between.
      for (int e = tid; e < C * KS; e += NTHR) {
        const int x = e / KS, c = e % KS;
        const int n0 = (x / kSub) * kSub;
        const float gx_ = gs[x * LS + c];
        float rqs = 0.0f, rks = 0.0f, cc = 0.0f;
        for (int s = n0; s <= x; ++s) {  // row terms, s <= x
          const float ks_ = sk[s * LS + c] * exp2_fast(gx_ - gs[s * LS + c]);
          rqs += dQ[x * LC + s] * ks_;
          rks += dT[x * LC + s] * ks_;  // dT[x][x] = 0
        }
        for (int r = x; r < n0 + kSub; ++r) {  // column terms, r >= x
          const float ee = exp2_fast(gs[r * LS + c] - gx_);
          cc += (dQ[r * LC + x] * sq[r * LS + c] + dT[r * LC + x] * sk[r * LS + c]) * ee;
        }
        DQ[x * LS + c] += rqs;
        DK[x * LS + c] += rks + cc;
        dG[x * LS + c] += sq[x * LS + c] * rqs + sk[x * LS + c] * rks - sk[x * LS + c] * cc;
      }
      // off-diagonal sub-blocks, through the first row ni of the later sub-block
      for (int i = 1; i < G::NB; ++i) {
        const int ni = i * kSub;
        blk.sync();  // previous users of yv / fc, DQ / DK / dG rows done
        col_to_block_start<G>(blk, ni, gs, sk, yv, nullptr);
        blk.sync();
        // rows x of sub-block i: sum_{s<ni} dP[x,s] k_s e^{G_ni - G_s}, times e^{G_x - G_ni}
        block_product2<kTC, kSplit, NTHR>(
            blk, kSub, KS, ni, [&](int r, int s) { return dQ[(ni + r) * LC + s]; },
            [&](int r, int s) { return dT[(ni + r) * LC + s]; }, [&](int s, int c) { return yv[s * LS + c]; },
            [&](int r, int c, float rqs, float rks) {
              const int x = ni + r;
              const float fr = exp2_fast(gs[x * LS + c] - gs[ni * LS + c]);
              rqs *= fr;
              rks *= fr;
              DQ[x * LS + c] += rqs;
              DK[x * LS + c] += rks;
              dG[x * LS + c] += sq[x * LS + c] * rqs + sk[x * LS + c] * rks;
            });
        // columns x < ni against the rows of sub-block i (K = 32: the q and the k terms)
        block_product<kTC, kSplit, NTHR>(
            blk, ni, KS, 2 * kSub,
            [&](int x, int k) { return k < kSub ? dQ[(ni + k) * LC + x] : dT[(ni + k - kSub) * LC + x]; },
            [&](int k, int c) { return k < kSub ? xq[(ni + k) * LS + c] : xk[(ni + k - kSub) * LS + c]; }, zero,
            [&](int x, int c, float cc) {
              cc *= exp2_fast(gs[ni * LS + c] - gs[x * LS + c]);  // e^{Gamma_ni - Gamma_x} <= 1
              DK[x * LS + c] += cc;
              dG[x * LS + c] -= sk[x * LS + c] * cc;
            });
      }
      blk.sync();
      // (e) dgamma lands on the last row (g = 0 beyond L, so row C-1 carries gamma), i.e. on
      // every row of (f) dg = reverse cumsum of dGamma; ddt_bias partial
      for (int p = tid >> 5; p < L::kPasses; p += NTHR / 32) {
        const int c = p * L::kCols + lane / L::kLanes, r0 = seg * L::kRows;
        float v[L::kRows], tot = 0.0f;
        KDA_UNROLL
        for (int i = L::kRows - 1; i >= 0; --i) v[i] = tot += dG[(r0 + i) * LS + c];
        const float pre = segment_prefix<L::kLanes, true>(blk, tot, seg) + dgam[c];
        float dsum = 0.0f;
        KDA_UNROLL
        for (int i = 0; i < L::kRows; ++i) {
          const float acc = v[i] + pre;
          dG[(r0 + i) * LS + c] = acc;
          dsum += acc * gx[(r0 + i) * LS + c];
        }
        segment_prefix<L::kLanes, false>(blk, dsum, seg);
        if (seg == 0) ddt[k0 + c] += dsum;
      }
      blk.sync();
      // (g) gate backward, pre-norm dq^ / dk^ out (over the consumed X_q / X_k slices), row dots
      for (int e = tid; e < C * KS / 2; e += NTHR) {  // columns c, c + 1 per thread
        const int r = e / (KS / 2), c = 2 * (e % (KS / 2)), at = r * LS + c;
        const float dg0 = dG[at], dg1 = dG[at + 1];
        if (r < cp.L) st2(df, cp.in(dm, r, k0 + c), dg0 * gx[at], dg1 * gx[at + 1]);
        dA_acc += dg0 * ga[at] + dg1 * ga[at + 1];
        st2(dq_hat, cp.ws(dm, r, k0 + c), DQ[at], DQ[at + 1]);
        st2(dk_hat, cp.ws(dm, r, k0 + c), DK[at], DK[at + 1]);
      }
      add_row_sums<C, KS, NTHR>(blk, dotq, [&](int r, int c) { return DQ[r * LS + c] * sq[r * LS + c]; });
      add_row_sums<C, KS, NTHR>(blk, dotk, [&](int r, int c) { return DK[r * LS + c] * sk[r * LS + c]; });
      blk.sync();
    }
  }
  // ---- P6: L2-norm backward, dbeta -> db ---------------------------------------------------
  {
    const T* q = static_cast<const T*>(a.q);
    const T* k = static_cast<const T*>(a.k);
    T* dq = static_cast<T*>(a.dq);
    T* dk = static_cast<T*>(a.dk);
    T* db = static_cast<T*>(a.db);
    for (int e = tid; e < C * G::D / 2; e += NTHR) {  // columns col, col + 1 per thread
      const int r = e / (G::D / 2), col = 2 * (e % (G::D / 2));
      if (r >= cp.L) continue;
      const int64_t ii = cp.in(dm, r, col), wi = cp.ws(dm, r, col);
      float qh[2], kh[2], dqh[2], dkh[2];
      ld2(q, ii, qh[0], qh[1]);
      ld2(k, ii, kh[0], kh[1]);
      ld2(static_cast<const T*>(dq_hat), wi, dqh[0], dqh[1]);
      ld2(static_cast<const float*>(dk_hat), wi, dkh[0], dkh[1]);
      float oq[2], ok[2];
      for (int u = 0; u < 2; ++u) {
        oq[u] = rq[r] * (dqh[u] - dotq[r] * qh[u] * rq[r]);
        ok[u] = rk[r] * (dkh[u] - dotk[r] * kh[u] * rk[r]);
      }
      st2(dq, ii, oq[0], oq[1]);
      st2(dk, ii, ok[0], ok[1]);
    }
    for (int r = tid; r < cp.L; r += NTHR) st(db, cp.in_row(dm, r), dbe[r] * be[r] * (1.0f - be[r]));
  }
  // ---- P7: dA_log / ddt_bias partials, last block of the head reduces ----------------------
  {
    const float wsum = blk.warp_sum(dA_acc);
    if (tid % 32 == 0) red[tid / 32] = wsum;
    blk.sync();
    const int64_t prow = (cp.b * dm.NT() + n) * dm.H + cp.h;  // [B*NT, H, D+1]
    float* mine = ws.partials + prow * (G::D + 1);
    for (int d = tid; d < G::D; d += NTHR) mine[d] = ddt[d];
    if (tid == 0) {
      float s = 0.0f;
      for (int w = 0; w < NTHR / 32; ++w) s += red[w];
      mine[G::D] = s;
    }
    blk.fence();  // every writer publishes its partials before the block counts itself done
    blk.sync();
    if (tid == 0) {
      const uint32_t done = blk.arrive(&ws.counters[cp.h]);
      red[NTHR / 32] = done == static_cast<uint32_t>(dm.B * dm.NT() - 1) ? 1.0f : 0.0f;
    }
    blk.sync();
    if (red[NTHR / 32] != 0.0f) {
      blk.acquire();
      const int64_t rows = dm.B * dm.NT();
      for (int d = tid; d <= G::D; d += NTHR) {
        double s = 0.0;  // fixed order over (b, n): deterministic; double: B*NT terms, free
        for (int64_t pr = 0; pr < rows; ++pr) s += blk.load_cg(ws.partials + (pr * dm.H + cp.h) * (G::D + 1) + d);
        if (d < G::D) a.ddt_bias[cp.h * G::D + d] = static_cast<float>(s);
        else a.dA_log[cp.h] = static_cast<float>(s);
      }
    }
  }
}

// ---- host-side dispatch over the instantiated configurations ---------------------------
// f.template operator()<Cfg<D, C>, T>() for the runtime (D, C, dtype); callers validated them.
template <class F>
inline void dispatch_config(const Dims& dm, DType dtype, F&& f) {
  auto with_dtype = [&]<int D, int C>() {
    if (dtype == DType::bf16) f.template operator()<Cfg<D, C>, bfloat16>();
    else f.template operator()<Cfg<D, C>, float>();
  };
  if (dm.D == 64) {
    if (dm.C == 16) with_dtype.template operator()<64, 16>();
    else if (dm.C == 32) with_dtype.template operator()<64, 32>();
    else with_dtype.template operator()<64, 64>();
  } else {
    if (dm.C == 16) with_dtype.template operator()<128, 16>();
    else if (dm.C == 32) with_dtype.template operator()<128, 32>();
    else with_dtype.template operator()<128, 64>();
  }
}

}  // namespace lt::kda::KDA_BLOCKS_NS
