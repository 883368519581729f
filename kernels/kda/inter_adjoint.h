// KDA inter adjoint (backward reverse state scan): one block per (b, h), or a cluster of NV
// blocks per (b, h) split over V (overview: kernels/kda_blocks.h).
#pragma once

#include "kernels/kda/state_adjoint.h"

namespace lt::kda::KDA_BLOCKS_NS {

// ======================================================================================
// inter adjoint (backward, reverse scan), one block per (b, h), full V
// kTC: products on tensor cores; else fp32 CUDA cores. Delta is the forward scan's (saved over
// U). kLean (LeanScan::lean, a template parameter so that neither form pays for the other's
// branch): X_q, X_w are left to the intra adjoint, so a row block forms dDelta, X_k and the
// S' update only; S = h[n] is then read by dgamma_s alone. Group g (the two-level scan's
// second level, FusedArgs::scan_group; lean only): chunks [lo, hi) from the S' that the first
// level (kernels/kda/state_adjoint.h) left at hi.
// ======================================================================================
template <class G, class T, bool kTC, bool kLean, class Blk>
KDA_DEV void inter_adjoint_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, float* smem,
                                   int64_t g = 0) {
  const Dims& dm = a.dims;
  constexpr int C = G::C, D = G::D, LD = G::LDA, RB = G::RB, NT_ = G::NTHR_A, NW = NT_ / 32;
  constexpr bool kSplit = std::is_same_v<T, float>;
  // S' accumulator: SIMT owns elements tid + m NT_; TC: see the warp roles below
  constexpr int NACC = D * D / NT_;
  constexpr int TN = D / 8, NTILE_ACC = (D / 16) * TN;
  // Tensor cores at D = 64: warp roles. The first NXW warps compute the X products, two
  // adjacent 16x8 tiles each (one A fragment, two B); the other NSW warps hold the S' tiles
  // (NACC_T each, one row of tiles: one A fragment for all). The scan is bound by shared-memory
  // traffic (mio throttle), and every fragment a warp loads now serves two or more mma. At
  // D = 128 the S' tiles would need 128 accumulator registers a thread on half the warps, so
  // every warp does both, TPW = 2 X tiles and NTILE_ACC / NW = 16 S' tiles (64 registers).
  constexpr int XT = (RB / 16) * TN;  // X tiles (16x8) of a row block
  constexpr int TPW = G::TPW;         // Delta / dDelta tiles a warp computes (adjacent columns)
  constexpr bool kRoles = kTC && D == 64;
  constexpr int XN = kRoles ? 2 : TPW, NXW = XT / XN, NSW = kRoles ? NW - NXW : NW;
  constexpr int NACC_T = NTILE_ACC / NSW;
  static_assert(XT % XN == 0 && (!kRoles || NXW < NW) && (kRoles || NXW == NW));
  static_assert((RB / 16) * TN == NW * TPW && TN % TPW == 0, "TPW 16x8 tiles per warp in the row-block products");
  static_assert(NTILE_ACC % NSW == 0 && (!kTC || NACC_T * 4 >= NACC));
  static_assert(TN % NACC_T == 0, "a warp's S' tiles share one row of tiles (one A operand)");
  const int64_t NT = dm.NT(), Tp = dm.Tp();
  const T* dO = static_cast<const T*>(a.dO);
  constexpr bool lean = kLean;  // the form is compiled in: no branch in the step
  float* S = smem;              // [D][LD]  h[n]
  float* Sp = S + D * LD;       // [D][LD]  S' = dL/dS after chunk n
  float* Wr = Sp + D * LD;      // [RB][LD] W rows
  float* Qr = Wr + RB * LD;     // [RB][LD] scale Q~ rows
  float* Kr = Qr + RB * LD;     // [RB][LD] Kbar rows
  float* Ur = Kr + RB * LD;     // [RB][LD] Delta
  float* Or = Ur + RB * LD;     // [RB][LD] dO
  float* Dr = Or + RB * LD;     // [RB][LD] A_qk^T dO -> dDelta
  float* eg = Dr + RB * LD;     // [D]
  // bf16 inputs on tensor cores (kBf): the S' update's operands stage as bf16 tiles over Qr
  // and Wr, At = [scale Q~ | -W] and Bt = [dO | dDelta] (row stride LP = 2 D + 8 elements: the
  // bytes of an LD row; ldmatrix rows 16-byte aligned and conflict-free; state_update_bf16).
  // Qr and Wr then hold no fp32 copy; Or and Dr keep theirs where the X products read them.
  // Not in the full form at D = 64 (warp roles): there it spills (64 bytes a thread, ptxas),
  // and that form is compared bit for bit with no other.
  constexpr bool kBf = kTC && std::is_same_v<T, bfloat16> && (kLean || !kRoles);
  constexpr int LP = 2 * D + 8;
  static_assert(2 * LP == 4 * LD && RB % 16 == 0);
  auto* At = reinterpret_cast<bfloat16*>(Qr);
  auto* Bt = reinterpret_cast<bfloat16*>(Wr);
  const int tid = blk.tid();
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t b = bh / dm.H, h = bh % dm.H;
  blk.allow_dependents();  // the intra adjoint may launch: it waits on scan_progress
  int64_t lo, hi;
  scan_group_range(a, g, lo, hi);
  if (hi < NT) {  // S' after chunk hi from the first level (the affine one's map blocks count first)
    if (tid == 0)
      blk.wait_progress(scan_state_flag(ws, dm, bh, g),
                        StateAdjCfg<G>::NV + (a.scan_first == ScanFirst::affine ? StateAdjCfg<G>::NVM : 0));
    blk.sync();
    for (int e = tid; e < D * D; e += NT_) Sp[(e / D) * LD + e % D] = *scan_state_at(a, bh, g, e);
  } else {
    for (int e = tid; e < D * D; e += NT_) Sp[(e / D) * LD + e % D] = a.dht ? a.dht[bh * D * D + e] : 0.0f;
  }
  constexpr int kAccN = kTC ? 4 * NACC_T : NACC;
  float acc[kAccN];
  KDA_UNROLL
  for (int m = 0; m < kAccN; ++m) acc[m] = 0.0f;

  // Register prefetch: the global loads of each step (chunk n, row block rb) are issued one
  // step ahead, while the previous step computes; they do not depend on S', so only the
  // smem stores wait. (Loading at the start of each step would put a global round trip on
  // the scan's critical path.) The state h[n] is prefetched in registers where it is at most
  // 32 floats a thread; at D = 128 (64 floats, on top of the 64 S' accumulators) it is copied
  // straight into S instead (asynchronous copies, no registers), issued once S is free, after
  // the chunk's last reads of it (dgamma_s), so that they land while S' is updated.
  static_assert(NT_ >= D, "one gamma per thread");
  constexpr int MS = D * D / NT_, MR = RB * D / NT_;
  constexpr bool kStatePrefetch = MS <= 32;
  static_assert(kStatePrefetch || MS % 4 == 0);
  [[maybe_unused]] float pS[kStatePrefetch ? MS : 1];
  Pair<T> pW[MR / 2], pQ[MR / 2], pD[MR / 2], pO[MR / 2];  // raw pairs (Pair: converted when stored)
  Pair<float> pK[MR / 2], pU[MR / 2];
  float pE = 0.0f;
  auto fetch_state = [&](int64_t n) {  // h[n] (register prefetch only) and gamma[n]
    if constexpr (kStatePrefetch) {
      KDA_UNROLL
      for (int m = 0; m < MS; ++m) pS[m] = a.h[(bh * NT + n) * D * D + tid + m * NT_];
    }
    if (tid < D) pE = ws.gamma[(bh * NT + n) * D + tid];
  };
  [[maybe_unused]] auto copy_state = [&](int64_t n) {  // no register prefetch: h[n] -> S (S unread until the next sync)
    KDA_UNROLL
    for (int m = 0; m < MS / 4; ++m) {
      const int e = 4 * (tid + m * NT_);
      blk.copy16_async(S + (e / D) * LD + e % D, a.h + (bh * NT + n) * D * D + e);
    }
  };
  auto fetch_rows = [&](int64_t n, int rb) {
    const int64_t row0 = bh * Tp + n * C + rb * RB;  // workspace row
    const int64_t t0 = n * C + rb * RB;              // token row
    KDA_UNROLL
    for (int m = 0; m < MR / 2; ++m) {  // two adjacent columns a thread
      const int e = 2 * (tid + m * NT_);
      const int r = e / D, i = e % D;
      const int64_t gi = (row0 + r) * D + i;
      pW[m] = ld_pair(static_cast<const T*>(ws.W), gi);
      pQ[m] = ld_pair(static_cast<const T*>(ws.sQ), gi);
      pK[m] = ld_pair(static_cast<const float*>(ws.Kbar), gi);
      pU[m] = ld_pair(static_cast<const float*>(ws.Delta), gi);
      pD[m] = ld_pair(static_cast<const T*>(ws.AqkT_dO), gi);
      pO[m] = t0 + r < dm.T ? ld_pair(dO, ((b * dm.T + t0 + r) * dm.H + h) * D + i) : Pair<T>{};
    }
  };
  fetch_state(hi - 1);
  if constexpr (!kStatePrefetch) copy_state(hi - 1);
  fetch_rows(hi - 1, 0);
  for (int64_t n = hi - 1; n >= lo; --n) {
    if constexpr (kStatePrefetch) {
      KDA_UNROLL
      for (int m = 0; m < MS; ++m) {
        const int e = tid + m * NT_;
        S[(e / D) * LD + e % D] = pS[m];
      }
    } else {
      blk.wait_copies();  // this thread's copies of h[n] landed; the row block's sync publishes them
    }
    if (tid < D) eg[tid] = expf(pE);
    for (int rb = 0; rb < C / RB; ++rb) {
      const int64_t row0 = bh * Tp + n * C + rb * RB;  // workspace row
      KDA_UNROLL
      for (int m = 0; m < MR / 2; ++m) {
        const int e = 2 * (tid + m * NT_);
        const int r = e / D, i = e % D;
        if constexpr (kBf) {
          sts_bits(At + r * LP + i, pQ[m].bits);
          sts_bits(At + r * LP + D + i, pW[m].bits ^ 0x80008000u);  // -W: the sign bits flipped
          sts_bits(Bt + r * LP + i, pO[m].bits);
          if (!lean) sts2(Or + r * LD + i, pO[m]);  // X_q reads dO in fp32
        } else {
          sts2(Wr + r * LD + i, pW[m]);
          sts2(Qr + r * LD + i, pQ[m]);
          sts2(Or + r * LD + i, pO[m]);
        }
        sts2(Kr + r * LD + i, pK[m]);
        sts2(Ur + r * LD + i, pU[m]);
        sts2(Dr + r * LD + i, pD[m]);
      }
      if (rb + 1 < C / RB) {
        fetch_rows(n, rb + 1);
      } else if (n > lo) {
        fetch_rows(n - 1, 0);
        fetch_state(n - 1);
      }
      blk.sync();  // also orders the S / eg stores above
      // dDelta = A_qk^T dO + Kbar S'  (in place over dD0)
      if constexpr (kTC) {
        const int ti = warp * TPW, m0 = (ti / TN) * 16, n0 = (ti % TN) * 8;  // tiles (m0, n0 + 8 w), w < TPW
        float q[4 * TPW] = {};
        mma_acc_block<kSplit, 1, TPW>(
            blk, q, D, [&](int, int r, int k) { return Kr[(m0 + r) * LD + k]; },
            [&](int w, int k, int c) { return Sp[k * LD + n0 + 8 * w + c]; });
        KDA_UNROLL
        for (int w = 0; w < TPW; ++w) {
          KDA_UNROLL
          for (int e = 0; e < 4; e += 2) {  // e, e + 1: columns j, j + 1 of row r
            int r, c;
            frag_rc(lane, e, r, c);
            r += m0;
            const int j = n0 + 8 * w + c;
            float dd[2];
            for (int u = 0; u < 2; ++u) {
              dd[u] = Dr[r * LD + j + u] + q[4 * w + e + u];
              if (!kBf || !lean) Dr[r * LD + j + u] = dd[u];  // (kBf: the S' update reads Bt)
            }
            st2(static_cast<T*>(ws.dDelta), (row0 + r) * D + j, dd[0], dd[1]);
            if constexpr (kBf) st2(Bt, r * LP + D + j, dd[0], dd[1]);  // rounded as stored
          }
        }
      } else {
        for (int e = tid; e < RB * D; e += NT_) {
          const int r = e / D, j = e % D;
          float dd = Dr[r * LD + j];
          for (int i = 0; i < D; ++i) dd += Kr[r * LD + i] * Sp[i * LD + j];
          Dr[r * LD + j] = dd;
          st(static_cast<T*>(ws.dDelta), (row0 + r) * D + j, dd);
        }
      }
      blk.sync();
      // X_q = dO S^T, X_w = dDelta S^T (not lean), X_k = Delta S'^T  (element (r, i));
      // S' accumulator += scale Q~^T dO - W^T dDelta over the block's rows
      if constexpr (kTC) {
        if (warp < NXW) {  // X tiles (r0, n0 + 8u), u < XN: rows of dO / dDelta / Delta
          const int xt = warp * XN, r0 = (xt / TN) * 16, n0 = (xt % TN) * 8;
          float xqw[2 * XN * 4] = {}, xk[XN * 4] = {};  // [X_q | X_w][u][e], [u][e]
          if (!lean)
            mma_acc_block<kSplit, 2, XN>(
                blk, xqw, D, [&](int i, int r, int k) { return (i == 0 ? Or : Dr)[(r0 + r) * LD + k]; },
                [&](int u, int k, int c) { return S[(n0 + 8 * u + c) * LD + k]; });
          mma_acc_block<kSplit, 1, XN>(
              blk, xk, D, [&](int, int r, int k) { return Ur[(r0 + r) * LD + k]; },
              [&](int u, int k, int c) { return Sp[(n0 + 8 * u + c) * LD + k]; });
          KDA_UNROLL
          for (int u = 0; u < XN; ++u) {
            const float* xq = xqw + 4 * u;
            const float* xw = xqw + 4 * (XN + u);
            KDA_UNROLL
            for (int e = 0; e < 4; e += 2) {
              int r, c;
              frag_rc(lane, e, r, c);
              const int64_t gi = (row0 + r0 + r) * D + n0 + 8 * u + c;
              if (!lean) {
                st2(static_cast<T*>(ws.Xq), gi, xq[e], xq[e + 1]);
                st2(static_cast<T*>(ws.Xw), gi, xw[e], xw[e + 1]);
              }
              st2(ws.Xk, gi, xk[4 * u + e], xk[4 * u + e + 1]);
            }
          }
        }
        if (!kRoles || warp >= NXW) {  // this warp's NACC_T S' tiles: one row of tiles (m0)
          const int ti = (warp - (kRoles ? NXW : 0)) * NACC_T, m0 = (ti / TN) * 16, c0 = (ti % TN) * 8;
          if constexpr (kBf) {
            state_update_bf16<NACC_T>(blk, acc, At, At + D, LP, Bt, Bt + D, LP, m0, c0, 0, RB);
          } else {
            mma_acc_block<kSplit, 1, NACC_T>(
                blk, acc, RB, [&](int, int r, int k) { return Qr[k * LD + m0 + r]; },
                [&](int u, int k, int c) { return Or[k * LD + c0 + 8 * u + c]; });
            mma_acc_block<kSplit, 1, NACC_T>(
                blk, acc, RB, [&](int, int r, int k) { return -Wr[k * LD + m0 + r]; },
                [&](int u, int k, int c) { return Dr[k * LD + c0 + 8 * u + c]; });
          }
        }
      } else {
        for (int e = tid; e < RB * D; e += NT_) {
          const int r = e / D, i = e % D;
          float xq = 0.0f, xw = 0.0f, xk = 0.0f;
          for (int j = 0; j < D; ++j) {
            if (!lean) {
              const float sv = S[i * LD + j];
              xq += Or[r * LD + j] * sv;
              xw += Dr[r * LD + j] * sv;
            }
            xk += Ur[r * LD + j] * Sp[i * LD + j];
          }
          const int64_t gi = (row0 + r) * D + i;
          if (!lean) {
            st(static_cast<T*>(ws.Xq), gi, xq);
            st(static_cast<T*>(ws.Xw), gi, xw);
          }
          st(ws.Xk, gi, xk);
        }
        KDA_UNROLL
        for (int m = 0; m < NACC; ++m) {
          const int e = tid + m * NT_;
          const int i = e / D, j = e % D;
          float s = 0.0f;
          for (int r = 0; r < RB; ++r) s += Qr[r * LD + i] * Or[r * LD + j] - Wr[r * LD + i] * Dr[r * LD + j];
          acc[m] += s;
        }
      }
      blk.sync();  // row tiles free for the next block
    }
    // dgamma_s = e^gamma * sum_v S S': a warp's D / NW state rows i = warp + k NW, reduced at once
    {
      constexpr int RW = D / NW;
      static_assert(RW >= 1 && D % NW == 0);
      float s[RW];
      KDA_UNROLL
      for (int k = 0; k < RW; ++k) {
        const int i = warp + k * NW;
        s[k] = 0.0f;
        KDA_UNROLL
        for (int j = lane; j < D; j += 32) s[k] += S[i * LD + j] * Sp[i * LD + j];
      }
      int k;
      const float sum = warp_sum_rows<RW>(blk, s, lane, k);
      if ((lane & (32 / RW - 1)) == 0) ws.dgamma_s[(bh * NT + n) * D + warp + k * NW] = eg[warp + k * NW] * sum;
    }
    blk.sync();
    if (tid == 0) blk.publish(scan_progress(ws, dm, bh, g));  // chunk n's rows all written
    if constexpr (!kStatePrefetch)
      if (n > lo) copy_state(n - 1);  // S is read no more in this chunk
    if constexpr (kTC) {
      // S' = e^gamma S' + acc (X warps hold no S' tiles: warp-uniform); at(u, e, i): element e
      // of tile u, its row i and its index in Sp
      if (!kRoles || warp >= NXW) {
        auto at = [&](int u, int e, int& i) {
          const int ti = (warp - (kRoles ? NXW : 0)) * NACC_T + u;  // as in the accumulation above
          int r, c;
          frag_rc(lane, e, r, c);
          i = (ti / TN) * 16 + r;
          return i * LD + (ti % TN) * 8 + c;
        };
        update_state_tiles<NACC_T>(Sp, eg, acc, at);
      }
    } else {
      KDA_UNROLL
      for (int m = 0; m < NACC; ++m) {
        const int e = tid + m * NT_;
        const int i = e / D, j = e % D;
        Sp[i * LD + j] = eg[i] * Sp[i * LD + j] + acc[m];
        acc[m] = 0.0f;
      }
    }
    blk.sync();
  }
  if (a.dh0 && lo == 0)
    for (int e = tid; e < D * D; e += NT_) a.dh0[bh * D * D + e] = Sp[(e / D) * LD + e % D];
}

// ======================================================================================
// inter adjoint split over V (backward, reverse scan): a cluster of NV blocks per (b, h)
// ======================================================================================
// The scan's state columns are independent (column j of S' depends only on column j of
// A_qk^T dO and dO), so block t of the cluster owns the columns [t VT, (t+1) VT) of S' and
// computes there dDelta and the S' update. The outputs that sum over v are rows of the
// transposed products: block t also owns the K rows [t VT, (t+1) VT) and computes X_k and
// dgamma_s for them over the full V width, from
//   S     its own rows, loaded from the saved trajectory h[n] (dgamma_s only);
//   S'    its own columns (all rows: phase A reads them) and its own rows (all columns: X_k
//         and dgamma_s read them). After each chunk's update a block exports the rows of its
//         columns that the peers own to a double-buffered export tile E, and every block
//         gathers its own rows of the other columns from the peers' E (DSMEM);
//   Delta the full rows, from global memory (the forward scan saved it);
//   dDelta its own columns only (phase A writes them, phase B's S' accumulator reads them).
// No partial sums: every output element is computed by one block, with the same operands in
// the same order as the single-block program, so the results are bit-identical to it.
// One cluster barrier a chunk. Per row block: prefetched rows -> sync -> A (dDelta: own
// columns) -> sync -> B (X_k: own rows, into the staging tile Xs; S' accumulator: own
// columns) -> sync. Per chunk: dgamma_s -> sync -> S' update (own columns; export to
// E[n % 2]) -> cluster sync -> gather from the peers' E[n % 2]; X_k from Xs to global ->
// sync -> publish. Why that is race-free:
//   X_k goes over Kbar (ws.Xk aliases it) only after the cluster sync of chunk n, which every
//     peer reaches after its last read of chunk n's Kbar rows (they are prefetched a row
//     block ahead, never further).
//   A peer reads E[n % 2] between the cluster syncs of chunks n and n - 1; this block writes
//     E[n % 2] again at chunk n - 2, after the cluster sync of chunk n - 1.
// The split scan is always lean (FusedArgs::lean_scan: X_q and X_w from
// the intra adjoint). Blk provides cluster_sync() (barrier of all the cluster's threads, with
// release / acquire of their shared-memory writes) and peer(p, rank) (the address of p in
// block `rank`'s shared memory).
// The two-level scan's grid (bwd_two_level_blocks items): work item j (the block's ticket) of
//   serial: [first level: bh, then V tiles] [second level: groups top first, then bh]
//   affine: [group maps: g = NG - 1 down to 1, then bh, then V tiles] [chains: bh, then V tiles]
//           [second level: groups top first, then bh]
// so every item waits only on items before it.
template <class G, class T, class Blk>
KDA_DEV void backward_scan_item(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t j, float* smem) {
  constexpr int NV = StateAdjCfg<G>::NV, NVM = StateAdjCfg<G>::NVM;
  const int64_t BH = a.dims.B * a.dims.H, NG = scan_groups(a), per = BH * NV, per_map = BH * NVM;
  blk.allow_dependents();  // the intra adjoint may launch: it waits on scan_progress
  if (a.scan_first == ScanFirst::affine) {
    if (j < (NG - 1) * per_map) {
      const int64_t g = NG - 1 - j / per_map, bh = (j % per_map) / NVM;
      state_adjoint_program<G, T, true>(a, ws, blk, bh, static_cast<int>(j % NVM), smem, g);
      return;
    }
    j -= (NG - 1) * per_map;
    if (j < per) {
      state_adjoint_chain_program<G, T>(a, ws, blk, j / NV, static_cast<int>(j % NV), smem);
      return;
    }
    j -= per;
  } else {
    if (j < per) {
      state_adjoint_program<G, T>(a, ws, blk, j / NV, static_cast<int>(j % NV), smem);
      return;
    }
    j -= per;
  }
  inter_adjoint_program<G, T, true, true>(a, ws, blk, j % BH, smem, NG - 1 - j / BH);
}

template <class G, int NV_>
struct SplitCfg {
  static constexpr int D = G::D, C = G::C, NV = NV_;
  static constexpr int VT = D / NV;  // own columns / own K rows
  static constexpr int RB = G::RB;   // as the single-block program: the S' sums in its order
  static constexpr int NTHR = 256, NW = NTHR / 32;
  static constexpr int LD = G::LDA;
  static constexpr int MT = RB / 16, TNV = VT / 8;
  static constexpr int NACC_T = (D / 16) * TNV / NW;           // S' tiles a warp holds (tensor cores)
  static constexpr int NACC_S = D * VT / NTHR;                 // S' elements a thread holds (CUDA cores)
  static constexpr int MS = D * VT / (2 * NTHR);               // state pairs a thread loads (own rows)
  static constexpr int MR = RB * D / (2 * NTHR);               // full-width row pairs a thread loads
  static constexpr int MRV = (RB * VT / 2 + NTHR - 1) / NTHR;  // own-column row pairs (guarded)
  static_assert(NV == 2 || NV == 4);
  static_assert(VT % 8 == 0 && (D / 16) * TNV % NW == 0 && (D * VT) % NTHR == 0);
  static_assert((D * VT) % (2 * NTHR) == 0 && (RB * D) % (2 * NTHR) == 0 && NTHR >= D);
  static constexpr int LX = VT + 4;  // row stride of Xs and E: 4 mod 32, fragment stores conflict-free
  static constexpr int kFloats = VT * LD + D * LD + 6 * RB * LD + 2 * (D - VT) * LX + C * LX + D;
};

template <class G, class T, bool kTC, int NV, class Blk>
KDA_DEV void inter_adjoint_split_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, int vt,
                                         float* smem) {
  using SC = SplitCfg<G, NV>;
  const Dims& dm = a.dims;
  constexpr int C = G::C, D = G::D, LD = SC::LD, RB = SC::RB, VT = SC::VT, NT_ = SC::NTHR, NW = SC::NW;
  constexpr int MT = SC::MT, TNV = SC::TNV;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const int64_t NT = dm.NT(), Tp = dm.Tp();
  const int c0 = vt * VT;  // own columns [c0, c0 + VT) and own K rows [c0, c0 + VT)
  const T* dO = static_cast<const T*>(a.dO);
  constexpr int LX = SC::LX;
  float* S = smem;                    // [VT][LD] h[n]: own rows (all columns)
  float* Sp = S + VT * LD;            // [D][LD]  S': own columns computed here, own rows' other columns gathered
  float* Wr = Sp + D * LD;            // [RB][LD] W rows
  float* Qr = Wr + RB * LD;           // [RB][LD] scale Q~ rows
  float* Kr = Qr + RB * LD;           // [RB][LD] Kbar rows
  float* Ur = Kr + RB * LD;           // [RB][LD] Delta rows (saved by the forward scan)
  float* Or = Ur + RB * LD;           // [RB][LD] dO
  float* Dr = Or + RB * LD;           // [RB][LD] A_qk^T dO -> dDelta (own columns)
  float* E = Dr + RB * LD;            // [2][D - VT][LX] export: own columns of the peers' rows (erow)
  float* Xs = E + 2 * (D - VT) * LX;  // [C][LX] X_k of the chunk: own K rows (columns of Xs)
  float* eg = Xs + C * LX;            // [D]
  // bf16 inputs on tensor cores: the S' update's operands as bf16 tiles over Qr and Wr, as in
  // the single-block program (At = [scale Q~ | -W], Bt = [dO | dDelta own columns])
  constexpr bool kBf = kTC && std::is_same_v<T, bfloat16>;
  constexpr int LP = 2 * D + 8;
  static_assert(2 * LP == 4 * LD);
  auto* At = reinterpret_cast<bfloat16*>(Qr);
  auto* Bt = reinterpret_cast<bfloat16*>(Wr);
  const int tid = blk.tid();
  const int lane = tid & 31, warp = tid >> 5;
  const int64_t b = bh / dm.H, h = bh % dm.H;
  blk.allow_dependents();  // the intra adjoint may launch: it waits on scan_progress

  for (int e = tid; e < D * D; e += NT_) Sp[(e / D) * LD + e % D] = a.dht ? a.dht[bh * D * D + e] : 0.0f;
  constexpr int kAccN = kTC ? 4 * SC::NACC_T : SC::NACC_S;
  float acc[kAccN];
  KDA_UNROLL
  for (int m = 0; m < kAccN; ++m) acc[m] = 0.0f;

  // Register prefetch one step ahead, as in the single-block program.
  constexpr int MS = SC::MS, MR = SC::MR, MRV = SC::MRV;
  float pSr[2 * MS];
  Pair<T> pW[MR], pQ[MR], pO[MR], pD[MRV] = {};  // raw pairs (guarded loops: zero where unused)
  Pair<float> pK[MR], pU[MR];
  float pE = 0.0f;
  auto fetch_state = [&](int64_t n) {  // own rows of h[n]; gamma[n]
    const float* hn = a.h + (bh * NT + n) * D * D;
    KDA_UNROLL
    for (int m = 0; m < MS; ++m) {
      const int e = 2 * (tid + m * NT_);
      ld2(hn, c0 * D + e, pSr[2 * m], pSr[2 * m + 1]);
    }
    if (tid < D) pE = ws.gamma[(bh * NT + n) * D + tid];
  };
  auto fetch_rows = [&](int64_t n, int rb) {
    const int64_t row0 = bh * Tp + n * C + rb * RB;  // workspace row
    const int64_t t0 = n * C + rb * RB;              // token row
    KDA_UNROLL
    for (int m = 0; m < MR; ++m) {
      const int e = 2 * (tid + m * NT_);
      const int r = e / D, i = e % D;
      const int64_t gi = (row0 + r) * D + i;
      pW[m] = ld_pair(static_cast<const T*>(ws.W), gi);
      pQ[m] = ld_pair(static_cast<const T*>(ws.sQ), gi);
      pK[m] = ld_pair(static_cast<const float*>(ws.Kbar), gi);
      pU[m] = ld_pair(static_cast<const float*>(ws.Delta), gi);
      pO[m] = t0 + r < dm.T ? ld_pair(dO, ((b * dm.T + t0 + r) * dm.H + h) * D + i) : Pair<T>{};
    }
    KDA_UNROLL
    for (int m = 0; m < MRV; ++m) {
      const int e = 2 * (tid + m * NT_);
      if (e >= RB * VT) break;
      const int64_t gi = (row0 + e / VT) * D + c0 + e % VT;
      pD[m] = ld_pair(static_cast<const T*>(ws.AqkT_dO), gi);
    }
  };
  // E row of state row i (not of the rows [o, o + VT) its block owns)
  auto erow = [](int i, int o) { return i < o ? i : i - VT; };
  // S'[i][j] of the own columns, written by this thread: exported when row i is a peer's
  auto export_elem = [&](float* Eb, int i, int j, float v) {
    if (i < c0 || i >= c0 + VT) Eb[erow(i, c0) * LX + j - c0] = v;
  };
  // own rows of columns [p VT, (p+1) VT) from every other block p's export tile Eb
  auto gather = [&](float* Eb) {
    for (int p = 1; p < NV; ++p) {
      const int src = (vt + p) % NV;
      const float* pe = blk.peer(Eb, src);
      for (int e = tid; e < VT * VT / 4; e += NT_) {
        const int i = c0 + e / (VT / 4), cc = (e % (VT / 4)) * 4;
        copy4(Sp + i * LD + src * VT + cc, pe + erow(i, src * VT) * LX + cc);
      }
    }
  };
  fetch_state(NT - 1);
  fetch_rows(NT - 1, 0);
  for (int64_t n = NT - 1; n >= 0; --n) {
    KDA_UNROLL
    for (int m = 0; m < MS; ++m) {
      const int e = 2 * (tid + m * NT_);
      sts2(S + (e / D) * LD + e % D, pSr[2 * m], pSr[2 * m + 1]);
    }
    if (tid < D) eg[tid] = expf(pE);
    for (int rb = 0; rb < C / RB; ++rb) {
      const int64_t row0 = bh * Tp + n * C + rb * RB;  // workspace row
      KDA_UNROLL
      for (int m = 0; m < MR; ++m) {
        const int e = 2 * (tid + m * NT_);
        const int r = e / D, i = e % D;
        if constexpr (kBf) {
          sts_bits(At + r * LP + i, pQ[m].bits);
          sts_bits(At + r * LP + D + i, pW[m].bits ^ 0x80008000u);  // -W
          sts_bits(Bt + r * LP + i, pO[m].bits);
        } else {
          sts2(Wr + r * LD + i, pW[m]);
          sts2(Qr + r * LD + i, pQ[m]);
          sts2(Or + r * LD + i, pO[m]);
        }
        sts2(Kr + r * LD + i, pK[m]);
        sts2(Ur + r * LD + i, pU[m]);
      }
      KDA_UNROLL
      for (int m = 0; m < MRV; ++m) {
        const int e = 2 * (tid + m * NT_);
        if (e >= RB * VT) break;
        sts2(Dr + (e / VT) * LD + c0 + e % VT, pD[m]);
      }
      if (rb + 1 < C / RB) {
        fetch_rows(n, rb + 1);
      } else if (n > 0) {
        fetch_rows(n - 1, 0);
        fetch_state(n - 1);
      }
      blk.sync();  // also orders the S / eg stores above
      // ---- A: dDelta = A_qk^T dO + Kbar S' on the own columns -------------------------------
      if constexpr (kTC) {
        constexpr int NJ = MT * TNV;              // 16x8 tiles of [RB x VT]
        for (int jb = warp; jb < NJ; jb += NW) {  // warp-uniform
          const int m0 = (jb / TNV) * 16, n0 = c0 + (jb % TNV) * 8;
          float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          mma_acc<kSplit>(
              blk, p, D, [&](int r, int k) { return Kr[(m0 + r) * LD + k]; },
              [&](int k, int c) { return Sp[k * LD + n0 + c]; });
          for (int e = 0; e < 4; e += 2) {  // e, e + 1: columns j, j + 1 of row r
            int r, c;
            frag_rc(lane, e, r, c);
            r += m0;
            const int j = n0 + c;
            float v[2];
            for (int u = 0; u < 2; ++u) {
              float* x = Dr + r * LD + j + u;
              v[u] = *x + p[e + u];
              if constexpr (!kBf) *x = v[u];  // (kBf: the S' update reads Bt)
            }
            st2(static_cast<T*>(ws.dDelta), (row0 + r) * D + j, v[0], v[1]);
            if constexpr (kBf) st2(Bt, r * LP + D + j, v[0], v[1]);  // rounded as stored
          }
        }
      } else {
        for (int e = tid; e < RB * VT; e += NT_) {
          const int r = e / VT, j = c0 + e % VT;
          float dd = Dr[r * LD + j];
          for (int i = 0; i < D; ++i) dd += Kr[r * LD + i] * Sp[i * LD + j];
          Dr[r * LD + j] = dd;
          st(static_cast<T*>(ws.dDelta), (row0 + r) * D + j, dd);
        }
      }
      blk.sync();  // dDelta of the own columns written
      // ---- B: X_k = Delta S'^T on the own K rows (full V); S' accumulator += scale Q~^T dO -
      // W^T dDelta on the own columns ----------------------------------------------------------
      if constexpr (kTC) {
        constexpr int NJ = MT * TNV;              // 16x8 tiles of [RB x VT]
        for (int jb = warp; jb < NJ; jb += NW) {  // warp-uniform
          const int m0 = (jb / TNV) * 16, n0 = c0 + (jb % TNV) * 8;
          float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          mma_acc<kSplit>(
              blk, x, D, [&](int r, int k) { return Ur[(m0 + r) * LD + k]; },
              [&](int k, int c) { return Sp[(n0 + c) * LD + k]; });
          for (int e = 0; e < 4; e += 2) {
            int r, c;
            frag_rc(lane, e, r, c);
            sts2(Xs + (rb * RB + m0 + r) * LX + n0 - c0 + c, x[e], x[e + 1]);
          }
        }
        KDA_UNROLL
        for (int u = 0; u < SC::NACC_T; ++u) {
          const int ti = warp * SC::NACC_T + u, m0 = (ti / TNV) * 16, n0 = c0 + (ti % TNV) * 8;
          if constexpr (kBf) {
            state_update_bf16<1>(blk, acc + 4 * u, At, At + D, LP, Bt, Bt + D, LP, m0, n0, 0, RB);
          } else {
            float(&ac)[4] = *reinterpret_cast<float(*)[4]>(acc + 4 * u);
            mma_acc<kSplit>(
                blk, ac, RB, [&](int r, int k) { return Qr[k * LD + m0 + r]; },
                [&](int k, int c) { return Or[k * LD + n0 + c]; });
            mma_acc<kSplit>(
                blk, ac, RB, [&](int r, int k) { return -Wr[k * LD + m0 + r]; },
                [&](int k, int c) { return Dr[k * LD + n0 + c]; });
          }
        }
      } else {
        for (int e = tid; e < RB * VT; e += NT_) {
          const int r = e / VT, i = c0 + e % VT;
          float xk = 0.0f;
          for (int j = 0; j < D; ++j) xk += Ur[r * LD + j] * Sp[i * LD + j];
          Xs[(rb * RB + r) * LX + i - c0] = xk;
        }
        KDA_UNROLL
        for (int m = 0; m < SC::NACC_S; ++m) {
          const int e = tid + m * NT_;
          const int i = e / VT, j = c0 + e % VT;
          float s = 0.0f;
          for (int r = 0; r < RB; ++r) s += Qr[r * LD + i] * Or[r * LD + j] - Wr[r * LD + i] * Dr[r * LD + j];
          acc[m] += s;
        }
      }
      if (rb + 1 < C / RB) blk.sync();  // row tiles free for the next row block
    }
    // dgamma_s = e^gamma * sum_v S S' on the own K rows: a warp's VT / NW rows
    // i = c0 + warp + k NW, reduced at once (as in the single-block program: the same sums)
    {
      constexpr int RW = VT / NW;
      static_assert(RW >= 1 && VT % NW == 0);
      float s[RW];
      KDA_UNROLL
      for (int k = 0; k < RW; ++k) {
        const int i = c0 + warp + k * NW;
        s[k] = 0.0f;
        KDA_UNROLL
        for (int j = lane; j < D; j += 32) s[k] += S[(i - c0) * LD + j] * Sp[i * LD + j];
      }
      int k;
      const float sum = warp_sum_rows<RW>(blk, s, lane, k);
      const int i = c0 + warp + k * NW;
      if ((lane & (32 / RW - 1)) == 0) ws.dgamma_s[(bh * NT + n) * D + i] = eg[i] * sum;
    }
    blk.sync();  // S' read by B and dgamma_s: the own columns may be updated
    float* Eb = E + (n & 1) * (D - VT) * LX;
    if constexpr (kTC) {
      // S' = e^gamma S' + acc; at(u, e, i): element e of tile u, its row i and its index in Sp
      auto at = [&](int u, int e, int& i) {
        const int ti = warp * SC::NACC_T + u;
        int r, c;
        frag_rc(lane, e, r, c);
        i = (ti / TNV) * 16 + r;
        return i * LD + c0 + (ti % TNV) * 8 + c;
      };
      update_state_tiles<SC::NACC_T>(Sp, eg, acc, at);
      if (n > 0) {  // this thread's updated elements, to the export tile
        KDA_UNROLL
        for (int u = 0; u < SC::NACC_T; ++u) {
          KDA_UNROLL
          for (int e = 0; e < 4; ++e) {
            int i;
            const int x = at(u, e, i);
            export_elem(Eb, i, x - i * LD, Sp[x]);
          }
        }
      }
    } else {
      KDA_UNROLL
      for (int m = 0; m < SC::NACC_S; ++m) {
        const int e = tid + m * NT_;
        const int i = e / VT, j = c0 + e % VT;
        Sp[i * LD + j] = eg[i] * Sp[i * LD + j] + acc[m];
        acc[m] = 0.0f;
        if (n > 0) export_elem(Eb, i, j, Sp[i * LD + j]);
      }
    }
    blk.cluster_sync();  // every block's exports written; every block's reads of chunk n's Kbar done
    if (n > 0) gather(Eb);
    for (int e = tid; e < C * VT / 4; e += NT_) {  // X_k of chunk n over its Kbar rows
      const int r = e / (VT / 4), cc = (e % (VT / 4)) * 4;
      copy4(ws.Xk + (bh * Tp + n * C + r) * D + c0 + cc, Xs + r * LX + cc);
    }
    blk.sync();
    if (tid == 0) blk.publish(scan_progress(ws, dm, bh, 0));  // this block's rows of chunk n written
  }
  if (a.dh0)
    for (int e = tid; e < D * VT; e += NT_) {
      const int i = e / VT, j = c0 + e % VT;
      a.dh0[(bh * D + i) * D + j] = Sp[i * LD + j];
    }
}

}  // namespace lt::kda::KDA_BLOCKS_NS
