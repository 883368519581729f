// KDA intra (forward, chunk-parallel, grid NT*B*H) in row ownership, at C <= 32: the same outputs
// as intra_program (kernels/kda/intra.h) from a program whose TPR = D / 8 threads (r, j) a row
// each own row r, columns {4j..4j+3, D/2+4j..D/2+4j+3}, of every C x D tile from the loads to
// the stores.
// Row norms, gates, Gamma's column scan (shuffles in a warp, warp totals across), the diagonal
// sub-blocks' scores and every elementwise tile are formed in registers; shared memory holds
// only what another thread reads (Gamma and k^ rows for the scores, the mma operands). Nine
// block barriers where the slice program takes about thirty.
#pragma once

#include "kernels/kda/chunk_ops.h"

namespace lt::kda::KDA_BLOCKS_NS {

// Sums N values over the TPR lanes of a row group (the lane's low bits = j) as a reduce-scatter:
// on return v[0..N/TPR) holds the full sums of values j N/TPR .. (j + 1) N/TPR - 1. N - N/TPR
// shuffles, where a butterfly a value takes N log2(TPR). Every lane of the warp must call it.
template <int O, int N, class Blk>
KDA_DEV void reduce_scatter_step(Blk& blk, float* v, int j) {  // one halving at lane offset O
  const bool up = (j & O) != 0;
  KDA_UNROLL
  for (int k = 0; k < N / 2; ++k) {
    const float keep = up ? v[k + N / 2] : v[k], send = up ? v[k] : v[k + N / 2];
    v[k] = keep + blk.shfl_xor(send, O);
  }
}
template <int O, int N, class Blk>
KDA_DEV void reduce_scatter_from(Blk& blk, float* v, int j) {  // the halvings at lane offsets O, O / 2, .., 1
  reduce_scatter_step<O, N>(blk, v, j);
  if constexpr (O > 1) reduce_scatter_from<O / 2, N / 2>(blk, v, j);
}
template <int TPR, int N, class Blk>
KDA_DEV void reduce_scatter_row(Blk& blk, float (&v)[N], int j) {
  static_assert(N % TPR == 0 && (TPR & (TPR - 1)) == 0);
  reduce_scatter_from<TPR / 2, N>(blk, v, j);
}

// Sum over the TPR lanes of a row group (every lane gets it).
template <int TPR, class Blk>
KDA_DEV float sum_row(Blk& blk, float v) {
  KDA_UNROLL
  for (int o = 1; o < TPR; o <<= 1) v += blk.shfl_xor(v, o);
  return v;
}
KDA_DEV void lds_row8(const float* t, int c0, int c1, float* v) {  // a thread's 8 columns of a shared row
  lds4(t + c0, v);
  lds4(t + c1, v + 4);
}
KDA_DEV void sts_row8(float* t, int c0, int c1, const float* v) {
  sts4(t + c0, v);
  sts4(t + c1, v + 4);
}

// What a row-ownership program holds of its row r over its 8 columns (c0.., c1..): q^, k^
// (L2-normalised), v, G (log2 units, the chunk-local cumsum of the gate), dg/dx, dg/dA_log; the
// row's rstd and beta; ro, its segment offset. All 0 on rows >= L (so G stops growing there).
// Gamma = G + ro: a packed document's first token adds kSegmentStartGate to its gate, and ro is
// kSegmentStartGate (log2 units) times the document starts at rows <= r of the chunk, kept apart
// from G so that a decay between two rows of one document, (G_r - G_s) + (ro_r - ro_s), carries
// no rounding of the offset, where the difference of two Gammas does (docs/notes-kda.md, "the D64
// chunk programs in row ownership").
struct RowRegs {
  float qh[8] = {}, kh[8] = {}, vv[8] = {}, gm[8] = {}, gx[8] = {}, ga[8] = {};
  float beta = 0.0f, rq = 0.0f, rk = 0.0f, ro = 0.0f;
};
// log2 of the decay from row b to row a (Gamma_a - Gamma_b) from G and the segment offsets.
KDA_DEV float dlog2(float Ga, float oa, float Gb, float ob) { return (Ga - Gb) + (oa - ob); }
// Loads thread (r, j)'s part of its row and forms RowRegs; G's column scan (and the count of
// document starts) runs over the warp's 32 / TPR rows (the lane's bits above j) by shuffles, then
// adds the totals of the warps before through Wt ([NTHR/32][D] floats) and Wc ([NTHR/32]).
// Contains one block barrier; every thread must call it.
template <class G, class T, class Blk>
KDA_DEV void load_rows(Blk& blk, const FusedArgs& a, const ChunkPos& cp, int r, int j, float* Wt, float* Wc,
                       RowRegs& x) {
  const Dims& dm = a.dims;
  const int lane = blk.tid() & 31, warp = blk.tid() >> 5, c0 = 4 * j, c1 = G::D / 2 + 4 * j;
  const bool valid = r < cp.L;
  float starts = 0.0f;  // 1 at a document's first token
  if (valid) {
    const int64_t i0 = cp.in(dm, r, c0), i1 = cp.in(dm, r, c1);
    ld4(static_cast<const T*>(a.q), i0, x.qh);
    ld4(static_cast<const T*>(a.q), i1, x.qh + 4);
    ld4(static_cast<const T*>(a.k), i0, x.kh);
    ld4(static_cast<const T*>(a.k), i1, x.kh + 4);
    ld4(static_cast<const T*>(a.f), i0, x.gm);
    ld4(static_cast<const T*>(a.f), i1, x.gm + 4);
    ld4(static_cast<const T*>(a.v), i0, x.vv);
    ld4(static_cast<const T*>(a.v), i1, x.vv + 4);
    x.beta = sigmoid_f(ld(static_cast<const T*>(a.b), cp.in_row(dm, r)));
    if (a.seg_start != nullptr && a.seg_start[cp.b * dm.T + cp.t0 + r] != 0) starts = 1.0f;
  }
  float sq = 0.0f, sk = 0.0f;
  KDA_UNROLL
  for (int i = 0; i < 8; ++i) {
    sq += x.qh[i] * x.qh[i];
    sk += x.kh[i] * x.kh[i];
  }
  sq = sum_row<G::TPR>(blk, sq);
  sk = sum_row<G::TPR>(blk, sk);
  x.rq = valid ? 1.0f / sqrtf(sq + 1e-6f) : 0.0f;
  x.rk = valid ? 1.0f / sqrtf(sk + 1e-6f) : 0.0f;
  KDA_UNROLL
  for (int i = 0; i < 8; ++i) {
    x.qh[i] *= x.rq;
    x.kh[i] *= x.rk;
  }
  if (valid) {
    const float ea = expf(a.A_log[cp.h]);
    float db[8];
    ld4(a.dt_bias, cp.h * G::D + c0, db);
    ld4(a.dt_bias, cp.h * G::D + c1, db + 4);
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) {
      const GateVal gv = gate_value(x.gm[i] + db[i], ea, a.gate);
      x.gm[i] = gv.g * kLog2e;
      x.gx[i] = gv.dgdx;
      x.ga[i] = gv.dgda;
    }
  }
  float tot[8], pre[8] = {}, ctot = starts, cpre = 0.0f;  // c: the document starts (exact small integers)
  KDA_UNROLL
  for (int i = 0; i < 8; ++i) tot[i] = x.gm[i];
  KDA_UNROLL
  for (int o = G::TPR; o < 32; o <<= 1) {
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) {
      const float t = blk.shfl_xor(tot[i], o);
      if (lane & o) pre[i] += t;  // the partner's rows come first
      tot[i] += t;
    }
    const float t = blk.shfl_xor(ctot, o);
    if (lane & o) cpre += t;
    ctot += t;
  }
  if (lane < G::TPR) sts_row8(Wt + warp * G::D, c0, c1, tot);
  if (lane == 0) Wc[warp] = ctot;
  blk.sync();
  for (int w = 0; w < warp; ++w) {
    float t[8];
    lds_row8(Wt + w * G::D, c0, c1, t);
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) pre[i] += t[i];
    cpre += Wc[w];
  }
  KDA_UNROLL
  for (int i = 0; i < 8; ++i) x.gm[i] += pre[i];
  x.ro = (cpre + starts) * (kSegmentStartGate * kLog2e);
}

// x = k^_s e^{Gamma_r - Gamma_s} over this thread's 8 columns: row s's k^ and G from the shared
// [C][LR] tiles Kh and Gs and its offset from Ro, row r's G and offset from registers (s <= r in
// one document or across a start: every factor <= 1).
KDA_DEV void decayed_key(const float* Kh, const float* Gs, const float* Ro, int s, int LR, int c0, int c1,
                         const float* gm, float ro, float* x) {
  float ks[8], gsv[8];
  lds_row8(Kh + s * LR, c0, c1, ks);
  lds_row8(Gs + s * LR, c0, c1, gsv);
  const float os = Ro[s];
  KDA_UNROLL
  for (int i = 0; i < 8; ++i) x[i] = ks[i] * exp2_fast(dlog2(gm[i], ro, gsv[i], os));
}

template <class G, class T, bool kTC, class Blk>
KDA_DEV void intra_rows_program(const FusedArgs& a, const ForwardWorkspace& ws, Blk& blk, int64_t bh, int64_t n,
                                float* smem) {
  static_assert(G::kIntraRows);
  using R = Cfg<G::D, G::C, G::NTHR_R>;  // the helpers' thread count
  constexpr int C = G::C, D = G::D, LC = G::LC, LR = G::LR, NTHR = G::NTHR_R, NW = NTHR / 32, TPR = G::TPR;
  constexpr int NO = C - kSub;  // rows of the off-diagonal sub-block (C = 32) or none (C = 16)
  constexpr int CPT = C / TPR;  // A_qk columns a thread stores
  constexpr bool kSplit = std::is_same_v<T, float>;
  const Dims& dm = a.dims;
  const ChunkPos cp(dm, bh, n);
  if (blk.tid() == 0 && fwd_groups(a) > 1) zero_fwd_counters(ws, dm, bh, n);  // the two-level scan's, before it
  const float scale = resolved_scale(a);
  const int tid = blk.tid(), r = tid / TPR, j = tid % TPR;
  const int c0 = 4 * j, c1 = D / 2 + 4 * j;  // this thread's two column quads
  // shared memory (floats)
  float* Pq = smem;           // [C][LC] A_qk = scale P(q^,k^), s <= r
  float* Pk = Pq + G::CC;     // [C][LC] A = diag(beta) P(k^,k^), s < r
  float* Tm = Pk + G::CC;     // [C][LC] (I + A)^{-1}
  float* Z = Tm + G::CC;      // [kSub][LC] solve scratch
  float* Gs = Z + kSub * LC;  // [C][LR] G (log2 units; Gamma = G + Ro), then W
  float* Kh = Gs + C * LR;    // [C][LR] k^, then U
  float* Bk = Kh + C * LR;    // [C][LR] beta K~
  float* Bv = Bk + C * LR;    // [C][LR] beta V
  float* Sq = Bv + C * LR;    // [C][LR] scale Q~
  float* XQ = Sq + C * LR;    // [NO][LR] q^ of rows 16.. brought to row 16
  float* XK = XQ + NO * LR;   // [NO][LR] k^ of rows 16.. brought to row 16
  float* Y = XK + NO * LR;    // [NO][LR] k^ of rows < 16 brought to row 16
  float* Wt = Y + NO * LR;    // [NW][D] the warps' gate totals
  float* be = Wt + NW * D;    // [C]
  float* Ro = be + C;         // [C] the rows' segment offsets (RowRegs::ro)
  float* Wc = Ro + C;         // [NW]
  float* Wk = Gs;
  float* Uk = Kh;

  // ---- loads, row stats, gate, Gamma: registers ----------------------------------------------
  RowRegs rw;
  load_rows<G, T>(blk, a, cp, r, j, Wt, Wc, rw);
  const float beta = rw.beta, ro = rw.ro;
  const float(&qh)[8] = rw.qh;
  const float(&kh)[8] = rw.kh;
  const float(&gm)[8] = rw.gm;
  if (j == 0) {
    be[r] = beta;
    Ro[r] = ro;
  }
  {
    float bv[8];
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) bv[i] = beta * rw.vv[i];
    sts_row8(Bv + r * LR, c0, c1, bv);
  }
  sts_row8(Gs + r * LR, c0, c1, gm);
  sts_row8(Kh + r * LR, c0, c1, kh);
  blk.sync();

  // ---- elementwise tiles, the operands of the off-diagonal scores, the diagonal scores -------
  {
    float gl[8];  // G of the last row (gamma = G + ro of the last row)
    lds_row8(Gs + (C - 1) * LR, c0, c1, gl);
    const float ol = Ro[C - 1];
    if (r == C - 1) {
      float gn[8];
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) gn[i] = (gl[i] + ol) * kLn2;
      st4(ws.gamma, cp.gam(dm, c0), gn);
      st4(ws.gamma, cp.gam(dm, c1), gn + 4);
    }
    float bk[8], sqv[8], kb[8];
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) {
      const float eg = exp2_fast(gm[i] + ro);
      bk[i] = beta * kh[i] * eg;                               // beta K~
      sqv[i] = scale * qh[i] * eg;                             // scale Q~
      kb[i] = kh[i] * exp2_fast(dlog2(gl[i], ol, gm[i], ro));  // Kbar
    }
    sts_row8(Bk + r * LR, c0, c1, bk);
    sts_row8(Sq + r * LR, c0, c1, sqv);
    const int64_t w0 = cp.ws(dm, r, c0), w1 = cp.ws(dm, r, c1);
    st4(static_cast<T*>(ws.sQ), w0, sqv);
    st4(static_cast<T*>(ws.sQ), w1, sqv + 4);
    st4(ws.Kbar, w0, kb);
    st4(ws.Kbar, w1, kb + 4);
  }
  if constexpr (
      NO > 0) {  // through row 16: rows >= 16 x' = x e^{Gamma_r - Gamma_16}, rows < 16 y = k e^{Gamma_16 - Gamma_s}
    float g16[8], x1[8], x2[8];
    lds_row8(Gs + kSub * LR, c0, c1, g16);
    const float o16 = Ro[kSub];
    if (r >= kSub) {
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) {
        const float f = exp2_fast(dlog2(gm[i], ro, g16[i], o16));
        x1[i] = qh[i] * f;
        x2[i] = kh[i] * f;
      }
      sts_row8(XQ + (r - kSub) * LR, c0, c1, x1);
      sts_row8(XK + (r - kSub) * LR, c0, c1, x2);
    } else {
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) x1[i] = kh[i] * exp2_fast(dlog2(g16[i], o16, gm[i], ro));
      sts_row8(Y + r * LR, c0, c1, x1);
    }
  }
  {  // diagonal sub-block: s = n0 + m <= r, elementwise (e^{Gamma_r - Gamma_s} <= 1 only for s <= r)
    const int n0 = r & ~(kSub - 1), rr = r - n0;
    float v[2 * kSub];  // P(q^,k^)[r][n0 + m] partials, then P(k^,k^)
    KDA_UNROLL
    for (int m = 0; m < kSub; ++m) {
      v[m] = 0.0f;
      v[kSub + m] = 0.0f;
      if (m <= rr) {
        float x[8];
        decayed_key(Kh, Gs, Ro, n0 + m, LR, c0, c1, gm, ro, x);
        KDA_UNROLL
        for (int i = 0; i < 8; ++i) {
          v[m] += qh[i] * x[i];
          v[kSub + m] += kh[i] * x[i];
        }
      }
    }
    // lane j: entries PER j.. (j < TPR / 2: P(q^,k^) m = PER j..; else P(k^,k^))
    constexpr int PER = 2 * kSub / TPR;
    reduce_scatter_row<TPR>(blk, v, j);
    const bool is_q = j < TPR / 2;
    const int m0 = PER * (j % (TPR / 2)), s0 = n0 + m0;
    float out[PER];
    KDA_UNROLL
    for (int u = 0; u < PER; ++u) {
      const int s = s0 + u;
      out[u] = is_q ? (s <= r ? scale * v[u] : 0.0f) : (s < r ? beta * v[u] : 0.0f);
    }
    float* po = (is_q ? Pq : Pk) + r * LC + s0;
    if constexpr (PER == 4) sts4(po, out);
    else sts2(po, out[0], out[1]);
    // A_qk above the diagonal sub-blocks reads as 0 in the tensor-core products over all C columns
    if (NO > 0 && r < kSub) {
      KDA_UNROLL
      for (int u = 0; u < kSub / TPR; ++u) Pq[r * LC + kSub + (kSub / TPR) * j + u] = 0.0f;
    }
  }
  blk.sync();

  // ---- off-diagonal scores (rows 16.. against s < 16), A_qk out, the solve ---------------------
  if constexpr (NO > 0) {
    block_product2<kTC, kSplit, NTHR>(
        blk, NO, kSub, D, [&](int x, int k) { return XQ[x * LR + k]; }, [&](int x, int k) { return XK[x * LR + k]; },
        [&](int k, int s) { return Y[s * LR + k]; },
        [&](int x, int s, float vq, float vk) {
          Pq[(kSub + x) * LC + s] = scale * vq;
          Pk[(kSub + x) * LC + s] = be[kSub + x] * vk;
        });
    blk.sync();
  }
  {
    T* aqk = static_cast<T*>(ws.Aqk) + cp.ws_row * C + r * C + CPT * j;  // row r, columns CPT j..
    float o[CPT];
    KDA_UNROLL
    for (int u = 0; u < CPT; ++u) {
      const int s = CPT * j + u;
      o[u] = s <= r ? Pq[r * LC + s] : 0.0f;
    }
    if constexpr (CPT == 4) st4(aqk, 0, o);
    else if constexpr (CPT == 2) st2(aqk, 0, o[0], o[1]);
    else st(aqk, 0, o[0]);
  }
  solve_unit_lower<R>(blk, Pk, Tm, Z);

  // ---- W = Tm (beta K~), U = Tm (beta V); then Qp = scale Q~ - A_qk W, Ob = A_qk U -------------
  auto zero = [](int, int) { return 0.0f; };
  block_product<kTC, kSplit, NTHR>(
      blk, C, D, C, [&](int x, int s) { return Tm[x * LC + s]; }, [&](int s, int c) { return Bk[s * LR + c]; }, zero,
      Overload{[&](int x, int c, float v) {
                 Wk[x * LR + c] = v;
                 st(static_cast<T*>(ws.W), cp.ws(dm, x, c), v);
               },
               [&](int x, int c, float v0, float v1) {
                 sts2(Wk + x * LR + c, v0, v1);
                 st2(static_cast<T*>(ws.W), cp.ws(dm, x, c), v0, v1);
               }},
      AllTiles(), KUpToRow());
  block_product<kTC, kSplit, NTHR>(
      blk, C, D, C, [&](int x, int s) { return Tm[x * LC + s]; }, [&](int s, int c) { return Bv[s * LR + c]; }, zero,
      Overload{[&](int x, int c, float v) {
                 Uk[x * LR + c] = v;
                 st(ws.U, cp.ws(dm, x, c), v);
               },
               [&](int x, int c, float v0, float v1) {
                 sts2(Uk + x * LR + c, v0, v1);
                 st2(ws.U, cp.ws(dm, x, c), v0, v1);
               }},
      AllTiles(), KUpToRow());
  blk.sync();
  block_product<kTC, kSplit, NTHR>(
      blk, C, D, C, [&](int x, int s) { return Pq[x * LC + s]; }, [&](int s, int c) { return Wk[s * LR + c]; }, zero,
      Overload{[&](int x, int c, float v) { st(static_cast<T*>(ws.Qp), cp.ws(dm, x, c), Sq[x * LR + c] - v); },
               [&](int x, int c, float v0, float v1) {
                 st2(static_cast<T*>(ws.Qp), cp.ws(dm, x, c), Sq[x * LR + c] - v0, Sq[x * LR + c + 1] - v1);
               }},
      AllTiles(), KUpToRow());
  block_product<kTC, kSplit, NTHR>(
      blk, C, D, C, [&](int x, int s) { return Pq[x * LC + s]; }, [&](int s, int c) { return Uk[s * LR + c]; }, zero,
      Overload{[&](int x, int c, float v) { st(static_cast<T*>(ws.Ob), cp.ws(dm, x, c), v); },
               [&](int x, int c, float v0, float v1) { st2(static_cast<T*>(ws.Ob), cp.ws(dm, x, c), v0, v1); }},
      AllTiles(), KUpToRow());
}

}  // namespace lt::kda::KDA_BLOCKS_NS
