// KDA aqk_dO (backward, first launch, chunk-parallel, grid NT*B*H): AqkT_dO = A_qk^T dO and
// Delta = U - W h[n] (overview: kernels/kda_blocks.h).
#pragma once

#include "kernels/kda/chunk_ops.h"

namespace lt::kda::KDA_BLOCKS_NS {

// ======================================================================================
// aqk_dO (backward, first launch): AqkT_dO = A_qk^T dO from the forward's saved A_qk, and for
// the lean scan (LeanScan::lean)
// Delta = U - W S with S = h[n] the saved state before the chunk (written over U: this block
// reads the chunk's rows of U before it writes them, and no other block touches them). Delta
// does not depend on the adjoint state, so the reverse scan reads it instead of forming it
// (docs/notes-kda.md, "2026-12-02: three products off the backward scan"). Also zeroes the
// intra adjoint's per-head counters and the scan's progress counters (scan_progress).
// Shared: A_qk [C][LC], a dO slice [C][LS] (kAqkFloatsFull); lean: also a U slice [C][LS],
// W [C][LDA] (loaded once) and the V slice of h[n] [D][KS + 8] (row stride 8 mod 32: the
// (k = t, n = g) B-fragment reads are conflict-free) (kAqkFloats); at bf16 inputs W and the
// slice of h[n] are bf16 tiles over the same bytes (kBf below). One pass a V slice: both
// products, two barriers.
// ======================================================================================
template <class G, class T, bool kTC, class Blk>
KDA_DEV void aqk_dO_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, int64_t n,
                            float* smem) {
  const Dims& dm = a.dims;
  constexpr int C = G::C, D = G::D, KS = G::KS, LS = G::LS, LC = G::LC, LDA = G::LDA, LH = G::kAqkLH;
  constexpr int NTHR = G::NTHR;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const ChunkPos cp(dm, bh, n);
  const bool lean = a.lean_scan == LeanScan::lean;  // block-uniform

  float* Aq = smem;            // [C][LC] A_qk
  float* dOs = Aq + G::CC;     // [C][LS] dO slice (0 on rows >= L)
  float* Us = dOs + G::SLICE;  // [C][LS] U slice
  float* Ws = Us + G::SLICE;   // [C][LDA] W
  float* Hs = Ws + C * LDA;    // [D][LH] h[n][k][v0 + j] at k LH + j
  if (bh == 0 && n == 0)       // counters per head [H]; scan progress, first-level flags [2 B*H*NT]; ticket [1]
    for (int64_t i = blk.tid(); i < dm.H + 2 * dm.B * dm.H * dm.NT() + 1; i += NTHR) ws.counters[i] = 0u;
  const T* aqk = static_cast<const T*>(ws.Aqk) + cp.ws_row * C;
  KDA_UNROLL_N(8)
  for (int m = 0; m < C * C / NTHR; ++m) {
    const int e = blk.tid() + m * NTHR;
    Aq[(e / C) * LC + e % C] = ld(aqk, e);
  }
  // The V slice [v0, v0 + KS) of h[n] into Hs by 16-byte async copies: in flight while the
  // thread loads its other tiles, landed at wait_copies (h[n] is 16-byte aligned, so are Hs's rows).
  static_assert((C * LC + 2 * G::SLICE + C * LDA) % 4 == 0 && LH % 4 == 0 && (D * KS) % (4 * NTHR) == 0);
  const float* hn = a.h + (bh * cp.NT + n) * D * D;
  auto copy_h_slice = [&](int v0) {
    KDA_UNROLL
    for (int m = 0; m < D * KS / (4 * NTHR); ++m) {
      const int e = blk.tid() + m * NTHR;
      const int k = e / (KS / 4), j = 4 * (e % (KS / 4));
      blk.copy16_async(Hs + k * LH + j, hn + k * D + v0 + j);
    }
  };
  // bf16 inputs (kBf): W is a bf16 value (stored as T), so it stages exactly as a bf16 tile
  // (over Ws, row stride LW); each V slice of S = h[n] is split once into bf16 hi + lo (over Hs:
  // [D][hi KS | lo KS | 8]; x ~ hi + lo to 2^-16, tiles.h) and Delta = U - W (hi + lo) is two
  // m16n8k16 products a k step with ldmatrix fragments. Otherwise the fp32 tiles and TF32 products.
  constexpr bool kBf = kTC && std::is_same_v<T, bfloat16>;
  constexpr int LW = D + 8, LHB = 2 * KS + 8;  // bf16 row strides: 16-byte rows, ldmatrix conflict-free
  static_assert(LW <= 2 * LDA && LHB <= 2 * LH);
  auto* Wb = reinterpret_cast<bfloat16*>(Ws);
  auto* Hb = reinterpret_cast<bfloat16*>(Hs);
  auto split_h_slice = [&](int v0) {  // S[:, v0 : v0 + KS) -> Hb; the loads first, then the stores
    constexpr int NQ = D * KS / (4 * NTHR);
    float x[NQ][4];
    KDA_UNROLL
    for (int m = 0; m < NQ; ++m) {
      const int e = blk.tid() + m * NTHR;
      ld4(hn, (e / (KS / 4)) * D + v0 + 4 * (e % (KS / 4)), x[m]);
    }
    KDA_UNROLL
    for (int m = 0; m < NQ; ++m) {
      const int e = blk.tid() + m * NTHR;
      const int k = e / (KS / 4), j = 4 * (e % (KS / 4));
      st4_split(Hb, k * LHB + j, k * LHB + KS + j, x[m]);
    }
  };
  if (lean) {
    if constexpr (!kBf) copy_h_slice(0);
    static_assert((C * D) % (2 * NTHR) == 0);
    KDA_UNROLL
    for (int m = 0; m < C * D / (2 * NTHR); ++m) {  // columns c, c + 1 per thread
      const int e = blk.tid() + m * NTHR;
      const int r = e / (D / 2), c = 2 * (e % (D / 2));
      float v0, v1;
      ld2(static_cast<const T*>(ws.W), cp.ws(dm, r, c), v0, v1);
      if constexpr (kBf) st2(Wb, r * LW + c, v0, v1);
      else sts2(Ws + r * LDA + c, v0, v1);
    }
  }
  auto zero = [](int, int) { return 0.0f; };
  for (int vs = 0; vs < G::NKS; ++vs) {
    const int v0 = vs * KS;
    if constexpr (kBf) {
      if (lean) split_h_slice(v0);  // Hs is free: the last pass ended with a barrier
    } else if (lean && vs > 0) {
      copy_h_slice(v0);
    }
    load_in_slice<G>(blk, dm, cp, static_cast<const T*>(a.dO), v0, nullptr, dOs);
    if (lean) load_ws_slice<G>(blk, dm, cp, ws.U, v0, Us);
    blk.wait_copies();
    blk.sync();  // (first pass: also orders the A_qk and W loads)
    block_product<kTC, kSplit, NTHR>(
        blk, C, KS, C, [&](int r, int m) { return Aq[m * LC + r]; }, [&](int m, int c) { return dOs[m * LS + c]; },
        zero, [&](int r, int c, float v) { st(static_cast<T*>(ws.AqkT_dO), cp.ws(dm, r, v0 + c), v); }, AllTiles(),
        KFromRow());
    // Delta = U - W S on columns [v0, v0 + KS): over U (this slice of U is in Us by now)
    if constexpr (kBf) {
      constexpr int NTL = (C / 16) * (KS / 8), NW = NTHR / 32;
      const int lane = blk.tid() & 31;
      const auto* pw = reinterpret_cast<const uint16_t*>(Ws);
      const auto* ph = reinterpret_cast<const uint16_t*>(Hs);
      for (int u = blk.tid() / 32; lean && u < NTL; u += NW) {
        const int rt = u / (KS / 8), ct = u % (KS / 8);
        float acc[4] = {};
        KDA_UNROLL
        for (int kk = 0; kk < D; kk += 16) {
          uint32_t fa[4], bh[2], bl[2];
          blk.frag_a(fa, pw, LW, 16 * rt, kk);
          blk.frag_b_t(bh, ph, LHB, kk, 8 * ct);
          blk.frag_b_t(bl, ph, LHB, kk, KS + 8 * ct);
          blk.mma_bf16(acc, fa, bh);
          blk.mma_bf16(acc, fa, bl);
        }
        KDA_UNROLL
        for (int e = 0; e < 4; e += 2) {
          int r, c;
          frag_rc(lane, e, r, c);
          r += 16 * rt;
          c += 8 * ct;
          st2(ws.Delta, cp.ws(dm, r, v0 + c), Us[r * LS + c] - acc[e], Us[r * LS + c + 1] - acc[e + 1]);
        }
      }
    } else if (lean) {
      block_product<kTC, kSplit, NTHR>(
          blk, C, KS, D, [&](int r, int k) { return -Ws[r * LDA + k]; }, [&](int k, int j) { return Hs[k * LH + j]; },
          [&](int r, int j) { return Us[r * LS + j]; },
          Overload{[&](int r, int j, float v) { st(ws.Delta, cp.ws(dm, r, v0 + j), v); },
                   [&](int r, int j, float d0, float d1) { st2(ws.Delta, cp.ws(dm, r, v0 + j), d0, d1); }});
    }
    blk.sync();
  }
}

}  // namespace lt::kda::KDA_BLOCKS_NS
