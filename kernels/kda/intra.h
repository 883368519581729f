// KDA intra (forward, chunk-parallel, grid NT*B*H): Gamma, A_qk, Tm and the ForwardWorkspace
// tiles W, U, Qp, Kbar, Ob, gamma, sQ, Aqk of one chunk (overview: kernels/kda_blocks.h).
#pragma once

#include "kernels/kda/chunk_ops.h"

namespace lt::kda::KDA_BLOCKS_NS {

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
  if (blk.tid() == 0 && fwd_groups(a) > 1) zero_fwd_counters(ws, dm, bh, n);  // the two-level scan's, before it
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
    load_qk_gate_slice<G, T>(blk, a, cp, k0, rq, rk, s0, s1, gs, nullptr, nullptr, s2, s3);
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

}  // namespace lt::kda::KDA_BLOCKS_NS
