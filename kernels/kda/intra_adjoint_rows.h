// KDA intra adjoint (backward, chunk-parallel, grid NT*B*H) in row ownership, at C <= 32: the
// same gradients as intra_adjoint_program (kernels/kda/intra_adjoint.h) from a program whose
// TPR = D / 8 threads (r, j) a row each own row r, columns {4j..4j+3, D/2+4j..D/2+4j+3}, as the
// forward's intra_rows_program does. Gates, Gamma, every elementwise term of the gate gradient, the
// diagonal sub-blocks' P adjoints, the reverse cumsum, the L2-norm backward and dbeta stay in
// the owner's registers over all D columns at once; the products go through [C][LR] tiles.
// The pre-norm dq^ / dk^ never leave the registers (the slice program stages them in global).
#pragma once

#include "kernels/kda/intra_rows.h"

namespace lt::kda::KDA_BLOCKS_NS {

// Loads this thread's 8 columns of row r of a [B,H,Tp,D] workspace tile.
template <class T>
KDA_DEV void ld_row8(const T* p, const ChunkPos& cp, const Dims& dm, int r, int c0, int c1, float* v) {
  ld4(p, cp.ws(dm, r, c0), v);
  ld4(p, cp.ws(dm, r, c1), v + 4);
}

template <class G, class T, bool kTC, bool kLean, class Blk>
KDA_DEV void intra_adjoint_rows_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh,
                                        int64_t n, float* smem) {
  static_assert(G::kIntraRows && G::NTHR == G::NTHR_R, "launched with D / 8 threads a row");
  constexpr int C = G::C, D = G::D, LC = G::LC, LR = G::LR, NTHR = G::NTHR, NW = NTHR / 32, TPR = G::TPR;
  constexpr int NO = C - kSub;  // rows of the off-diagonal sub-block (C = 32) or none (C = 16)
  constexpr int CPT = C / TPR;  // C x C columns a thread takes in row-owned passes
  constexpr bool kSplit = std::is_same_v<T, float>;
  const Dims& dm = a.dims;
  const ChunkPos cp(dm, bh, n);
  const float scale = resolved_scale(a);
  const int tid = blk.tid(), r = tid / TPR, j = tid % TPR, lane = tid & 31, warp = tid >> 5;
  const int c0 = 4 * j, c1 = D / 2 + 4 * j;
  const bool valid = r < cp.L;
  // shared memory (floats)
  float* Pk = smem;         // [C][LC] P(k^,k^) raw, s < r (0 elsewhere on the diagonal blocks)
  float* Tm = Pk + G::CC;   // [C][LC] (I + A)^{-1}
  float* dT = Tm + G::CC;   // [C][LC] dTm -> dA -> dP_kk = beta_r dA
  float* dQ = dT + G::CC;   // [C][LC] A (solve input), then dP_qk = scale dA_qk
  float* Gs = dQ + G::CC;   // [C][LR] G (log2 units; Gamma = G + Ro)
  float* Kh = Gs + C * LR;  // [C][LR] k^
  float* Qh = Kh + C * LR;  // [C][LR] q^
  float* T1 = Qh + C * LR;  // [C][LR] operand / result tiles, by phase
  float* T2 = T1 + C * LR;
  float* T3 = T2 + C * LR;
  float* T4 = T3 + C * LR;
  float* T5 = T4 + C * LR;
  float* Wt = T5 + C * LR;   // [NW][D] the warps' column partials
  float* Wt2 = Wt + NW * D;  // [NW][D]
  float* be = Wt2 + NW * D;  // [C]
  float* Ro = be + C;        // [C] the rows' segment offsets (RowRegs::ro)
  float* Wc = Ro + C;        // [NW]
  float* red = Wc + NW;      // [NW + 1]
  auto zero = [](int, int) { return 0.0f; };

  // ---- loads, row stats, gate, Gamma: registers ----------------------------------------------------
  RowRegs rw;
  load_rows<G, T>(blk, a, cp, r, j, Wt, Wc, rw);
  const float beta = rw.beta, rq = rw.rq, rk = rw.rk, ro = rw.ro;
  const float(&qh)[8] = rw.qh;
  const float(&kh)[8] = rw.kh;
  const float(&vv)[8] = rw.vv;
  const float(&gm)[8] = rw.gm;
  const float(&gx)[8] = rw.gx;
  const float(&ga)[8] = rw.ga;
  if (j == 0) {
    be[r] = beta;
    Ro[r] = ro;
  }
  sts_row8(Gs + r * LR, c0, c1, gm);
  sts_row8(Kh + r * LR, c0, c1, kh);
  sts_row8(Qh + r * LR, c0, c1, qh);
  {  // K~ = k^ e^Gamma (P1's operand)
    float kt[8];
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) kt[i] = kh[i] * exp2_fast(gm[i] + ro);
    sts_row8(T2 + r * LR, c0, c1, kt);
  }
  // P0's first piece of h[n] (rows [0, C) of S, into T4) by async copies: h[n] is the forward's,
  // so they fly while the block waits for the scan.
  const float* hn = kLean ? a.h + (bh * cp.NT + n) * D * D : nullptr;
  static_assert((4 * G::CC + 6 * C * LR) % 4 == 0 && LR % 4 == 0 && (C * D) % (4 * NTHR) == 0);
  auto copy_h_rows = [&](int k0) {  // S rows [k0, k0 + C) into T4
    KDA_UNROLL
    for (int m = 0; m < C * D / (4 * NTHR); ++m) {
      const int e = tid + m * NTHR;
      const int i = e / (D / 4), v = 4 * (e % (D / 4));
      blk.copy16_async(T4 + i * LR + v, hn + (k0 + i) * D + v);
    }
  };
  if constexpr (kLean) copy_h_rows(0);
  // Everything above reads the inputs only; from here on the scan's rows of this chunk
  // (dDelta, X_k, dgamma_s; full scan: X_q, X_w), ready once its nv blocks passed chunk n.
  if (tid == 0) wait_scan_chunk(blk, a, ws, bh, n);
  blk.sync();

  // ---- P0 (lean scan): X_q = dO S^T and X_w = dDelta S^T with S = h[n], over the chunk's rows
  // of sQ / W, as intra_adjoint_program's P0 (tiles T1, T3, T4; T2 holds K~)
  if constexpr (kLean && kTC && std::is_same_v<T, bfloat16>) {
    // bf16 inputs: dO and dDelta (stored as T) are bf16 values, so they stage exactly as one bf16
    // tile [dO | dDelta] in T1 (row stride LP = 2 D + 8 elements, the bytes of an LR row). Each
    // C-row piece of S lands in T4 (fp32) and is split once into bf16 hi + lo in T3 (same layout),
    // S ~ hi + lo to 2^-16 relative; then each 16 x 8 tile of X_q / X_w is two m16n8k16 products
    // a k step, its fragments read by ldmatrix (more accurate than the TF32 product it replaces).
    constexpr int LP = 2 * D + 8;                 // 2 LP bytes = 4 LR bytes; LP % 8 == 0: 16-byte rows, and the
    static_assert(LP == 2 * LR);                  // 8 rows of an ldmatrix 8x8 fall on distinct 16-byte bank groups
    constexpr int NTL = 2 * (C / 16) * (C / 8);   // (product, row tile, column tile) tiles a piece
    auto* Pin = reinterpret_cast<bfloat16*>(T1);  // [C][LP]: dO | dDelta
    auto* Ps = reinterpret_cast<bfloat16*>(T3);   // [C][LP]: S hi | S lo, rows of the piece
    {
      float o8[8] = {}, d8[8];
      if (valid) {
        ld4(static_cast<const T*>(a.dO), cp.in(dm, r, c0), o8);
        ld4(static_cast<const T*>(a.dO), cp.in(dm, r, c1), o8 + 4);
      }
      ld_row8(static_cast<const T*>(ws.dDelta), cp, dm, r, c0, c1, d8);
      st4(Pin, r * LP + c0, o8);
      st4(Pin, r * LP + c1, o8 + 4);
      st4(Pin, r * LP + D + c0, d8);
      st4(Pin, r * LP + D + c1, d8 + 4);
    }
    for (int k0 = 0; k0 < D; k0 += C) {
      if (k0 > 0) copy_h_rows(k0);  // T4 is free: the last piece's split ended with a barrier
      blk.wait_copies();
      blk.sync();  // T4 landed (first piece: Pin written too); T3 free
      KDA_UNROLL
      for (int m = 0; m < C * D / (4 * NTHR); ++m) {
        const int e = tid + m * NTHR;
        const int i = e / (D / 4), v = 4 * (e % (D / 4));
        float x[4];
        lds4(T4 + i * LR + v, x);
        st4_split(Ps, i * LP + v, i * LP + D + v, x);
      }
      blk.sync();  // Ps written; T4 free
      for (int u = warp; u < NTL; u += NW) {
        const int p = u / (NTL / 2), rt = (u % (NTL / 2)) / (C / 8), ct = u % (C / 8);
        const auto* pa = reinterpret_cast<const uint16_t*>(T1);
        const auto* pb = reinterpret_cast<const uint16_t*>(T3);
        float acc[4] = {};
        KDA_UNROLL
        for (int kk = 0; kk < D; kk += 16) {
          uint32_t fa[4], bh[2], bl[2];
          blk.frag_a(fa, pa, LP, 16 * rt, p * D + kk);
          blk.frag_b(bh, pb, LP, kk, 8 * ct);
          blk.frag_b(bl, pb, LP, D + kk, 8 * ct);
          blk.mma_bf16(acc, fa, bh);
          blk.mma_bf16(acc, fa, bl);
        }
        T* dst = static_cast<T*>(p == 0 ? ws.Xq : ws.Xw);
        KDA_UNROLL
        for (int e = 0; e < 4; e += 2) {
          int rr, cc;
          frag_rc(lane, e, rr, cc);
          st2(dst, cp.ws(dm, 16 * rt + rr, k0 + 8 * ct + cc), acc[e], acc[e + 1]);
        }
      }
      blk.sync();  // Ps free; at the end: the stores above precede this block's reads (P1, P5)
    }
  } else if constexpr (kLean) {
    constexpr int KR = C;
    float o8[8] = {}, d8[8];
    if (valid) {
      ld4(static_cast<const T*>(a.dO), cp.in(dm, r, c0), o8);
      ld4(static_cast<const T*>(a.dO), cp.in(dm, r, c1), o8 + 4);
    }
    ld_row8(static_cast<const T*>(ws.dDelta), cp, dm, r, c0, c1, d8);
    sts_row8(T1 + r * LR, c0, c1, o8);
    sts_row8(T3 + r * LR, c0, c1, d8);
    for (int k0 = 0; k0 < D; k0 += KR) {
      if (k0 > 0) copy_h_rows(k0);  // T4 is free: the last piece's product ended with a barrier
      blk.wait_copies();
      blk.sync();
      block_product2<kTC, kSplit, NTHR>(
          blk, C, KR, D, [&](int x, int v) { return T1[x * LR + v]; }, [&](int x, int v) { return T3[x * LR + v]; },
          [&](int v, int k) { return T4[k * LR + v]; },
          [&](int x, int k, float xqv, float xwv) {
            st(static_cast<T*>(ws.Xq), cp.ws(dm, x, k0 + k), xqv);
            st(static_cast<T*>(ws.Xw), cp.ws(dm, x, k0 + k), xwv);
          });
      blk.sync();  // T4 free; at the end: the stores above precede this block's reads (P1, P5)
    }
  }

  // ---- P1: P(k^,k^) (diagonal blocks in registers, off-diagonal through row 16) and
  // dTm = -X_w K~^T diag(beta) ----------------------------------------------------------------------
  {
    float xw[8];
    ld_row8(static_cast<const T*>(ws.Xw), cp, dm, r, c0, c1, xw);
    sts_row8(T1 + r * LR, c0, c1, xw);
  }
  if constexpr (NO > 0) {  // T3 rows < 16: y = k^ e^{Gamma_16 - Gamma_s}; rows >= 16: k^ e^{Gamma_r - Gamma_16}
    float g16[8], x8[8];
    lds_row8(Gs + kSub * LR, c0, c1, g16);
    const float o16 = Ro[kSub];
    KDA_UNROLL
    for (int i = 0; i < 8; ++i)
      x8[i] = kh[i] * exp2_fast(r < kSub ? dlog2(g16[i], o16, gm[i], ro) : dlog2(gm[i], ro, g16[i], o16));
    sts_row8(T3 + r * LR, c0, c1, x8);
  }
  {  // diagonal sub-block of P(k^,k^): s = n0 + m < r
    const int n0 = r & ~(kSub - 1), rr = r - n0;
    float v[kSub];
    KDA_UNROLL
    for (int m = 0; m < kSub; ++m) {
      v[m] = 0.0f;
      if (m < rr) {
        float x[8];
        decayed_key(Kh, Gs, Ro, n0 + m, LR, c0, c1, gm, ro, x);
        KDA_UNROLL
        for (int i = 0; i < 8; ++i) v[m] += kh[i] * x[i];
      }
    }
    reduce_scatter_row<TPR>(blk, v, j);  // lane j: m = PER j, .., PER j + PER - 1
    constexpr int PER = kSub / TPR;
    if constexpr (PER == 2) sts2(Pk + r * LC + n0 + 2 * j, v[0], v[1]);
    else Pk[r * LC + n0 + j] = v[0];
  }
  blk.sync();
  if constexpr (NO > 0) {
    block_product<kTC, kSplit, NTHR>(
        blk, NO, kSub, D, [&](int x, int k) { return T3[(kSub + x) * LR + k]; },
        [&](int k, int s) { return T3[s * LR + k]; }, zero,
        [&](int x, int s, float v) { Pk[(kSub + x) * LC + s] = v; });
  }
  block_product<kTC, kSplit, NTHR>(
      blk, C, C, D, [&](int x, int c) { return T1[x * LR + c]; }, [&](int c, int s) { return T2[s * LR + c]; }, zero,
      [&](int x, int s, float v) { dT[x * LC + s] = s < x ? -be[s] * v : 0.0f; });
  blk.sync();
  // ---- P2: Tm; T1 / T2 are free: the solve's scratch in T1 ----------------------------------------
  {
    float am[CPT];
    KDA_UNROLL
    for (int u = 0; u < CPT; ++u) {
      const int s = CPT * j + u;
      am[u] = s < r ? beta * Pk[r * LC + s] : 0.0f;
    }
    KDA_UNROLL
    for (int u = 0; u < CPT; ++u) dQ[r * LC + CPT * j + u] = am[u];
  }
  blk.sync();
  solve_unit_lower<G>(blk, dQ, Tm, T1);

  // ---- P3: dP_qk = scale dO Delta^T, dTm += dDelta (beta V)^T, Y_U = Tm^T dDelta -> dv, dbeta ------
  float dbeta = 0.0f;  // the row's dbeta (every lane of the row holds it)
  {
    float t8[8] = {};
    if (valid) {
      ld4(static_cast<const T*>(a.dO), cp.in(dm, r, c0), t8);
      ld4(static_cast<const T*>(a.dO), cp.in(dm, r, c1), t8 + 4);
    }
    sts_row8(T1 + r * LR, c0, c1, t8);
    ld_row8(ws.Delta, cp, dm, r, c0, c1, t8);
    sts_row8(T3 + r * LR, c0, c1, t8);
    ld_row8(static_cast<const T*>(ws.dDelta), cp, dm, r, c0, c1, t8);
    sts_row8(T4 + r * LR, c0, c1, t8);
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) t8[i] = beta * vv[i];
    sts_row8(T2 + r * LR, c0, c1, t8);
  }
  blk.sync();
  block_product<kTC, kSplit, NTHR>(
      blk, C, C, D, [&](int x, int c) { return T1[x * LR + c]; }, [&](int c, int s) { return T3[s * LR + c]; }, zero,
      [&](int x, int s, float v) { dQ[x * LC + s] = s <= x ? scale * v : 0.0f; });
  block_product<kTC, kSplit, NTHR>(
      blk, C, C, D, [&](int x, int c) { return T4[x * LR + c]; }, [&](int c, int s) { return T2[s * LR + c]; },
      [&](int x, int s) { return dT[x * LC + s]; }, [&](int x, int s, float v) { dT[x * LC + s] = s < x ? v : 0.0f; });
  blk.sync();
  block_product<kTC, kSplit, NTHR>(  // Y_U into T1 (dO is read)
      blk, C, D, C, [&](int s, int x) { return Tm[x * LC + s]; }, [&](int x, int c) { return T4[x * LR + c]; }, zero,
      Overload{[&](int s, int c, float v) { T1[s * LR + c] = v; },
               [&](int s, int c, float v0, float v1) { sts2(T1 + s * LR + c, v0, v1); }});
  blk.sync();
  {
    float yu[8], dv[8], p = 0.0f;
    lds_row8(T1 + r * LR, c0, c1, yu);
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) {
      dv[i] = beta * yu[i];
      p += yu[i] * vv[i];
    }
    if (valid) {
      st4(static_cast<T*>(a.dv), cp.in(dm, r, c0), dv);
      st4(static_cast<T*>(a.dv), cp.in(dm, r, c1), dv + 4);
    }
    dbeta += sum_row<TPR>(blk, p);
  }
  // ---- P4: dA = -Tm^T dTm Tm^T (strict lower), dbeta, dP_kk; Zc in T3 (Delta is read) ---------------
  float* Zc = T3;
  block_product<kTC, kSplit, NTHR>(
      blk, C, C, C, [&](int m, int c) { return dT[m * LC + c]; }, [&](int c, int s) { return Tm[s * LC + c]; }, zero,
      [&](int m, int s, float v) { Zc[m * LC + s] = v; });
  blk.sync();
  block_product<kTC, kSplit, NTHR>(
      blk, C, C, C, [&](int x, int m) { return Tm[m * LC + x]; }, [&](int m, int s) { return Zc[m * LC + s]; }, zero,
      [&](int x, int s, float v) { dT[x * LC + s] = s < x ? -v : 0.0f; });
  blk.sync();
  {
    float p = 0.0f, dp[CPT];
    KDA_UNROLL
    for (int u = 0; u < CPT; ++u) {
      const int s = CPT * j + u;
      const float da = dT[r * LC + s];  // 0 for s >= r
      p += s < r ? da * Pk[r * LC + s] : 0.0f;
      dp[u] = beta * da;
    }
    KDA_UNROLL
    for (int u = 0; u < CPT; ++u) dT[r * LC + CPT * j + u] = dp[u];
    dbeta += sum_row<TPR>(blk, p);
  }
  // ---- P5: Y_W = -Tm^T X_w; the P adjoints' off-diagonal products through row 16 --------------------
  {
    float xw[8];
    ld_row8(static_cast<const T*>(ws.Xw), cp, dm, r, c0, c1, xw);
    sts_row8(T1 + r * LR, c0, c1, xw);
  }
  if constexpr (NO > 0) {  // T3 rows < 16: y = k^ e^{Gamma_16 - Gamma_s}; T3 / T4 rows >= 16: q^ / k^ to row 16
    float g16[8], x8[8], y8[8];
    lds_row8(Gs + kSub * LR, c0, c1, g16);
    const float o16 = Ro[kSub];
    if (r < kSub) {
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) x8[i] = kh[i] * exp2_fast(dlog2(g16[i], o16, gm[i], ro));
      sts_row8(T3 + r * LR, c0, c1, x8);
    } else {
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) {
        const float f = exp2_fast(dlog2(gm[i], ro, g16[i], o16));
        x8[i] = qh[i] * f;
        y8[i] = kh[i] * f;
      }
      sts_row8(T3 + r * LR, c0, c1, x8);
      sts_row8(T4 + r * LR, c0, c1, y8);
    }
  }
  blk.sync();                        // dP_kk, X_w and the operands above written
  block_product<kTC, kSplit, NTHR>(  // Y_W into T2
      blk, C, D, C, [&](int s, int x) { return Tm[x * LC + s]; }, [&](int x, int c) { return T1[x * LR + c]; }, zero,
      Overload{[&](int s, int c, float v) { T2[s * LR + c] = -v; },
               [&](int s, int c, float v0, float v1) { sts2(T2 + s * LR + c, -v0, -v1); }});
  if constexpr (NO > 0) {
    // rows x >= 16: sum_{s<16} dP[x][s] y_s (T5 rows 0..15: q terms, 16..31: k terms)
    block_product2<kTC, kSplit, NTHR>(
        blk, NO, D, kSub, [&](int x, int s) { return dQ[(kSub + x) * LC + s]; },
        [&](int x, int s) { return dT[(kSub + x) * LC + s]; }, [&](int s, int c) { return T3[s * LR + c]; },
        [&](int x, int c, float vq, float vk) {
          T5[x * LR + c] = vq;
          T5[(kSub + x) * LR + c] = vk;
        });
    // columns x < 16 against the rows of sub-block 1 (K = 32: q terms, then k terms), into T4 rows 0..15
    block_product<kTC, kSplit, NTHR>(
        blk, kSub, D, 2 * kSub, [&](int x, int k) { return k < kSub ? dQ[(kSub + k) * LC + x] : dT[k * LC + x]; },
        [&](int k, int c) { return k < kSub ? T3[(kSub + k) * LR + c] : T4[k * LR + c]; }, zero,
        Overload{[&](int x, int c, float v) { T4[x * LR + c] = v; },
                 [&](int x, int c, float v0, float v1) { sts2(T4 + x * LR + c, v0, v1); }});
  }
  blk.sync();

  // ---- P5, row-owned: the gradient terms of row r over its 8 columns ---------------------------------
  float DQ[8], DK[8], dG[8], cs[8];  // cs: this row's X_k k^ e^{gamma - Gamma} (dgamma's column sum)
  {
    float gl[8], yw[8], xq[8], xk[8];
    lds_row8(Gs + (C - 1) * LR, c0, c1, gl);
    const float ol = Ro[C - 1];
    lds_row8(T2 + r * LR, c0, c1, yw);
    ld_row8(static_cast<const T*>(ws.Xq), cp, dm, r, c0, c1, xq);
    ld_row8(ws.Xk, cp, dm, r, c0, c1, xk);
    float p = 0.0f;
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) {
      const float eg = exp2_fast(gm[i] + ro);
      const float kt = kh[i] * eg;
      const float t = beta * yw[i];
      DK[i] = t * eg;
      dG[i] = t * kt;
      p += yw[i] * kt;
      DQ[i] = scale * xq[i] * eg;  // dQ~ = scale X_q
      dG[i] += DQ[i] * qh[i];
      const float kb = xk[i] * exp2_fast(dlog2(gl[i], ol, gm[i], ro));  // X_k = dKbar
      DK[i] += kb;
      dG[i] -= kb * kh[i];
      cs[i] = kb * kh[i];
    }
    dbeta += sum_row<TPR>(blk, p);
  }
  {  // diagonal sub-block: row terms (s <= r) and column terms (x = r against rows r' >= r)
    const int n0 = r & ~(kSub - 1);
    float rqs[8] = {}, rks[8] = {}, cc[8] = {};
    for (int s = n0; s <= r; ++s) {
      const float pq = dQ[r * LC + s], pk = dT[r * LC + s];  // dT[r][r] = 0
      float x[8];
      decayed_key(Kh, Gs, Ro, s, LR, c0, c1, gm, ro, x);
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) {
        rqs[i] += pq * x[i];
        rks[i] += pk * x[i];
      }
    }
    for (int rp = r; rp < n0 + kSub; ++rp) {
      const float pq = dQ[rp * LC + r], pk = dT[rp * LC + r];
      float qs[8], ks[8], gsv[8];
      lds_row8(Qh + rp * LR, c0, c1, qs);
      lds_row8(Kh + rp * LR, c0, c1, ks);
      lds_row8(Gs + rp * LR, c0, c1, gsv);
      const float op = Ro[rp];
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) cc[i] += (pq * qs[i] + pk * ks[i]) * exp2_fast(dlog2(gsv[i], op, gm[i], ro));
    }
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) {
      DQ[i] += rqs[i];
      DK[i] += rks[i] + cc[i];
      dG[i] += qh[i] * rqs[i] + kh[i] * rks[i] - kh[i] * cc[i];
    }
  }
  if constexpr (NO > 0) {  // the off-diagonal products, brought from row 16 to row r
    float g16[8], t8[8];
    lds_row8(Gs + kSub * LR, c0, c1, g16);
    const float o16 = Ro[kSub];
    if (r >= kSub) {
      float u8[8];
      lds_row8(T5 + (r - kSub) * LR, c0, c1, t8);
      lds_row8(T5 + r * LR, c0, c1, u8);
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) {
        const float fr = exp2_fast(dlog2(gm[i], ro, g16[i], o16));
        const float xq = t8[i] * fr, xk = u8[i] * fr;
        DQ[i] += xq;
        DK[i] += xk;
        dG[i] += qh[i] * xq + kh[i] * xk;
      }
    } else {
      lds_row8(T4 + r * LR, c0, c1, t8);
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) {
        const float x = t8[i] * exp2_fast(dlog2(g16[i], o16, gm[i], ro));  // e^{Gamma_16 - Gamma_r} <= 1
        DK[i] += x;
        dG[i] -= kh[i] * x;
      }
    }
  }
  // ---- dgamma (dgamma_s + the column sums of cs) lands on every row of dG's reverse cumsum --------
  {
    float tot[8], suf[8] = {}, ct[8];
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) {
      tot[i] = dG[i];
      ct[i] = cs[i];
    }
    KDA_UNROLL
    for (int o = TPR; o < 32; o <<= 1) {
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) {
        const float t = blk.shfl_xor(tot[i], o);
        if (!(lane & o)) suf[i] += t;  // the partner's rows come later
        tot[i] += t;
        ct[i] += blk.shfl_xor(ct[i], o);
      }
    }
    if (lane < TPR) {
      sts_row8(Wt + warp * D, c0, c1, tot);
      sts_row8(Wt2 + warp * D, c0, c1, ct);
    }
    blk.sync();
    float dgs[8];
    ld4(ws.dgamma_s, cp.gam(dm, c0), dgs);
    ld4(ws.dgamma_s, cp.gam(dm, c1), dgs + 4);
    for (int w = 0; w < NW; ++w) {
      float t[8], u[8];
      lds_row8(Wt + w * D, c0, c1, t);
      lds_row8(Wt2 + w * D, c0, c1, u);
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) {
        if (w > warp) suf[i] += t[i];
        dgs[i] += u[i];
      }
    }
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) dG[i] += suf[i] + dgs[i];
  }
  // ---- df, dA_log and ddt_bias partials, dq / dk through the L2 norm, db ----------------------------
  float dA_acc = 0.0f;
  {
    float df[8], dd[8], pq = 0.0f, pk = 0.0f;
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) {
      df[i] = dG[i] * gx[i];
      dd[i] = df[i];
      dA_acc += dG[i] * ga[i];
      pq += DQ[i] * qh[i];
      pk += DK[i] * kh[i];
    }
    pq = sum_row<TPR>(blk, pq);
    pk = sum_row<TPR>(blk, pk);
    float oq[8], ok[8];
    KDA_UNROLL
    for (int i = 0; i < 8; ++i) {
      oq[i] = rq * (DQ[i] - pq * qh[i]);
      ok[i] = rk * (DK[i] - pk * kh[i]);
    }
    if (valid) {
      const int64_t i0 = cp.in(dm, r, c0), i1 = cp.in(dm, r, c1);
      st4(static_cast<T*>(a.df), i0, df);
      st4(static_cast<T*>(a.df), i1, df + 4);
      st4(static_cast<T*>(a.dq), i0, oq);
      st4(static_cast<T*>(a.dq), i1, oq + 4);
      st4(static_cast<T*>(a.dk), i0, ok);
      st4(static_cast<T*>(a.dk), i1, ok + 4);
      if (j == 0) st(static_cast<T*>(a.db), cp.in_row(dm, r), dbeta * beta * (1.0f - beta));
    }
    // ddt_bias partial: the column sums of dG gx over the chunk's rows
    KDA_UNROLL
    for (int o = TPR; o < 32; o <<= 1) {
      KDA_UNROLL
      for (int i = 0; i < 8; ++i) dd[i] += blk.shfl_xor(dd[i], o);
    }
    blk.sync();  // Wt's readers above are done
    if (lane < TPR) sts_row8(Wt + warp * D, c0, c1, dd);
  }
  // ---- P7: dA_log / ddt_bias partials, last block of the head reduces ---------------------------------
  {
    const float wsum = blk.warp_sum(dA_acc);
    if (lane == 0) red[warp] = wsum;
    blk.sync();
    const int64_t prow = (cp.b * dm.NT() + n) * dm.H + cp.h;  // [B*NT, H, D+1]
    float* mine = ws.partials + prow * (D + 1);
    if (tid < D) {
      float s = 0.0f;
      for (int w = 0; w < NW; ++w) s += Wt[w * D + tid];
      mine[tid] = s;
    }
    if (tid == 0) {
      float s = 0.0f;
      for (int w = 0; w < NW; ++w) s += red[w];
      mine[D] = s;
    }
    reduce_gate_partials<D, NTHR>(blk, a, ws, cp, red + NW);
  }
  // Chunk 0 is the scan's last: its blocks end after the scan's grid has completed, so this
  // grid completes after it (a launch that follows waits for this grid alone).
  if (n == 0) blk.wait_prior_grid();
}

}  // namespace lt::kda::KDA_BLOCKS_NS
