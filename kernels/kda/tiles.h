// KDA block programs: warp-level tensor-core tiles (mma.sync m16n8k8, TF32 operands, fp32 accumulate).
#pragma once
#include "kernels/kda/scalar.h"

namespace lt::kda::KDA_BLOCKS_NS {

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

// ---- bf16 tiles: m16n8k16 products with fragments read by ldmatrix ------------------------
// A bf16 tile is row-major bf16 bits in shared memory with a row stride of ld elements (ld % 8 == 0,
// 16-byte aligned rows). The executor reads the fragments (layouts: kernels/cuda/mma.cuh):
//   blk.frag_a(a, tile, ld, m0, k0)  A[m][k] = tile[(m0 + m) ld + k0 + k], 16 x 16 (ldmatrix .x4)
//   blk.frag_a_t(a, tile, ld, m0, k0) A[m][k] = tile[(k0 + k) ld + m0 + m], A stored K x M (.x4.trans)
//   blk.frag_b(b, tile, ld, k0, n0)  B[k][n] = tile[(n0 + n) ld + k0 + k], 16 x 8, B stored N x K (.x2)
//   blk.frag_b_t(b, tile, ld, k0, n0) B[k][n] = tile[(k0 + k) ld + n0 + n], B stored K x N (.x2.trans)
//   blk.mma_bf16(d, a, b)            d (16 x 8 fp32 C fragment) += A B
// x rounded to bf16 (nearest even), as a float: the hi part of a two-term bf16 split x ~ hi + lo,
// which keeps x to 2^-16 relative (one bf16: 2^-8, TF32: 2^-11).
KDA_DEV float bf16_round(float x) {
#if defined(__CUDA_ARCH__)
  return bits_float(static_cast<uint32_t>(tc::bf16_bits_rn(x)) << 16);
#else
  return bits_float(static_cast<uint32_t>(float_to_bf16_bits(x)) << 16);
#endif
}
// Stores x[0..3] split in two: the bf16 hi parts at tile[hi_at ..], the lo parts (x - hi,
// rounded to bf16) at tile[lo_at ..]; both offsets 4-element aligned (one 8-byte store each).
KDA_DEV void st4_split(bfloat16* tile, int64_t hi_at, int64_t lo_at, const float* x) {
  float hi[4], lo[4];
  KDA_UNROLL
  for (int u = 0; u < 4; ++u) {
    hi[u] = bf16_round(x[u]);
    lo[u] = x[u] - hi[u];
  }
  st4(tile, hi_at, hi);
  st4(tile, lo_at, lo);
}

}  // namespace lt::kda::KDA_BLOCKS_NS
