// KDA block programs: the chunk-parallel programs' shared building blocks (gates, normalisation,
// the UT solve, the state products) and the masks of the block products.
#pragma once
#include "kernels/kda/reductions.h"

namespace lt::kda::KDA_BLOCKS_NS {

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
// in gs; a packed document's first token adds kSegmentStartGate to its g (FusedArgs::seg_start).
// Optional gx / ga receive dg/dx and dg/dA_log (0 on rows >= L); optional xq / xk receive q^ / k^
// brought to their sub-block's first row, x'_r = x_r e^{Gamma_r - Gamma_n(r)} (needs sq / sk).
// Ends with a sync.
template <class G, class T, class Blk>
KDA_DEV void load_qk_gate_slice(Blk& blk, const FusedArgs& a, const ChunkPos& cp, int k0, const float* rq,
                                const float* rk, float* sq, float* sk, float* gs, float* gx, float* ga,
                                float* xq = nullptr, float* xk = nullptr) {
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
    float restart = 0.0f;
    if (r < cp.L) {
      if (a.seg_start != nullptr && a.seg_start[cp.b * a.dims.T + cp.t0 + r] != 0) restart = kSegmentStartGate;
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
      gs[at] = (gv[u].g + restart) * kLog2e;
      if (gx) gx[at] = gv[u].dgdx;
      if (ga) ga[at] = gv[u].dgda;
    }
  }
  blk.sync();
  if (xq || xk) scan_columns<G, true>(blk, gs, sq, sk, xq, xk);
  else scan_columns<G, false>(blk, gs, nullptr, nullptr, nullptr, nullptr);
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

// x'_r = x_r e^{Gamma_r - Gamma_n(r)} with n(r) the first row of r's sub-block, as a pass of
// its own (load_qk_gate_slice forms it in the gate's scan pass with fewer loads, where the
// program's registers allow). No sync.
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
// xq, xk = q^, k^ brought to their sub-block's first row (load_qk_gate_slice); y is scratch for C-16 rows.
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

// The intra adjoint's last step: once this block's row of ws.partials ([B*NT, H, D+1]: the
// ddt_bias partials, then dA_log's) is written, the block counts itself done, and the block that
// finishes head h last sums every row of the head in a fixed order (deterministic; double: B*NT
// terms, free) into ddt_bias and dA_log. flag: one float of shared memory. Every thread calls it.
template <int D, int NTHR, class Blk>
KDA_DEV void reduce_gate_partials(Blk& blk, const FusedArgs& a, const BackwardWorkspace& ws, const ChunkPos& cp,
                                  float* flag) {
  const Dims& dm = a.dims;
  blk.fence();  // every writer publishes its partials before the block counts itself done
  blk.sync();
  if (blk.tid() == 0) {
    const uint32_t done = blk.arrive(&ws.counters[cp.h]);
    *flag = done == static_cast<uint32_t>(dm.B * dm.NT() - 1) ? 1.0f : 0.0f;
  }
  blk.sync();
  if (*flag != 0.0f) {
    blk.acquire();
    const int64_t rows = dm.B * dm.NT();
    for (int d = blk.tid(); d <= D; d += NTHR) {
      double s = 0.0;
      for (int64_t pr = 0; pr < rows; ++pr) s += blk.load_cg(ws.partials + (pr * dm.H + cp.h) * (D + 1) + d);
      if (d < D) a.ddt_bias[cp.h * D + d] = static_cast<float>(s);
      else a.dA_log[cp.h] = static_cast<float>(s);
    }
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
