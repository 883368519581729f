// KDA two-level backward scan, first level: the adjoint state S' alone, one block per (b, h,
// V tile of 16 columns), reverse over all chunks; S' at every group boundary goes to the
// second level (inter_adjoint_program over one group; where it is kept: scan_state_at)
// (overview: kernels/kda_blocks.h; FusedArgs::scan_group).
#pragma once

#include "kernels/kda/chunk_ops.h"

namespace lt::kda::KDA_BLOCKS_NS {

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
};

template <class G, class T, class Blk>
KDA_DEV void state_adjoint_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, int vt,
                                   float* smem) {
  using SA = StateAdjCfg<G>;
  const Dims& dm = a.dims;
  constexpr int C = G::C, D = G::D, RB = G::RB, BV = SA::BV, LD = SA::LD, LB = SA::LB, NT_ = SA::NTHR;
  constexpr int TW = SA::TW, MA = SA::MA, MB = SA::MB;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const int64_t NT = dm.NT(), Tp = dm.Tp(), group = a.scan_group;
  const int v0 = vt * BV;
  const T* dO = static_cast<const T*>(a.dO);
  float* Kr = smem;         // [C][LD] Kbar
  float* Wr = Kr + C * LD;  // [C][LD] W
  float* Qr = Wr + C * LD;  // [C][LD] scale Q~
  float* Or = Qr + C * LD;  // [C][LB] dO, own columns
  float* Dr = Or + C * LB;  // [C][LB] A_qk^T dO -> dDelta, own columns
  float* Sp = Dr + C * LB;  // [D][LB] S', own columns
  float* eg = Sp + D * LB;  // [D] e^gamma
  const int tid = blk.tid();
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t b = bh / dm.H, h = bh % dm.H;

  for (int e = tid; e < D * BV; e += NT_) {
    const int i = e / BV, j = e % BV;
    Sp[i * LB + j] = a.dht ? a.dht[(bh * D + i) * D + v0 + j] : 0.0f;
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
  fetch(NT - 1);
  for (int64_t n = NT - 1; n >= 0; --n) {
    KDA_UNROLL
    for (int m = 0; m < MA; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int r = e / D, i = e % D;
      sts2(Kr + r * LD + i, pK[m]);
      sts2(Wr + r * LD + i, pW[m]);
      sts2(Qr + r * LD + i, pQ[m]);
    }
    KDA_UNROLL
    for (int m = 0; m < MB; ++m) {
      const int e = 2 * (tid + m * NT_);
      if (e >= C * BV) break;
      const int r = e / BV, j = e % BV;
      sts2(Dr + r * LB + j, pD[m]);
      sts2(Or + r * LB + j, pO[m]);
    }
    if (tid < D) eg[tid] = expf(pE);
    if (n > 0) fetch(n - 1);
    blk.sync();
    // dDelta = A_qk^T dO + Kbar S' (own columns): warp w < TD takes tile (m0, n0)
    if (warp < SA::TD) {
      const int m0 = (warp / (BV / 8)) * 16, n0 = (warp % (BV / 8)) * 8;
      float q[4] = {};
      mma_acc_block<kSplit, 1, 1>(
          blk, q, D, [&](int, int r, int k) { return Kr[(m0 + r) * LD + k]; },
          [&](int, int k, int c) { return Sp[k * LB + n0 + c]; });
      for_group_frags<1>(lane, m0, n0, [&](int, int e, int r, int c) { Dr[r * LB + c] = Dr[r * LB + c] + q[e]; });
    }
    blk.sync();
    // S' <- e^gamma S' + sum over the row blocks of (scale Q~)^T dO - W^T dDelta: warp w takes
    // TW adjacent tiles (one row of tiles where TW > 1)
    if (warp * TW < SA::TS) {
      const int ti = warp * TW, m0 = (ti / (BV / 8)) * 16, c0 = (ti % (BV / 8)) * 8;
      float acc[4 * TW] = {};
      for (int rb = 0; rb < C / RB; ++rb) {
        const int k0 = rb * RB;
        mma_acc_block<kSplit, 1, TW>(
            blk, acc, RB, [&](int, int r, int k) { return Qr[(k0 + k) * LD + m0 + r]; },
            [&](int u, int k, int c) { return Or[(k0 + k) * LB + c0 + 8 * u + c]; });
        mma_acc_block<kSplit, 1, TW>(
            blk, acc, RB, [&](int, int r, int k) { return -Wr[(k0 + k) * LD + m0 + r]; },
            [&](int u, int k, int c) { return Dr[(k0 + k) * LB + c0 + 8 * u + c]; });
      }
      auto at = [&](int u, int e, int& i) {
        int r, c;
        frag_rc(lane, e, r, c);
        i = m0 + r;
        return i * LB + c0 + 8 * u + c;
      };
      update_state_tiles<TW>(Sp, eg, acc, at);
    }
    blk.sync();                     // S' complete before the next chunk's dDelta; the tiles free for its rows
    if (n > 0 && n % group == 0) {  // the boundary above group n / group - 1
      const int64_t g = n / group - 1;
      for (int e = tid; e < D * BV; e += NT_) {
        const int i = e / BV, j = e % BV;
        *scan_state_at(a, bh, g, i * D + v0 + j) = Sp[i * LB + j];
      }
      blk.sync();
      if (tid == 0) blk.publish(scan_state_flag(ws, dm, bh, g));
    }
  }
}

}  // namespace lt::kda::KDA_BLOCKS_NS
