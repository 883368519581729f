// KDA block programs: block-level products over shared-memory operands (tensor cores or fp32 FMA).
#pragma once
#include "kernels/kda/tiles.h"

namespace lt::kda::KDA_BLOCKS_NS {

// ---- block-level products -------------------------------------------------------------
// A finish that also takes (r, c, v0, v1), the adjacent columns c and c + 1 of one row, is
// called that way on the tensor-core path (an mma C fragment holds such pairs), so that a
// store to global memory goes out as one 32-bit (bf16) or 64-bit (fp32) store: per-element
// 2-byte stores stall the scans (measured: docs/notes-kda.md, "Measurements behind the
// kernel constants").
template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;
// For r < M, c < N (M a multiple of 16, N of 8; runtime values):
//   finish(r, c, init(r, c) + sum_k A(r, k) B(k, c))
// need(m0, n0): whether the 16x8 tile at (m0, n0) is needed (skipped tiles are not written).
// kTC: tensor cores, one warp per tile, k over [0, K) (K a multiple of 8; entries outside the
// product's true range must read as 0). Otherwise one thread per element, k over
// krange(r, c, lo, hi) (defaults [0, K)), fp32 FMAs.
struct AllTiles {
  KDA_DEV bool operator()(int, int) const { return true; }
};
struct FullK {
  KDA_DEV void operator()(int, int, int&, int&) const {}
};
template <bool kTC, bool kSplit, int NTHR, class Blk, class FA, class FB, class FI, class FO, class FN = AllTiles,
          class FK = FullK>
KDA_DEV void block_product(Blk& blk, int M, int N, int K, FA a_at, FB b_at, FI init, FO finish, FN need = FN(),
                           FK krange = FK()) {
  if constexpr (kTC) {
    const int lane = blk.tid() & 31, warp = blk.tid() >> 5;
    const int ntn = N / 8, ntiles = (M / 16) * ntn;
    for (int ti = warp; ti < ntiles; ti += NTHR / 32) {
      const int m0 = (ti / ntn) * 16, n0 = (ti % ntn) * 8;
      if (!need(m0, n0)) continue;  // warp-uniform
      float acc[4];
      KDA_UNROLL
      for (int e = 0; e < 4; ++e) {
        int r, c;
        frag_rc(lane, e, r, c);
        acc[e] = init(m0 + r, n0 + c);
      }
      mma_acc<kSplit>(
          blk, acc, K, [&](int r, int k) { return a_at(m0 + r, k); }, [&](int k, int c) { return b_at(k, n0 + c); });
      if constexpr (std::is_invocable_v<FO&, int, int, float, float>) {  // (c, c + 1) pairs
        KDA_UNROLL
        for (int e = 0; e < 4; e += 2) {
          int r, c;
          frag_rc(lane, e, r, c);
          finish(m0 + r, n0 + c, acc[e], acc[e + 1]);
        }
      } else {
        KDA_UNROLL
        for (int e = 0; e < 4; ++e) {
          int r, c;
          frag_rc(lane, e, r, c);
          finish(m0 + r, n0 + c, acc[e]);
        }
      }
    }
  } else {
    for (int e = blk.tid(); e < M * N; e += NTHR) {
      const int r = e / N, c = e % N;
      if (!need((r / 16) * 16, (c / 8) * 8)) continue;
      int lo = 0, hi = K;
      krange(r, c, lo, hi);
      float acc = init(r, c);
      for (int k = lo; k < hi; ++k) acc += a_at(r, k) * b_at(k, c);
      finish(r, c, acc);
    }
  }
}
// Two products with a shared B: finish(r, c, sum_k A1(r,k) B(k,c), sum_k A2(r,k) B(k,c)).
template <bool kTC, bool kSplit, int NTHR, class Blk, class FA1, class FA2, class FB, class FO, class FK = FullK>
KDA_DEV void block_product2(Blk& blk, int M, int N, int K, FA1 a1_at, FA2 a2_at, FB b_at, FO finish, FK krange = FK()) {
  if constexpr (kTC) {
    const int lane = blk.tid() & 31, warp = blk.tid() >> 5;
    const int ntn = N / 8, ntiles = (M / 16) * ntn;
    for (int ti = warp; ti < ntiles; ti += NTHR / 32) {
      const int m0 = (ti / ntn) * 16, n0 = (ti % ntn) * 8;
      float acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      mma_acc2<kSplit>(
          blk, acc1, acc2, K, [&](int r, int k) { return a1_at(m0 + r, k); },
          [&](int r, int k) { return a2_at(m0 + r, k); }, [&](int k, int c) { return b_at(k, n0 + c); });
      KDA_UNROLL
      for (int e = 0; e < 4; ++e) {
        int r, c;
        frag_rc(lane, e, r, c);
        finish(m0 + r, n0 + c, acc1[e], acc2[e]);
      }
    }
  } else {
    for (int e = blk.tid(); e < M * N; e += NTHR) {
      const int r = e / N, c = e % N;
      int lo = 0, hi = K;
      krange(r, c, lo, hi);
      float acc1 = 0.0f, acc2 = 0.0f;
      for (int k = lo; k < hi; ++k) {
        const float b = b_at(k, c);
        acc1 += a1_at(r, k) * b;
        acc2 += a2_at(r, k) * b;
      }
      finish(r, c, acc1, acc2);
    }
  }
}

// Where chunk n of sequence (b, h) lives. The int64 bases are computed once per block, so
// the per-element index is one multiply-add: Dims::NT() is an int64 division (a long
// software sequence on the GPU), too costly to evaluate per element.
struct ChunkPos {
  int64_t b, h, bh, n, t0;
  int L;               // valid rows
  int64_t NT;          // chunks per sequence
  int64_t in_base;     // element (0, 0) of the chunk in a [B,T,H,D] input
  int64_t in_rstride;  // H * D: one token row of a [B,T,H,D] input
  int64_t row_base;    // row 0 of the chunk in a [B,T,H] input
  int64_t ws_row;      // row 0 of the chunk in a [B,H,Tp,*] workspace tile
  int64_t ws_base;     // element (0, 0) of the chunk in a [B,H,Tp,D] workspace tile
  int D;
  KDA_DEV ChunkPos(const Dims& dm, int64_t bh_, int64_t n_)
      : b(bh_ / dm.H), h(bh_ % dm.H), bh(bh_), n(n_), t0(n_ * dm.C) {
    const int64_t rest = dm.T - t0;
    L = static_cast<int>(rest < dm.C ? rest : dm.C);
    NT = dm.NT();
    D = dm.D;
    in_rstride = dm.H * dm.D;
    row_base = (b * dm.T + t0) * dm.H + h;
    in_base = row_base * dm.D;
    ws_row = bh * NT * dm.C + t0;
    ws_base = ws_row * dm.D;
  }
  // element (r, col) of a [B,T,H,D] input; row of a [B,T,H] input
  KDA_DEV int64_t in(const Dims&, int r, int col) const { return in_base + r * in_rstride + col; }
  KDA_DEV int64_t in_row(const Dims& dm, int r) const { return row_base + r * dm.H; }
  // element (r, col) of a [B,H,Tp,D] workspace tile (r < C, so r * D fits in int)
  KDA_DEV int64_t ws(const Dims&, int r, int col) const { return ws_base + (r * D + col); }
  KDA_DEV int64_t gam(const Dims&, int col) const { return (bh * NT + n) * D + col; }
};

// The backward scan's progress for sequence bh and group g (counters[H + bh NT + g], zeroed by
// aqk_dO; one group unless the two-level scan: FusedArgs::scan_group): each of the scan's nv
// blocks of the group (scan_blocks) adds 1 once a chunk's rows of dDelta, X_k and dgamma_s (full
// scan: also X_q, X_w) are written, chunks in the scan's order hi - 1, ..., lo. So chunk n is
// ready for the intra adjoint once its group's count reaches nv (hi - n) (scan_ready); that
// lets the intra adjoint run beside the scan (programmatic dependent launch) on the SMs the scan
// leaves idle.
KDA_DEV uint32_t* scan_progress(const BackwardWorkspace& ws, const Dims& dm, int64_t bh, int64_t g) {
  return ws.counters + dm.H + bh * dm.NT() + g;
}
KDA_DEV int scan_blocks(const FusedArgs& a) { return a.scan_split > 1 ? a.scan_split : 1; }
// Groups of the two-level scan (NG; 1 for the one-level scan) and group g's chunks [lo, hi).
// Groups of `group` chunks over NT (one group where group is 0 or >= NT), and group g's [lo, hi).
KDA_DEV int64_t groups_of(int64_t NT, int group) { return group > 0 && group < NT ? (NT + group - 1) / group : 1; }
KDA_DEV void group_range(int64_t NT, int group, int64_t g, int64_t& lo, int64_t& hi) {
  const int64_t NG = groups_of(NT, group), len = NG > 1 ? group : NT;
  lo = g * len;
  hi = g + 1 < NG ? lo + len : NT;
}
KDA_DEV int64_t scan_groups(const FusedArgs& a) { return groups_of(a.dims.NT(), a.scan_group); }
KDA_DEV void scan_group_range(const FusedArgs& a, int64_t g, int64_t& lo, int64_t& hi) {
  group_range(a.dims.NT(), a.scan_group, g, lo, hi);
}
// Wait (one thread; a block barrier after it) until the scan has written chunk n of sequence bh.
template <class Blk>
KDA_DEV void wait_scan_chunk(Blk& blk, const FusedArgs& a, const BackwardWorkspace& ws, int64_t bh, int64_t n) {
  const int64_t g = scan_groups(a) > 1 ? n / a.scan_group : 0;
  int64_t lo, hi;
  scan_group_range(a, g, lo, hi);
  blk.wait_progress(scan_progress(ws, a.dims, bh, g), static_cast<uint32_t>(scan_blocks(a) * (hi - n)));
}
// The two-level scan's first level: its flag for the boundary above group g of sequence bh (its
// NV blocks add 1 each once their columns of that boundary's S' are written). The affine first
// level counts on the same flag: group g + 1's NVM map blocks add 1 each once their map is
// stored, then the chain's NV blocks (each waiting for NVM first, so no chain block counts
// before every map block has) add 1 each for S', so the boundary is ready at NVM + NV (the full
// scan's wait in inter_adjoint_program).
KDA_DEV uint32_t* scan_state_flag(const BackwardWorkspace& ws, const Dims& dm, int64_t bh, int64_t g) {
  return ws.counters + dm.H + dm.B * dm.H * dm.NT() + bh * dm.NT() + g;
}
// The two-level grid's ticket: each block takes the next number at its start and does the work
// of that number, so the first level's blocks are running before any block waits on them,
// whatever order the hardware starts blocks in.
KDA_DEV uint32_t* scan_ticket(const BackwardWorkspace& ws, const Dims& dm) {
  return ws.counters + dm.H + 2 * dm.B * dm.H * dm.NT();
}
// Element e < D*D (row-major [D][D]) of S' entering group g < NG - 1 of sequence bh from above
// (slot 0; the affine first level keeps local'_{g+1} at e + D*D and M'_{g+1} at e + 2 D*D, slots
// 1 and 2). It is kept in the rows of the group's own chunks in the gradient outputs dq, dk, dv,
// df, seen as W = D * sizeof(dtype) / 4 floats a row, rows of dq first: only the intra adjoint
// writes those rows, and only once the group's second level has published their chunks, i.e.
// after it read the state at its start (and, affine, after the chain read slots 1 and 2: the
// second level waits for the chain step that follows those reads). So the states take no
// memory of their own. A group (never the last, the only one that may be short) has scan_group
// * C full rows a tensor, and slots * D * D / W <= 4 scan_group C (check_fused_args).
KDA_DEV float* scan_state_at(const FusedArgs& a, int64_t bh, int64_t g, int e) {
  const Dims& dm = a.dims;
  const int es = a.dtype == DType::f32 ? 4 : 2, W = dm.D * es / 4;
  const int64_t rows = static_cast<int64_t>(a.scan_group) * dm.C, q = e / W;
  const int64_t k = q / rows, t = g * rows + q % rows, b = bh / dm.H, h = bh % dm.H;
  void* base = k == 0 ? a.dq : k == 1 ? a.dk : k == 2 ? a.dv : a.df;
  return reinterpret_cast<float*>(static_cast<char*>(base) + ((b * dm.T + t) * dm.H + h) * dm.D * es) + e % W;
}

// The scans' S' update on the tensor-core path: S' = e^gamma S' + acc over a warp's NTILES
// accumulator tiles (acc[4 u + e]: element e of tile u), then acc = 0. at(u, e, i) gives
// element e of tile u: its state row i and its index in Sp. Every load is issued before any
// store, so that the loads are not each ordered behind the previous element's store (a
// shared-memory round trip each).
template <int NTILES, class FAt>
KDA_DEV void update_state_tiles(float* Sp, const float* eg, float* acc, FAt at) {
  KDA_UNROLL
  for (int u = 0; u < NTILES; ++u) {
    KDA_UNROLL
    for (int e = 0; e < 4; ++e) {
      int i;
      const int x = at(u, e, i);
      acc[4 * u + e] = eg[i] * Sp[x] + acc[4 * u + e];
    }
  }
  KDA_UNROLL
  for (int u = 0; u < NTILES; ++u) {
    KDA_UNROLL
    for (int e = 0; e < 4; ++e) {
      int i;
      Sp[at(u, e, i)] = acc[4 * u + e];
      acc[4 * u + e] = 0.0f;
    }
  }
}

// FusedArgs::scale with 0 read as D^-1/2 (kernels/mixer.h), in device code.
KDA_DEV float resolved_scale(const FusedArgs& a) {
  return a.scale != 0.0f ? a.scale : 1.0f / sqrtf(static_cast<float>(a.dims.D));
}

// ---- the two-level forward scan (FusedArgs::fwd_group = G chunks a group, NG groups) ------
// First level, every group g < NG - 1 at once: local and transition, side by side in one block
// (NV blocks a sequence and group). Then the chain (NV blocks a sequence, each walking the groups
// in order: S entering g + 1 = M_g S entering g + local_g, the only serial part, one product a
// group), and the full scan of each group from its start state (NV blocks), all groups' scans
// running at once once the chain has passed them.
// Where the intermediate states live: in the trajectory h itself, rows not yet written (no
// memory of their own): local_g in h[hi_g] (the next group's first row, where the chain step
// writes the state entering g + 1 over it), M_g in h[lo_g + 1] (G >= 2; the full scan of group g
// overwrites it only after its chain step has read it).
KDA_DEV int64_t fwd_groups(const FusedArgs& a) { return groups_of(a.dims.NT(), a.fwd_group); }
KDA_DEV void fwd_group_range(const FusedArgs& a, int64_t g, int64_t& lo, int64_t& hi) {
  group_range(a.dims.NT(), a.fwd_group, g, lo, hi);
}
// Element (i, j) of the D x D state row h[n] of sequence bh.
KDA_DEV float* fwd_state_at(const FusedArgs& a, int64_t bh, int64_t n, int i, int j) {
  return a.h + ((bh * a.dims.NT() + n) * a.dims.D + i) * a.dims.D + j;
}
// Counters (ForwardWorkspace::counters, zeroed by the intra): group g's first-level blocks done
// (NV), the chain's step g done (NV), and the grid's ticket: each block takes the next number at
// its start and does that item, so every item a block waits on was taken by a block that runs.
KDA_DEV uint32_t* fwd_level1_done(const ForwardWorkspace& ws, const Dims& dm, int64_t bh, int64_t g) {
  return ws.counters + bh * dm.NT() + g;
}
KDA_DEV uint32_t* fwd_chain_done(const ForwardWorkspace& ws, const Dims& dm, int64_t bh, int64_t g) {
  return ws.counters + dm.B * dm.H * dm.NT() + bh * dm.NT() + g;
}
KDA_DEV uint32_t* fwd_ticket(const ForwardWorkspace& ws, const Dims& dm) {
  return ws.counters + 2 * dm.B * dm.H * dm.NT();
}
// The intra's block (bh, n) zeroes the counters the scan reads (2 B H NT + 1: WorkspaceBytes::counters).
KDA_DEV void zero_fwd_counters(const ForwardWorkspace& ws, const Dims& dm, int64_t bh, int64_t n) {
  ws.counters[bh * dm.NT() + n] = 0;
  ws.counters[dm.B * dm.H * dm.NT() + bh * dm.NT() + n] = 0;
  if (bh == 0 && n == 0) *fwd_ticket(ws, dm) = 0;
}

}  // namespace lt::kda::KDA_BLOCKS_NS
