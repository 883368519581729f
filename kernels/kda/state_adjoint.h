// KDA two-level backward scan, first level: the adjoint state S' alone, one block per (b, h,
// V tile of 16 columns), reverse over all chunks (ScanFirst::serial), or every group's adjoint
// map at once and a chain across the groups (ScanFirst::affine); S' at every group boundary goes
// to the second level (inter_adjoint_program over one group; where it is kept: scan_state_at)
// (overview: kernels/kda_blocks.h; FusedArgs::scan_group, FusedArgs::scan_first).
#pragma once

#include "kernels/kda/chunk_ops.h"

namespace lt::kda::KDA_BLOCKS_NS {

// The S' update's products at bf16 inputs on tensor cores, acc (NB 16x8 tiles at rows m0,
// columns n0 + 8 u) += (scale Q~)^T dO - W^T dDelta over rows [k0, k0 + K) of bf16 tiles: the A
// operands stored K x M (scale Q~ at qa, -W at wa, row stride lda), the B operands K x N (dO at
// ob, dDelta rounded to bf16 as it is stored at db, row stride ldb). Every operand is then a bf16
// value (dDelta: the one the intra adjoint reads), so this is exact where TF32 was, and each k
// step of 16 is two m16n8k16 a tile, Q~ then W, from ldmatrix fragments. Every scan form (one
// block, split, two-level) calls it in this order, so their S' stay bit-identical.
template <int NB, class Blk>
KDA_DEV void state_update_bf16(Blk& blk, float* acc, const bfloat16* qa, const bfloat16* wa, int lda,
                               const bfloat16* ob, const bfloat16* db, int ldb, int m0, int n0, int k0, int K) {
  const auto* q = reinterpret_cast<const uint16_t*>(qa);
  const auto* w = reinterpret_cast<const uint16_t*>(wa);
  const auto* o = reinterpret_cast<const uint16_t*>(ob);
  const auto* d = reinterpret_cast<const uint16_t*>(db);
  KDA_UNROLL
  for (int kk = k0; kk < k0 + K; kk += 16) {
    uint32_t aq[4], aw[4];
    blk.frag_a_t(aq, q, lda, m0, kk);
    blk.frag_a_t(aw, w, lda, m0, kk);
    KDA_UNROLL
    for (int u = 0; u < NB; ++u) {
      uint32_t bo[2], bd[2];
      blk.frag_b_t(bo, o, ldb, kk, n0 + 8 * u);
      blk.frag_b_t(bd, d, ldb, kk, n0 + 8 * u);
      float(&t)[4] = *reinterpret_cast<float(*)[4]>(acc + 4 * u);
      blk.mma_bf16(t, aq, bo);
      blk.mma_bf16(t, aw, bd);
    }
  }
}

// Column j of S' depends on column j of A_qk^T dO and dO only:
//   dDelta = A_qk^T dO + Kbar S',   S' <- e^gamma S' + (scale Q~)^T dO - W^T dDelta,
// so a block owns BV columns and needs no exchange. It runs in the second level's grid (the
// same block size) and forms every product as the one-block scan does, tile by tile in the same
// k order (dDelta over K = D from 0; the S' sum over the chunk's row blocks of RB rows, Q~ then W
// a block), so the boundary states are bit-identical to that scan's.
template <class G>
struct StateAdjCfg {
  static constexpr int D = G::D, C = G::C, RB = G::RB, NTHR = G::NTHR_A, NW = NTHR / 32;
  static constexpr int BV = 16, NV = D / BV;
  static constexpr int LD = G::LDA;                 // D-wide rows: (g, t) and transposed (t, g) reads conflict-free
  static constexpr int LB = BV + 8;                 // BV-wide rows: (k = t, n = g) B-fragment reads conflict-free
  static constexpr int TD = (C / 16) * (BV / 8);    // dDelta tiles (16x8), one a warp
  static constexpr int TS = (D / 16) * (BV / 8);    // S' tiles
  static constexpr int TW = TS > NW ? TS / NW : 1;  // S' tiles a warp (one row of tiles: BV / 8)
  static constexpr int MA = C * D / (2 * NTHR);     // D-wide row pairs a thread loads
  static constexpr int MB = (C * BV / 2 + NTHR - 1) / NTHR;  // BV-wide row pairs (guarded)
  static_assert(TD <= NW && TS % TW == 0 && TS / TW <= NW && (TW == 1 || TW == BV / 8));
  static_assert((C * D) % (2 * NTHR) == 0 && NTHR >= D && C % RB == 0);
  static constexpr int kFloats = 3 * C * LD + 2 * C * LB + D * LB + D;
  // the affine form's group map: BVM local' columns and BVM transition columns side by side
  // (32 at D = 128: half the blocks, each chunk's D-wide tiles loaded once for 64 columns),
  // NVM blocks a sequence and group, rows of LB2
  static constexpr int BVM = D == 128 ? 32 : 16, NVM = D / BVM;
  static constexpr int LB2 = 2 * BVM + 8;
  static constexpr int MBM = (C * BVM / 2 + NTHR - 1) / NTHR;
  static constexpr int kMapFloats = 3 * C * LD + 2 * C * LB2 + D * LB2 + D;
  // its chain: the map M'_g and two states of BV columns
  static constexpr int kChainFloats = D * LD + 2 * D * LB;
};

// The affine first level (ScanFirst::affine). S' is carried down a group g by an affine map:
// S' entering g - 1 from above = M'_g S' entering g + local'_g, where local'_g is the group's
// reverse scan from S' = 0 with dO and A_qk^T dO as given, and M'_g the scan from the identity
// with both 0 (the step S' <- (diag e^gamma - W^T Kbar) S' is then linear). A group map block
// (kMap) scans both for BVM columns side by side over the group's chunks; the chain walks the
// groups from the top, one product a group. local'_g and M'_g are kept in the rows of group
// g - 1 (never the last, so never short) next to the boundary state (scan_state_at, slots 1, 2).

// kMap false: the serial first level, all chunks from dht, S' at every group boundary.
// kMap true: group g's map (g >= 1), BV = StateAdjCfg::BVM: columns [0, BV) local', [BV, 2 BV)
// the transition of the identity's columns v0.. (dO and A_qk^T dO 0 there), over the group's
// chunks only.
template <class G, class T, bool kMap = false, class Blk>
KDA_DEV void state_adjoint_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, int vt,
                                   float* smem, int64_t g = 0) {
  using SA = StateAdjCfg<G>;
  const Dims& dm = a.dims;
  constexpr int C = G::C, D = G::D, RB = G::RB, LD = SA::LD, NT_ = SA::NTHR, NW = SA::NW;
  constexpr int BV = kMap ? SA::BVM : SA::BV;                           // own columns (kMap: each half)
  constexpr int BW = kMap ? 2 * BV : BV, LB = kMap ? SA::LB2 : SA::LB;  // state columns, their row stride
  constexpr int TD = (C / 16) * (BW / 8), TS = (D / 16) * (BW / 8), TW = TS > NW ? TS / NW : 1;
  static_assert(TS % TW == 0 && TS / TW <= NW && (BW / 8) % TW == 0, "a warp's S' tiles lie in one row of tiles");
  constexpr int MA = SA::MA, MB = kMap ? SA::MBM : SA::MB;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const int64_t NT = dm.NT(), Tp = dm.Tp(), group = a.scan_group;
  int64_t lo = 0, hi = NT;
  if constexpr (kMap) scan_group_range(a, g, lo, hi);
  const int v0 = vt * BV;
  const T* dO = static_cast<const T*>(a.dO);
  float* Kr = smem;         // [C][LD] Kbar
  float* Wr = Kr + C * LD;  // [C][LD] W
  float* Qr = Wr + C * LD;  // [C][LD] scale Q~
  float* Or = Qr + C * LD;  // [C][LB] dO, own columns (kMap: 0 on the transition's)
  float* Dr = Or + C * LB;  // [C][LB] A_qk^T dO -> dDelta, own columns
  float* Sp = Dr + C * LB;  // [D][LB] S', own columns
  float* eg = Sp + D * LB;  // [D] e^gamma
  // bf16 inputs on tensor cores (T bf16: this program is tensor-core only): the S' update's
  // operands as bf16 tiles (state_update_bf16), At = [scale Q~ | -W] over Wr (row stride LP =
  // 2 D + 8 elements, the bytes of an LD row) and Bt = [dO | dDelta] over Qr (own columns, row
  // stride LQ = 2 BW + 8: ldmatrix rows 16-byte aligned and conflict-free); Or is then unused.
  constexpr bool kBf = std::is_same_v<T, bfloat16>;
  constexpr int LP = 2 * D + 8, LQ = 2 * BW + 8;
  static_assert(2 * LP == 4 * LD && LQ <= LP && RB % 16 == 0);
  auto* At = reinterpret_cast<bfloat16*>(Wr);
  auto* Bt = reinterpret_cast<bfloat16*>(Qr);
  const int tid = blk.tid();
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t b = bh / dm.H, h = bh % dm.H;

  for (int e = tid; e < D * BW; e += NT_) {
    const int i = e / BW, j = e % BW;
    if constexpr (kMap) {
      Sp[i * LB + j] = j >= BV && i == v0 + j - BV ? 1.0f : 0.0f;
    } else {
      Sp[i * LB + j] = a.dht ? a.dht[(bh * D + i) * D + v0 + j] : 0.0f;
    }
  }
  if constexpr (kMap)  // dO is 0 on the transition's columns: set once, the loads fill [0, BV)
    for (int e = tid; e < C * BV; e += NT_) {
      if constexpr (kBf) Bt[(e / BV) * LQ + BV + e % BV] = bfloat16::from_bits(0);
      else Or[(e / BV) * LB + BV + e % BV] = 0.0f;
    }
  // Register prefetch one chunk ahead (as the one-block scan): the loads do not depend on S'.
  Pair<T> pW[MA], pQ[MA], pD[MB] = {}, pO[MB] = {};
  Pair<float> pK[MA];
  float pE = 0.0f;
  auto fetch = [&](int64_t n) {
    const int64_t row0 = bh * Tp + n * C, t0 = n * C;
    KDA_UNROLL
    for (int m = 0; m < MA; ++m) {
      const int64_t gi = row0 * D + 2 * (tid + m * NT_);
      pW[m] = ld_pair(static_cast<const T*>(ws.W), gi);
      pQ[m] = ld_pair(static_cast<const T*>(ws.sQ), gi);
      pK[m] = ld_pair(ws.Kbar, gi);
    }
    KDA_UNROLL
    for (int m = 0; m < MB; ++m) {
      const int e = 2 * (tid + m * NT_);
      if (e >= C * BV) break;
      const int r = e / BV, j = e % BV;
      pD[m] = ld_pair(static_cast<const T*>(ws.AqkT_dO), (row0 + r) * D + v0 + j);
      pO[m] = t0 + r < dm.T ? ld_pair(dO, ((b * dm.T + t0 + r) * dm.H + h) * D + v0 + j) : Pair<T>{};
    }
    if (tid < D) pE = ws.gamma[(bh * NT + n) * D + tid];
  };
  fetch(hi - 1);
  for (int64_t n = hi - 1; n >= lo; --n) {
    KDA_UNROLL
    for (int m = 0; m < MA; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int r = e / D, i = e % D;
      sts2(Kr + r * LD + i, pK[m]);
      if constexpr (kBf) {
        sts_bits(At + r * LP + i, pQ[m].bits);
        sts_bits(At + r * LP + D + i, pW[m].bits ^ 0x80008000u);  // -W
      } else {
        sts2(Wr + r * LD + i, pW[m]);
        sts2(Qr + r * LD + i, pQ[m]);
      }
    }
    KDA_UNROLL
    for (int m = 0; m < MB; ++m) {
      const int e = 2 * (tid + m * NT_);
      if (e >= C * BV) break;
      const int r = e / BV, j = e % BV;
      sts2(Dr + r * LB + j, pD[m]);
      if constexpr (kBf) sts_bits(Bt + r * LQ + j, pO[m].bits);
      else sts2(Or + r * LB + j, pO[m]);
    }
    if (tid < D) eg[tid] = expf(pE);
    if (n > lo) fetch(n - 1);
    blk.sync();
    // dDelta = A_qk^T dO + Kbar S' (own columns): warp w takes tiles w, w + NW, .. of the TD
    // (kMap: A_qk^T dO is 0 on the transition's columns)
    for (int ti = warp; ti < TD; ti += NW) {
      const int m0 = (ti / (BW / 8)) * 16, n0 = (ti % (BW / 8)) * 8;
      float q[4] = {};
      mma_acc_block<kSplit, 1, 1>(
          blk, q, D, [&](int, int r, int k) { return Kr[(m0 + r) * LD + k]; },
          [&](int, int k, int c) { return Sp[k * LB + n0 + c]; });
      KDA_UNROLL
      for (int e = 0; e < 4; e += 2) {  // e, e + 1: columns c, c + 1 of row r
        int r, c;
        frag_rc(lane, e, r, c);
        r += m0;
        c += n0;
        float v[2];
        for (int u = 0; u < 2; ++u) {
          v[u] = (kMap && c + u >= BV ? 0.0f : Dr[r * LB + c + u]) + q[e + u];
          if constexpr (!kBf) Dr[r * LB + c + u] = v[u];  // (kBf: the update reads Bt)
        }
        if constexpr (kBf) st2(Bt, r * LQ + BW + c, v[0], v[1]);  // rounded as the scans store it
      }
    }
    blk.sync();
    // S' <- e^gamma S' + sum over the row blocks of (scale Q~)^T dO - W^T dDelta: warp w takes
    // TW adjacent tiles (one row of tiles where TW > 1)
    if (warp * TW < TS) {
      const int ti = warp * TW, m0 = (ti / (BW / 8)) * 16, c0 = (ti % (BW / 8)) * 8;
      float acc[4 * TW] = {};
      for (int rb = 0; rb < C / RB; ++rb) {
        const int k0 = rb * RB;
        if constexpr (kBf) {
          state_update_bf16<TW>(blk, acc, At, At + D, LP, Bt, Bt + BW, LQ, m0, c0, k0, RB);
        } else {
          mma_acc_block<kSplit, 1, TW>(
              blk, acc, RB, [&](int, int r, int k) { return Qr[(k0 + k) * LD + m0 + r]; },
              [&](int u, int k, int c) { return Or[(k0 + k) * LB + c0 + 8 * u + c]; });
          mma_acc_block<kSplit, 1, TW>(
              blk, acc, RB, [&](int, int r, int k) { return -Wr[(k0 + k) * LD + m0 + r]; },
              [&](int u, int k, int c) { return Dr[(k0 + k) * LB + c0 + 8 * u + c]; });
        }
      }
      auto at = [&](int u, int e, int& i) {
        int r, c;
        frag_rc(lane, e, r, c);
        i = m0 + r;
        return i * LB + c0 + 8 * u + c;
      };
      update_state_tiles<TW>(Sp, eg, acc, at);
    }
    blk.sync();  // S' complete before the next chunk's dDelta; the tiles free for its rows
    if constexpr (!kMap) {
      if (n > 0 && n % group == 0) {  // the boundary above group n / group - 1
        const int64_t gb = n / group - 1;
        for (int e = tid; e < D * BV; e += NT_) {
          const int i = e / BV, j = e % BV;
          *scan_state_at(a, bh, gb, i * D + v0 + j) = Sp[i * LB + j];
        }
        blk.sync();
        if (tid == 0) blk.publish(scan_state_flag(ws, dm, bh, gb));
      }
    }
  }
  if constexpr (kMap) {  // local'_g into slot 1 of group g - 1, M'_g's columns into slot 2
    for (int e = tid; e < D * BW; e += NT_) {
      const int i = e / BW, j = e % BW;
      *scan_state_at(a, bh, g - 1, (j < BV ? 1 : 2) * D * D + i * D + v0 + j % BV) = Sp[i * LB + j];
    }
    blk.sync();  // every thread's stash stores issued; then one of the NVM map counts on the flag
    if (tid == 0) blk.publish(scan_state_flag(ws, dm, bh, g - 1));
  }
}

// The affine first level's chain for sequence bh, V tile vt (BV columns): for g = NG - 1 down
// to 1, S' entering g - 1 = M'_g S' entering g + local'_g (from dht at the top), into slot 0 of
// group g - 1 (the second level's start state), raising scan_state_flag(bh, g - 1) after each
// (past the NVM counts of the map blocks it waited for).
// One block carries the whole chain; it waits for each group's map blocks. Shared memory:
// StateAdjCfg::kChainFloats.
template <class G, class T, class Blk>
KDA_DEV void state_adjoint_chain_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, int vt,
                                         float* smem) {
  using SA = StateAdjCfg<G>;
  const Dims& dm = a.dims;
  constexpr int D = G::D, BV = SA::BV, LD = SA::LD, LB = SA::LB, NT_ = SA::NTHR, NW = SA::NW;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const int v0 = vt * BV, tid = blk.tid(), lane = tid & 31, warp = tid >> 5;
  const int64_t NG = scan_groups(a);
  float* Ms = smem;         // [D][LD] M'_g
  float* Sc = Ms + D * LD;  // [D][LB] S' entering g, columns v0..
  float* Sn = Sc + D * LB;  // [D][LB] S' entering g - 1
  for (int e = tid; e < D * BV; e += NT_) {
    const int i = e / BV, j = e % BV;
    Sc[i * LB + j] = a.dht ? a.dht[(bh * D + i) * D + v0 + j] : 0.0f;
  }
  // [D x BV] in 16x8 tiles: a row of tiles a warp where the row blocks give every warp one
  constexpr int NTN = BV / 8, NG2 = D / 16 >= NW ? NTN : 1, NGRP = (D / 16) * (NTN / NG2);
  for (int64_t g = NG - 1; g >= 1; --g) {
    // group g's map stored (its NVM blocks' counts); the barrier also: Sc complete, Ms free
    if (tid == 0) blk.wait_progress(scan_state_flag(ws, dm, bh, g - 1), SA::NVM);
    blk.sync();
    for (int e = 4 * tid; e < D * D; e += 4 * NT_)  // 16 bytes a copy (a state row's 4 floats are adjacent)
      blk.copy16_async(Ms + (e / D) * LD + e % D, scan_state_at(a, bh, g - 1, 2 * D * D + e));
    blk.wait_copies();
    blk.sync();
    for (int gi = warp; gi < NGRP; gi += NW) {
      const int m0 = (gi / (NTN / NG2)) * 16, n0 = (gi % (NTN / NG2)) * 8 * NG2;
      float acc[NG2 * 4];
      for_group_frags<NG2>(lane, m0, n0, [&](int u, int e, int r, int c) {
        acc[4 * u + e] = blk.load_cg(scan_state_at(a, bh, g - 1, D * D + r * D + v0 + c));  // local'_g
      });
      mma_acc_block<kSplit, 1, NG2>(
          blk, acc, D, [&](int, int r, int k) { return Ms[(m0 + r) * LD + k]; },
          [&](int u, int k, int c) { return Sc[k * LB + n0 + 8 * u + c]; });
      for_group_frags<NG2>(lane, m0, n0, [&](int u, int e, int r, int c) {
        *scan_state_at(a, bh, g - 1, r * D + v0 + c) = acc[4 * u + e];
        Sn[r * LB + c] = acc[4 * u + e];
      });
    }
    blk.sync();
    if (tid == 0) blk.publish(scan_state_flag(ws, dm, bh, g - 1));
    float* t = Sc;
    Sc = Sn;
    Sn = t;
  }
}

}  // namespace lt::kda::KDA_BLOCKS_NS
