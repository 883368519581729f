// KDA aqk_dO (backward, first launch, chunk-parallel, grid NT*B*H): AqkT_dO = A_qk^T dO
// (overview: kernels/kda_blocks.h).
#pragma once

#include "kernels/kda/chunk_ops.h"

namespace lt::kda::KDA_BLOCKS_NS {

// ======================================================================================
// aqk_dO (backward, first launch): AqkT_dO = A_qk^T dO from the forward's saved A_qk. Also
// zeroes the intra adjoint's per-head counters and the scan's progress counters
// (scan_progress). (Delta = U - W h[n] is the forward scan's, saved over U: kernels/kda/scan.h.)
// Shared: A_qk [C][LC] and a dO slice [C][LS] (kAqkFloats). One pass a V slice, one barrier.
// ======================================================================================
template <class G, class T, bool kTC, class Blk>
KDA_DEV void aqk_dO_program(const FusedArgs& a, const BackwardWorkspace& ws, Blk& blk, int64_t bh, int64_t n,
                            float* smem) {
  const Dims& dm = a.dims;
  constexpr int C = G::C, KS = G::KS, LS = G::LS, LC = G::LC, NTHR = G::NTHR;
  constexpr bool kSplit = std::is_same_v<T, float>;
  const ChunkPos cp(dm, bh, n);

  float* Aq = smem;         // [C][LC] A_qk
  float* dOs = Aq + G::CC;  // [C][LS] dO slice (0 on rows >= L)
  if (bh == 0 && n == 0)    // counters per head [H]; scan progress, first-level flags [2 B*H*NT]; ticket [1]
    for (int64_t i = blk.tid(); i < dm.H + 2 * dm.B * dm.H * dm.NT() + 1; i += NTHR) ws.counters[i] = 0u;
  const T* aqk = static_cast<const T*>(ws.Aqk) + cp.ws_row * C;
  KDA_UNROLL_N(8)
  for (int m = 0; m < C * C / NTHR; ++m) {
    const int e = blk.tid() + m * NTHR;
    Aq[(e / C) * LC + e % C] = ld(aqk, e);
  }
  auto zero = [](int, int) { return 0.0f; };
  for (int vs = 0; vs < G::NKS; ++vs) {
    const int v0 = vs * KS;
    load_in_slice<G>(blk, dm, cp, static_cast<const T*>(a.dO), v0, nullptr, dOs);
    blk.sync();  // (first pass: also orders the A_qk loads)
    block_product<kTC, kSplit, NTHR>(
        blk, C, KS, C, [&](int r, int m) { return Aq[m * LC + r]; }, [&](int m, int c) { return dOs[m * LS + c]; },
        zero, [&](int r, int c, float v) { st(static_cast<T*>(ws.AqkT_dO), cp.ws(dm, r, v0 + c), v); }, AllTiles(),
        KFromRow());
    blk.sync();
  }
}

}  // namespace lt::kda::KDA_BLOCKS_NS
