// KDA fused path: what every block program shares (the programs: kernels/kda_blocks.h).
// One definition serves two executors:
//   kernels/cuda/kda/     each program is the body of a __global__ kernel (Blk = CUDA block)
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
  // per-thread loads (docs/notes-kda.md, "2026-12-01: the D128 chunk programs"). At D = 128,
  // C = 32 (the chunk the engine picks at D = 128) the wide tile halves the per-chunk tile
  // loads and the A-fragment reads an SM makes
  // (docs/notes-kda.md, "2026-12-02: the chunk table").
  static constexpr bool kWideInter = D_ == 128 && C_ >= 32;
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
  // 512 threads, which spilled) holds the 64 S' accumulators (docs/notes-kda.md, "2026-12-01:
  // the D128 chunk programs").
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
  static constexpr int kAqkLH = KS + 8;                                     // row stride of aqk_dO's h[n] slice
  static constexpr int kAqkFloatsFull = CC + SLICE;                         // aqk_dO of the full scan
  static constexpr int kAqkFloats = CC + 2 * SLICE + C * LDA + D * kAqkLH;  // of the lean scan
  static constexpr int kInterFloats = 3 * C * LDA + 3 * C * LBV + D * LBV + D;
  static constexpr int kAdjFloats = 2 * D * LDA + 6 * RB * LDA + D;
  // The intra adjoint at C = 64 runs one block per SM (its shared memory): 512 threads hide
  // more latency there. At C <= 32 several 256-thread blocks fit per SM and 256 threads are
  // faster (both measured: docs/notes-kda.md, "Measurements behind the kernel constants").
  using Adj = Cfg<D_, C_, C_ == 64 ? 512 : 256>;
  // Blocks per SM the intra adjoint is compiled for (register cap 65536 / (3 * 256) -> 80):
  // at C = 32 its shared memory (76 KB, D64 and D128 alike) admits 3 blocks, and the kernel is
  // bound by latency (wait / long scoreboard / barrier stalls), which more resident blocks
  // hide. At D = 128 the cap spills 36-64 bytes a thread (ptxas -v, bf16; uncapped 114-125
  // registers, 2 blocks, and 159 at fp32, 1 block) and still pays (docs/notes-kda.md, "The D128
  // intra adjoint at three blocks an SM").
  // At D = 64, C = 16 (33 KB) a cap of 64 registers gives 4 blocks without spills.
  static constexpr int kIntraAdjMinBlocks = NTHR != 256 ? 1 : C == 32 ? 3 : D == 64 ? 4 : 1;
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
// Two adjacent elements of a T array as loaded, not yet converted to float (i even, p aligned
// to 2 elements: one 32-bit (bf16) / 64-bit (fp32) load on the GPU). The backward scan's
// register prefetch holds these: a bf16 pair converted at the load puts an instruction that
// waits for the load right behind it, where the raw pair waits in its register until the next
// step stores it (docs/notes-kda.md, "2026-12-03: where the warps wait"; the forward scan
// measured slower with them at D64 and at D128 C64, and keeps ld2).
// A bf16 pair is one 32-bit word (element i in the low half, as the little-endian load gives
// it): held as two 16-bit values, the compiler splits the word right after the load (PRMT),
// which waits for the load as the conversion did.
template <class T>
struct Pair {
  T v[2];
};
template <>
struct Pair<bfloat16> {
  uint32_t bits;
};
template <class T>
KDA_DEV Pair<T> ld_pair(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bfloat16>) {
#if defined(__CUDA_ARCH__)
    return {*reinterpret_cast<const uint32_t*>(p + i)};
#else
    return {static_cast<uint32_t>(p[i].bits) | (static_cast<uint32_t>(p[i + 1].bits) << 16)};
#endif
  } else {
    static_assert(std::is_same_v<T, float>);
#if defined(__CUDA_ARCH__)
    const float2 f = *reinterpret_cast<const float2*>(p + i);
    return {{f.x, f.y}};
#else
    return {{p[i], p[i + 1]}};
#endif
  }
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
// A loaded pair, converted, to p[0], p[1] (shared memory, p 8-byte aligned).
template <class T>
KDA_DEV void sts2(float* p, const Pair<T>& x) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    sts2(p, bits_float(x.bits << 16), bits_float(x.bits & 0xffff0000u));
  } else {
    sts2(p, x.v[0], x.v[1]);
  }
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
// f(u, e, r, c) for the C-fragment elements e < 4 of a group of NG adjacent 16x8 tiles, tile u
// at (m0, n0 + 8 u): (r, c) the element's row and column in the product.
template <int NG, class F>
KDA_DEV void for_group_frags(int lane, int m0, int n0, F f) {
  KDA_UNROLL
  for (int u = 0; u < NG; ++u) {
    KDA_UNROLL
    for (int e = 0; e < 4; ++e) {
      int r, c;
      frag_rc(lane, e, r, c);
      f(u, e, m0 + r, n0 + 8 * u + c);
    }
  }
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

// The backward scan's progress for sequence bh (counters[H + bh], zeroed by aqk_dO): each of
// the scan's nv blocks of the sequence (scan_blocks) adds 1 once a chunk's rows of dDelta,
// X_k and dgamma_s (full scan: also X_q, X_w) are written, chunks in the scan's order
// NT - 1, ..., 0. So chunk n is ready for the intra adjoint once the count reaches
// nv (NT - n); that lets the intra adjoint run beside the scan (programmatic dependent
// launch) on the SMs the scan leaves idle.
KDA_DEV uint32_t* scan_progress(const BackwardWorkspace& ws, const Dims& dm, int64_t bh) {
  return ws.counters + dm.H + bh;
}
KDA_DEV int scan_blocks(const FusedArgs& a) { return a.scan_split > 1 ? a.scan_split : 1; }

// FusedArgs::scale with 0 read as D^-1/2 (kernels/mixer.h), in device code.
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
// N row sums of one warp at once (N a power of two, at most 32): v[k] is this lane's partial
// of row k. Returns the full sum (over the 32 lanes) of row `row`, which this lane holds. A
// reduce-scatter: at offset o (16, 8, ...) while more than one row is left, a lane keeps half
// of its rows (the upper half where lane & o) and adds its partner's partials of them; the
// rest is a butterfly on the one row left. So `row` is set by the lane's high bits, and the
// 32 / N lanes that differ only in the low log2(32 / N) bits hold the same row (the one with
// those bits zero may store it). N - 1 + log2(32 / N) shuffles, where a butterfly a row takes
// 5 N. Every sum is formed as the butterfly over xor offsets 16, 8, 4, 2, 1 forms it (own
// value + partner's), so on the GPU the result equals warp_sum (a butterfly) of each row bit for
// bit. Every lane of the warp must call it.
template <int N, class Blk>
KDA_DEV float warp_sum_rows(Blk& blk, float (&v)[N], int lane, int& row) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0);
  row = 0;
  KDA_UNROLL
  for (int o = 16, n = N; o > 0; o >>= 1) {
    if (n > 1) {
      const int half = n / 2;
      const bool up = (lane & o) != 0;
      KDA_UNROLL
      for (int k = 0; k < half; ++k) {
        const float keep = up ? v[k + half] : v[k], send = up ? v[k] : v[k + half];
        v[k] = keep + blk.shfl_xor(send, o);
      }
      if (up) row += half;
      n = half;
    } else {
      v[0] += blk.shfl_xor(v[0], o);
    }
  }
  return v[0];
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

// Accumulates one K slice into Pq (P(q^,k^), s <= r; only when kWithQ) and Pk (P(k^,k^),
// s < r; its diagonal may be written and the callers mask it). Needs sq, sk, gs and
// xq = row_to_block_start(sq), xk = row_to_block_start(sk); y is scratch for C-16 rows.
// Diagonal sub-blocks elementwise (CUDA cores); off-diagonal ones as products of the
// factored operands (tensor cores when kTC). Ends with a sync.
template <class G, bool kTC, bool kSplit, bool kWithQ, class Blk>
KDA_DEV void accumulate_scores(Blk& blk, const float* sq, const float* sk, const float* gs, const float* xq,
                               const float* xk, float* y, float* Pq, float* Pk) {
  constexpr int KS = G::KS, LS = G::LS, LC = G::LC;
  // Diagonal sub-blocks: only the pairs s < r of each are enumerated, and each pair's KS
  // columns are split over kSplitC adjacent lanes (combined by shuffles), so that the lanes
  // stay busy (one thread per (r, s) of the full 16 x 16 square leaves 47 % of them idle on
  // s > r). The diagonal s = r (P(q^,k^) only: the callers mask Pk's) is, at C >= 32 (kSplitC
  // = 2), one item a row after the pairs, its kSplitC partials summed in the lane in the order
  // the shuffles sum them, so each score is the one the pair form gives, bit for bit. With 120
  // pairs a sub-block the items then fill whole passes of 256 threads: 480 + 32 = 512 at C = 32
  // (the 136 pairs s <= r took a third pass of one busy warp), 960 + 64 at C = 64 (4 passes, was
  // 5; without q, 960 on the intra adjoint's 512 threads: 2, was 3). At C = 16 (kSplitC = 4) a
  // row's diagonal item would be four times a pair's work, on the pass's critical path (measured
  // slower: docs/notes-kda.md, "2026-12-03 (later)"), so there the pairs s <= r are enumerated
  // (kIncl), as the diagonal's own split items.
  constexpr int kSplitC = G::C == 16 ? 4 : 2, KC = KS / kSplitC;
  constexpr bool kIncl = kWithQ && kSplitC != 2;
  constexpr bool kDiagInLane = kWithQ && !kIncl;
  constexpr int kPairs = kIncl ? kSub * (kSub + 1) / 2 : kSub * (kSub - 1) / 2;
  constexpr int kPairItems = G::NB * kPairs * kSplitC;
  constexpr int kItems = kPairItems + (kDiagInLane ? G::C : 0);
  for (int it = 0; it < (kItems + G::NTHR - 1) / G::NTHR; ++it) {  // uniform: shuffles below
    const int w = blk.tid() + it * G::NTHR;
    const bool pair_item = w < kPairItems;
    const int pair = w / kSplitC, part = w % kSplitC;
    const int sb = pair / kPairs, q = pair % kPairs;
    // q = m (m + 1) / 2 + ss with ss <= m: row m (kIncl: s <= r) or m + 1 (s < r), column ss
    int m = static_cast<int>((sqrtf(8.0f * static_cast<float>(q) + 1.0f) - 1.0f) * 0.5f);
    if ((m + 1) * (m + 2) / 2 <= q) ++m;  // exact integer fix-ups of the float estimate
    if (m * (m + 1) / 2 > q) --m;
    const int r = pair_item ? sb * kSub + m + (kIncl ? 0 : 1) : 0;
    const int s = pair_item ? sb * kSub + q - m * (m + 1) / 2 : 0;
    float aq = 0.0f, ak = 0.0f;
    if (pair_item) {
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
    if (pair_item && part == 0) {
      if (kWithQ) Pq[r * LC + s] += aq;
      Pk[r * LC + s] += ak;
    }
    if constexpr (kDiagInLane) {
      const int d = w - kPairItems;  // the diagonal item of row d
      if (d >= 0 && d < G::C) {
        float p[kSplitC];
        KDA_UNROLL
        for (int j = 0; j < kSplitC; ++j) {
          p[j] = 0.0f;
          KDA_UNROLL
          for (int cc = 0; cc < KC; ++cc) {
            const int c = j * KC + cc;
            p[j] += sq[d * LS + c] * (sk[d * LS + c] * exp2_fast(gs[d * LS + c] - gs[d * LS + c]));
          }
        }
        KDA_UNROLL
        for (int o = 1; o < kSplitC; o <<= 1) {
          KDA_UNROLL
          for (int j = 0; j < kSplitC; j += 2 * o) p[j] += p[j + o];
        }
        Pq[d * LC + d] += p[0];
      }
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
// (one thread per column, the column in registers: the chain of a column is its FMAs and not
// a shared-memory round trip each, and the loads of A do not wait behind stores), then block
// rows merged: X_ij = -X_ii sum_{j<=m<i} A_im X_mj. Ends with a sync.
template <class G, class Blk>
KDA_DEV void solve_unit_lower(Blk& blk, const float* A, float* Tm, float* Z) {
  for (int e = blk.tid(); e < G::C * G::C; e += G::NTHR) Tm[(e / G::C) * G::LC + e % G::C] = 0.0f;
  blk.sync();
  for (int t = blk.tid(); t < G::C; t += G::NTHR) {
    const int base = (t / kSub) * kSub, c = t % kSub;
    float x[kSub];  // x[m] = Tm[base + m][base + c]
    KDA_UNROLL
    for (int m = 0; m < kSub; ++m) x[m] = m == c ? 1.0f : 0.0f;
    // x[r] = -sum_{c <= m < r} A[r][m] x[m] for r > c; the terms m < c add A 0 = +-0 to a +0
    // sum, so the sum is the one over c <= m < r, bit for bit
    KDA_UNROLL
    for (int r = 1; r < kSub; ++r) {
      const float* Ar = A + (base + r) * G::LC + base;
      float acc = 0.0f;
      KDA_UNROLL
      for (int m = 0; m < r; ++m) acc += Ar[m] * x[m];
      if (r > c) x[r] = -acc;
    }
    KDA_UNROLL
    for (int m = 0; m < kSub; ++m) Tm[(base + m) * G::LC + base + c] = x[m];
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

}  // namespace lt::kda::KDA_BLOCKS_NS
