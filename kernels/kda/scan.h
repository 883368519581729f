// KDA inter (forward state scan): one block per (b, h, V tile of BV columns), sequential over
// chunks; or the two-level scan (FusedArgs::fwd_group), whose roles and grid are below
// (overview: kernels/kda_blocks.h).
#pragma once

#include "kernels/kda/chunk_ops.h"

namespace lt::kda::KDA_BLOCKS_NS {

// What a scan block computes over chunks [lo, hi) (one group of the two-level scan, or all):
//   full       S from its start (h0, or the group's start state in h[lo]): h[n], O, ht at the end
//   group_map  2 BV state columns at once, sharing each chunk's W, Kbar and gamma tiles:
//              [0, BV)   local: S from 0 with U as given, the group's own contribution to the
//                        state after it
//              [BV, 2BV) transition: S from the identity's columns v0.. with U = 0, those
//                        columns of the group's transition M_g (S after the group = M_g S
//                        before + local), since with U = 0 the step S <- (diag e^gamma -
//                        Kbar^T W) S is linear
// group_map forms Delta = U - W S and the S update only (no Qp, Ob, O, h[n]) and leaves S in
// rows of h not yet written (local: h[hi], transition: h[lo + 1]; why these:
// kernels/kda/block_products.h, fwd_groups).
// full saves each chunk's Delta = U - W h[n] over its rows of U once it has read them (the
// backward reads Delta, never U; group_map's Delta starts from a group-local state, so it
// saves nothing, and every full block of a group starts after that group's group_map blocks).
enum class ScanRole { full, group_map };

// The two-level forward scan (FusedArgs::fwd_group): its layout, counters and stash are
// described in kernels/kda/block_products.h (fwd_groups and below).

// ======================================================================================
// inter (forward state scan), one block per (b, h, V tile of BV columns), over chunks [lo, hi)
// (-1: to NT) in the role kRole (ScanRole above).
// kTC: the products per chunk on tensor cores (mma_acc); else fp32 CUDA cores.
// ======================================================================================
template <class G, class T, bool kTC, ScanRole kRole = ScanRole::full, class Blk>
KDA_DEV void inter_program(const FusedArgs& a, const ForwardWorkspace& ws, Blk& blk, int64_t bh, int vt, float* smem,
                           int64_t lo = 0, int64_t hi = -1) {
  const Dims& dm = a.dims;
  constexpr int C = G::C, D = G::D, BV = G::BV, LDA = G::LDA, LBV = G::LBV, NT_ = G::NTHR_I;
  constexpr bool kSplit = std::is_same_v<T, float>;
  constexpr bool kO = kRole == ScanRole::full;  // O, h[n] and ht
  static_assert(kO || kTC, "the two-level scan is tensor-core only");
  constexpr int BW = kO ? BV : 2 * BV, LBW = kO ? LBV : G::LBV2;  // state columns, their row stride
  const int64_t NT = dm.NT(), Tp = dm.Tp();
  if (hi < 0) hi = NT;
  const int v0 = vt * BV;
  T* o = static_cast<T*>(a.o);
  float* Ws = smem;          // [C][LDA] W
  float* Qs = Ws + C * LDA;  // [C][LDA] Qp
  float* Ks = Qs + C * LDA;  // [C][LDA] Kbar
  float* Us = Ks + C * LDA;  // [C][LBV] U
  float* Os = Us + C * LBV;  // [C][LBV] Ob
  float* Ds = Os + C * LBV;  // [C][LBW] Delta
  float* S = Ds + C * LBW;   // [D][LBW] state tile
  float* eg = S + D * LBW;   // [D] e^gamma
  const int tid = blk.tid();
  const int lane = tid & 31, warp = tid >> 5;

  if (kO && lo > 0) {  // the chain's state, 16 bytes a copy, all in flight at once
    for (int e = tid; e < D * BV / 4; e += NT_) {
      const int i = e / (BV / 4), jj = (e % (BV / 4)) * 4;
      blk.copy16_async(S + i * LBW + jj, fwd_state_at(a, bh, lo, i, v0 + jj));
    }
    blk.wait_copies();
  } else {
    for (int e = tid; e < D * BW; e += NT_) {
      const int i = e / BW, jj = e % BW;
      if constexpr (!kO) S[i * LBW + jj] = jj >= BV && i == v0 + jj - BV ? 1.0f : 0.0f;
      else S[i * LBW + jj] = a.h0 ? a.h0[(bh * D + i) * D + v0 + jj] : 0.0f;
    }
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
      if constexpr (kO) ld2(static_cast<const T*>(ws.Qp), gi, pQ[2 * m], pQ[2 * m + 1]);
      ld2(ws.Kbar, gi, pK[2 * m], pK[2 * m + 1]);
    }
    KDA_UNROLL
    for (int m = 0; m < MB / 2; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int r = e / BV, jj = e % BV;
      const int64_t gi = (row0 + r) * D + v0 + jj;
      ld2(ws.U, gi, pU[2 * m], pU[2 * m + 1]);
      if constexpr (kO) ld2(static_cast<const T*>(ws.Ob), gi, pO[2 * m], pO[2 * m + 1]);
    }
    if (tid < D) pE = ws.gamma[(bh * NT + n) * D + tid];
  };
  if (kPrefetch) fetch(lo);
  for (int64_t n = lo; n < hi; ++n) {
    const int64_t t0 = n * C;
    if (!kPrefetch) fetch(n);
    KDA_UNROLL
    for (int m = 0; m < MA / 2; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int r = e / D, i = e % D;
      sts2(Ws + r * LDA + i, pW[2 * m], pW[2 * m + 1]);
      if constexpr (kO) sts2(Qs + r * LDA + i, pQ[2 * m], pQ[2 * m + 1]);
      sts2(Ks + r * LDA + i, pK[2 * m], pK[2 * m + 1]);
    }
    KDA_UNROLL
    for (int m = 0; m < MB / 2; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int r = e / BV, jj = e % BV;
      sts2(Us + r * LBV + jj, pU[2 * m], pU[2 * m + 1]);
      if constexpr (kO) sts2(Os + r * LBV + jj, pO[2 * m], pO[2 * m + 1]);
    }
    if (tid < D) eg[tid] = expf(pE);
    if (kPrefetch && n + 1 < hi) fetch(n + 1);
    blk.sync();  // S of the previous step complete, tiles stored
    if constexpr (kO)
      for (int e = tid; e < D * BV / 4; e += NT_) {  // 4 columns a thread: one 128-bit store
        const int i = e / (BV / 4), jj = (e % (BV / 4)) * 4;
        copy4(a.h + ((bh * NT + n) * D + i) * D + v0 + jj, S + i * LBW + jj);
      }
    if constexpr (kTC) {
      // Delta = U - W S, O = Ob + Qp S: 16x8 tiles of [C x BV]; a warp takes a group of NG1
      // adjacent tiles of one row block, so each W / Qp fragment it loads serves NG1 tiles
      // (the step is bound by shared-memory loads: docs/notes-kda.md, "the forward scan's
      // products in tile groups"). Pairs where the pairs still give every
      // warp a group (D64 C64, D128 C64), else one tile. Each tile's sum is formed as with one
      // tile a warp: the same operands, the same k order (bit-identical).
      // (group_map: W S alone, over its 2 BV columns)
      constexpr int NTN = BW / 8, NG1 = (C / 16) * (NTN / 2) >= NT_ / 32 ? 2 : 1, NGRP = (C / 16) * (NTN / NG1);
      constexpr int NA = kO ? 2 : 1;
      for (int gi = warp; gi < NGRP; gi += NT_ / 32) {
        const int m0 = (gi / (NTN / NG1)) * 16, n0 = (gi % (NTN / NG1)) * 8 * NG1;
        float acc[NA * NG1 * 4];  // [W S | Qp S][u][e]: tile (i, u) at acc + 4 (i NG1 + u)
        for_group_frags<NG1>(lane, m0, n0, [&](int u, int e, int r, int c) {
          acc[4 * u + e] = 0.0f;
          if constexpr (kO) acc[4 * (NG1 + u) + e] = Os[r * LBV + c];
        });
        mma_acc_block<kSplit, NA, NG1>(
            blk, acc, D, [&](int i, int r, int k) { return (i == 0 ? Ws : Qs)[(m0 + r) * LDA + k]; },
            [&](int u, int k, int c) { return S[k * LBW + n0 + 8 * u + c]; });
        KDA_UNROLL
        for (int u = 0; u < NG1; ++u) {
          const float* ws_ = acc + 4 * u;
          for (int e = 0; e < 4; e += 2) {  // columns c, c + 1 of row r
            int r, c;
            frag_rc(lane, e, r, c);
            const int j = n0 + 8 * u + c;
            // U's columns, and U = 0 on the transition's (j, j + 1 on one side: BV is even)
            const bool u_col = kO || j < BV;
            const float d0 = (u_col ? Us[(m0 + r) * LBV + j] : 0.0f) - ws_[e];
            const float d1 = (u_col ? Us[(m0 + r) * LBV + j + 1] : 0.0f) - ws_[e + 1];
            Ds[(m0 + r) * LBW + j] = d0;
            Ds[(m0 + r) * LBW + j + 1] = d1;
            if constexpr (kO) {
              st2(ws.U, (bh * Tp + t0 + m0 + r) * D + v0 + j, d0, d1);  // Delta saved over U
              const float* oo = acc + 4 * (NA - 1) * NG1 + 4 * u;
              if (t0 + m0 + r < dm.T) st2(o, ((b * dm.T + t0 + m0 + r) * dm.H + h) * D + v0 + j, oo[e], oo[e + 1]);
            }
          }
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
          if constexpr (kO) oo[m] += Qs[(rg + m * RG) * LDA + i] * sv;
        }
      }
      KDA_UNROLL
      for (int m = 0; m < RM; ++m) {
        const int r = rg + m * RG;
        Ds[r * LBV + j] = dl[m];
        st(ws.U, (bh * Tp + t0 + r) * D + v0 + j, dl[m]);  // Delta saved over U
        if constexpr (kO)
          if (t0 + r < dm.T) st(o, ((b * dm.T + t0 + r) * dm.H + h) * D + v0 + j, oo[m]);
      }
    }
    blk.sync();  // Delta complete; everybody done reading S
    if constexpr (kTC) {
      // S <- e^gamma S + Kbar^T Delta: 16x8 tiles of [D x BW]; each warp owns its tiles of S,
      // in groups of up to 4 tiles of one row block where the row blocks give every warp a
      // group (one Kbar^T fragment load serves NG2 tiles; each tile's sum formed as with one
      // tile a warp)
      constexpr int NTN = BW / 8, NG2 = D / 16 >= NT_ / 32 ? (NTN < 4 ? NTN : 4) : 1, NGRP = (D / 16) * (NTN / NG2);
      for (int gi = warp; gi < NGRP; gi += NT_ / 32) {
        const int m0 = (gi / (NTN / NG2)) * 16, n0 = (gi % (NTN / NG2)) * 8 * NG2;
        float acc[NG2 * 4];  // tile u at acc + 4 u
        for_group_frags<NG2>(lane, m0, n0,
                             [&](int u, int e, int r, int c) { acc[4 * u + e] = eg[r] * S[r * LBW + c]; });
        mma_acc_block<kSplit, 1, NG2>(
            blk, acc, C, [&](int, int r, int k) { return Ks[k * LDA + m0 + r]; },
            [&](int u, int k, int c) { return Ds[k * LBW + n0 + 8 * u + c]; });
        for_group_frags<NG2>(lane, m0, n0, [&](int u, int e, int r, int c) { S[r * LBW + c] = acc[4 * u + e]; });
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
  if constexpr (kO) {
    if (a.ht && hi == NT)
      for (int e = tid; e < D * BV; e += NT_) {
        const int i = e / BV, jj = e % BV;
        a.ht[(bh * D + i) * D + v0 + jj] = S[i * LBW + jj];
      }
  } else {  // the stash: local_g (columns < BV) into h[hi], M_g's columns (>= BV) into h[lo + 1]
    for (int e = tid; e < D * BW; e += NT_) {
      const int i = e / BW, jj = e % BW;
      *fwd_state_at(a, bh, jj < BV ? hi : lo + 1, i, v0 + jj % BV) = S[i * LBW + jj];
    }
  }
}

// ======================================================================================
// The two-level forward scan's chain for sequence bh, V tile vt: for each group g < NG - 1 in
// order, S entering g + 1 = M_g S entering g + local_g (columns v0.. of each), into h[hi_g]
// over local_g; chain_done(bh, g) is raised after each. One block carries the whole chain, so
// the state stays in shared memory and no step waits for a block to start. It waits for each
// group's first level (one thread, then a block barrier); the full scans of group g wait for
// its step g, so M_g in h[lo_g + 1] is read before they overwrite it. Shared memory:
// Cfg::kChainFloats.
// ======================================================================================
template <class G, class T, class Blk>
KDA_DEV void state_chain_program(const FusedArgs& a, const ForwardWorkspace& ws, Blk& blk, int64_t bh, int vt,
                                 float* smem) {
  const Dims& dm = a.dims;
  constexpr int D = G::D, BV = G::BV, LDA = G::LDA, LBV = G::LBV, NT_ = G::NTHR_I;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const int v0 = vt * BV, tid = blk.tid(), lane = tid & 31, warp = tid >> 5;
  const int64_t NG = fwd_groups(a);
  float* Ms = smem;          // [D][LDA] M_g
  float* Sp = Ms + D * LDA;  // [D][LBV] S entering g, columns v0..
  float* Sn = Sp + D * LBV;  // [D][LBV] S entering g + 1
  for (int e = tid; e < D * BV; e += NT_) {
    const int i = e / BV, jj = e % BV;
    Sp[i * LBV + jj] = a.h0 ? a.h0[(bh * D + i) * D + v0 + jj] : 0.0f;
  }
  for (int64_t g = 0; g + 1 < NG; ++g) {
    int64_t lo, hi;
    fwd_group_range(a, g, lo, hi);
    if (tid == 0) blk.wait_progress(fwd_level1_done(ws, dm, bh, g), G::NV);
    blk.sync();                                   // also: Sp complete, Ms free
    for (int e = tid; e < D * D / 4; e += NT_) {  // 16 bytes a copy, all in flight at once
      const int i = e / (D / 4), k = (e % (D / 4)) * 4;
      blk.copy16_async(Ms + i * LDA + k, fwd_state_at(a, bh, lo + 1, i, k));
    }
    blk.wait_copies();
    blk.sync();
    // [D x BV] in 16x8 tiles, the NG2 tiles of a row block a warp (as the scan's S update)
    constexpr int NTN = BV / 8, NG2 = D / 16 >= NT_ / 32 ? NTN : 1, NGRP = (D / 16) * (NTN / NG2);
    for (int gi = warp; gi < NGRP; gi += NT_ / 32) {
      const int m0 = (gi / (NTN / NG2)) * 16, n0 = (gi % (NTN / NG2)) * 8 * NG2;
      float acc[NG2 * 4];
      for_group_frags<NG2>(lane, m0, n0, [&](int u, int e, int r, int c) {
        acc[4 * u + e] = blk.load_cg(fwd_state_at(a, bh, hi, r, v0 + c));  // local_g
      });
      mma_acc_block<kSplit, 1, NG2>(
          blk, acc, D, [&](int, int r, int k) { return Ms[(m0 + r) * LDA + k]; },
          [&](int u, int k, int c) { return Sp[k * LBV + n0 + 8 * u + c]; });
      for_group_frags<NG2>(lane, m0, n0, [&](int u, int e, int r, int c) {
        *fwd_state_at(a, bh, hi, r, v0 + c) = acc[4 * u + e];
        Sn[r * LBV + c] = acc[4 * u + e];
      });
    }
    blk.sync();
    if (tid == 0) blk.publish(fwd_chain_done(ws, dm, bh, g));
    float* t = Sp;
    Sp = Sn;
    Sn = t;
  }
}

// The two-level forward scan's grid (fwd_two_level_blocks items): work item j (the block's
// ticket) of
//   [first level: groups g < NG - 1, then bh, then V tiles: group_map blocks]
//   [chains: bh, then V tiles]
//   [full scans: groups, then bh, then V tiles]
// so every item waits only on items before it.
template <class G, class T, class Blk>
KDA_DEV void forward_scan_item(const FusedArgs& a, const ForwardWorkspace& ws, Blk& blk, int64_t j, float* smem) {
  constexpr int NV = G::NV;
  const int64_t BH = a.dims.B * a.dims.H, NG = fwd_groups(a), per = BH * NV, L1 = (NG - 1) * per;
  int64_t lo, hi;
  if (j < L1) {
    const int64_t g = j / per, bh = (j % per) / NV;
    fwd_group_range(a, g, lo, hi);
    inter_program<G, T, true, ScanRole::group_map>(a, ws, blk, bh, static_cast<int>(j % NV), smem, lo, hi);
    blk.sync();  // every thread's stash stores issued
    if (blk.tid() == 0) blk.publish(fwd_level1_done(ws, a.dims, bh, g));
    return;
  }
  j -= L1;
  if (j < per) {
    state_chain_program<G, T>(a, ws, blk, j / NV, static_cast<int>(j % NV), smem);
    return;
  }
  j -= per;
  const int64_t g = j / per, bh = (j % per) / NV;
  if (blk.tid() == 0) blk.wait_progress(fwd_chain_done(ws, a.dims, bh, g < NG - 1 ? g : g - 1), NV);
  blk.sync();
  fwd_group_range(a, g, lo, hi);
  inter_program<G, T, true>(a, ws, blk, bh, static_cast<int>(j % NV), smem, lo, hi);
}

}  // namespace lt::kda::KDA_BLOCKS_NS
