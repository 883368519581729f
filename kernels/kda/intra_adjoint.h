// KDA intra adjoint (backward, chunk-parallel, grid NT*B*H): every chunk-local gradient and
// the dA_log / ddt_bias reduction (overview: kernels/kda_blocks.h).
#pragma once

#include "kernels/kda/chunk_ops.h"

namespace lt::kda::KDA_BLOCKS_NS {

// ======================================================================================
// intra adjoint (backward, chunk-parallel)
// ======================================================================================
template <class G, class T, bool kTC, bool kLean, class Blk>
KDA_DEV void intra_adjoint_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, int64_t n,
                                   float* smem) {
  const Dims& dm = a.dims;
  constexpr int C = G::C, KS = G::KS, LS = G::LS, LC = G::LC, NTHR = G::NTHR;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const ChunkPos cp(dm, bh, n);
  const float scale = resolved_scale(a);
  const int tid = blk.tid();
  constexpr bool lean = kLean;  // lean scan (LeanScan::lean): X_q, X_w formed here (P0)
  // q^, k^ brought to their sub-block's start in the gate's scan pass (fewer loads), but at D128,
  // where the program spills at its 3-block register cap, in passes of their own: the fused pass
  // added spills there (docs/notes-kda.md, "the gate's scan pass").
  constexpr bool kFusedBlockStart = G::D == 64;
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
  // The chunk's pre-norm dq^ / dk^ (phase g), staged in fp32 over its rows of Delta (last read
  // in P3; the scan read them before it published chunk n) and of X_k (read by then); the
  // L2-norm backward (P6) reads them back. fp32 for dq^ too: rounding it to bf16 before the
  // norm's projection rounds dq twice (docs/notes-kda.md, "the bf16 precision contract").
  float* const dq_hat = ws.Delta;
  float* const dk_hat = ws.Xk;
  auto zero = [](int, int) { return 0.0f; };

  {
    L2Prefetch<NTHR> pf;
    pf.in_rows(blk, cp, static_cast<const T*>(a.q));
    pf.in_rows(blk, cp, static_cast<const T*>(a.k));
    pf.in_rows(blk, cp, static_cast<const T*>(a.f));
    pf.in_rows(blk, cp, static_cast<const T*>(a.v));
    pf.in_rows(blk, cp, static_cast<const T*>(a.dO));
    pf.template tile<float>(blk, cp, C, ws.Delta);
    pf.template tile<float>(blk, cp, C, ws.Xk);
    pf.template tile<T>(blk, cp, C, ws.dDelta);
    if (lean) {
      pf.bytes(blk, a.h + (bh * cp.NT + n) * G::D * G::D, G::D * G::D * static_cast<int>(sizeof(float)));
    } else {
      pf.template tile<T>(blk, cp, C, ws.Xw);
      pf.template tile<T>(blk, cp, C, ws.Xq);
    }
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
  // Everything above reads the inputs only; from here on the scan's rows of this chunk
  // (dDelta, X_k, dgamma_s; full scan: X_q, X_w), ready once its nv blocks passed chunk n.
  if (tid == 0) wait_scan_chunk(blk, a, ws, bh, n);
  blk.sync();

  // ---- P0 (lean scan): X_q = dO S^T and X_w = dDelta S^T with S = h[n], over the chunk's
  // rows of sQ / W (which no launch reads any more). dO and dDelta are staged once as C x D tiles, S in
  // blocks of KR rows (the K columns of the result); row stride LDA = D + 4 (4 mod 32: the A
  // and the (k = t, n = g) B fragments are conflict-free). In the slice area, free until P1.
  if (lean) {
    constexpr int D = G::D, LDA = G::LDA, KR = C < KS ? C : KS;
    static_assert((2 * C + KR) * LDA <= 12 * G::SLICE, "P0's tiles fit in the slices");
    const T* dO = static_cast<const T*>(a.dO);
    const T* dD = static_cast<const T*>(ws.dDelta);
    const float* hn = a.h + (bh * cp.NT + n) * D * D;
    float* Ot = sl;                                // [C][LDA] dO (0 on rows >= L)
    float* Dt = Ot + C * LDA;                      // [C][LDA] dDelta
    float* Hk = Dt + C * LDA;                      // [KR][LDA] S[k0 + i][v] at i LDA + v
    for (int e = tid; e < C * D / 2; e += NTHR) {  // columns c, c + 1 per thread
      const int r = e / (D / 2), c = 2 * (e % (D / 2));
      float o0 = 0.0f, o1 = 0.0f, d0, d1;
      if (r < cp.L) ld2(dO, cp.in(dm, r, c), o0, o1);
      ld2(dD, cp.ws(dm, r, c), d0, d1);
      sts2(Ot + r * LDA + c, o0, o1);
      sts2(Dt + r * LDA + c, d0, d1);
    }
    for (int k0 = 0; k0 < D; k0 += KR) {
      for (int e = tid; e < KR * D / 2; e += NTHR) {
        const int i = e / (D / 2), v = 2 * (e % (D / 2));
        float h0, h1;
        ld2(hn, (k0 + i) * D + v, h0, h1);
        sts2(Hk + i * LDA + v, h0, h1);
      }
      blk.sync();
      block_product2<kTC, kSplit, NTHR>(
          blk, C, KR, D, [&](int r, int v) { return Ot[r * LDA + v]; }, [&](int r, int v) { return Dt[r * LDA + v]; },
          [&](int v, int k) { return Hk[k * LDA + v]; },
          [&](int r, int k, float xqv, float xwv) {
            st(static_cast<T*>(ws.Xq), cp.ws(dm, r, k0 + k), xqv);
            st(static_cast<T*>(ws.Xw), cp.ws(dm, r, k0 + k), xwv);
          });
      blk.sync();  // Hk free; at the end: the stores above precede this block's reads (P1, P5)
    }
  }

  // ---- P1: P(k^,k^) and dTm_W = -X_w (beta K~)^T, K slices -------------------------------
  for (int ks = 0; ks < G::NKS; ++ks) {
    const int k0 = ks * KS;
    if constexpr (kFusedBlockStart) {
      load_qk_gate_slice<G, T>(blk, a, cp, k0, rq, rk, sq, sk, gs, nullptr, nullptr, nullptr, xk);
    } else {
      load_qk_gate_slice<G, T>(blk, a, cp, k0, rq, rk, sq, sk, gs, nullptr, nullptr);
      row_to_block_start<G>(blk, gs, sk, xk);
    }
    load_ws_slice<G>(blk, dm, cp, static_cast<const T*>(ws.Xw), k0, X);
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
      if constexpr (kFusedBlockStart) {
        load_qk_gate_slice<G, T>(blk, a, cp, k0, rq, rk, sq, sk, gs, gx, ga, xq, xk);
      } else {
        load_qk_gate_slice<G, T>(blk, a, cp, k0, rq, rk, sq, sk, gs, gx, ga);
        row_to_block_start<G>(blk, gs, sq, xq);
        row_to_block_start<G>(blk, gs, sk, xk);
      }
      load_ws_slice<G>(blk, dm, cp, static_cast<const T*>(ws.Xw), k0, X);  // X_w
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
      load_ws_slice<G>(blk, dm, cp, static_cast<const float*>(ws.Xk), k0, X);  // X_k = dKbar (X_w no longer read)
      // (b) dQ~ = scale X_q; each X_q element is read once, by the thread that owns it, so straight
      // from global memory (no staging slice, no barriers around one)
      for (int e = tid; e < C * KS / 2; e += NTHR) {  // columns c, c + 1 per thread
        const int r = e / (KS / 2), c = 2 * (e % (KS / 2));
        float xq2[2];
        ld2(static_cast<const T*>(ws.Xq), cp.ws(dm, r, k0 + c), xq2[0], xq2[1]);
        KDA_UNROLL
        for (int u = 0; u < 2; ++u) {
          const int at = r * LS + c + u;
          const float t = scale * xq2[u] * exp2_fast(gs[at]);
          DQ[at] = t;
          dG[at] += t * sq[at];
        }
      }
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
      // (g) gate backward, pre-norm dq^ / dk^ out (over the chunk's read Delta / X_k rows), row dots
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
      ld2(static_cast<const float*>(dq_hat), wi, dqh[0], dqh[1]);
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
    reduce_gate_partials<G::D, NTHR>(blk, a, ws, cp, red + NTHR / 32);
  }
  // Chunk 0 is the scan's last: its blocks end after the scan's grid has completed, so this
  // grid completes after it (a launch that follows waits for this grid alone).
  if (n == 0) blk.wait_prior_grid();
}

// The intra adjoint's grid (NT B H blocks) in the scan's order: block g takes chunk
// n = NT - 1 - g / BH of sequence bh = g % BH, so that the blocks that start first (in index
// order) take the chunks the scan finishes first.
KDA_DEV void intra_adjoint_chunk(int64_t g, int64_t NT, int64_t BH, int64_t& bh, int64_t& n) {
  n = NT - 1 - g / BH;
  bh = g % BH;
}

}  // namespace lt::kda::KDA_BLOCKS_NS
