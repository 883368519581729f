// The CPU twin of the KDA backward's last launch, the intra adjoint (kernels/kda/intra_adjoint.h),
// on the emulated blocks of kernels/cpu/kda/emulator.h; called by the backward's twin
// (kernels/cpu/kda/twin_backward.h). Included only by the generated translation units that
// instantiate twin::intra_adjoint<D, C, T, kTC> for one line of kernels/kda/instances.def each.
#pragma once
#include "kernels/cpu/kda/emulator.h"
#include "kernels/cpu/kda/twin.h"
#include "kernels/kda/intra_adjoint.h"
#include "kernels/kda/intra_adjoint_rows.h"

namespace lt::kda::twin {

template <int D, int C, class T, bool kTC>
void intra_adjoint(const FusedArgs& a, const BackwardWorkspace& ws) {
  const int64_t NT = a.dims.NT(), BH = a.dims.B * a.dims.H;
  if constexpr (blocks::Cfg<D, C>::kIntraRows) {  // the row-ownership program
    using GR = blocks::Cfg<D, C, blocks::Cfg<D, C>::NTHR_R>;
    emu::emulate_grid(NT * BH, GR::NTHR, GR::kIntraAdjRowsFloats, [&](emu::EmuBlock& blk, int64_t g, float* sm) {
      int64_t bh, n;
      blocks::intra_adjoint_chunk(g, NT, BH, bh, n);
      if (a.lean_scan == LeanScan::lean) blocks::intra_adjoint_rows_program<GR, T, kTC, true>(a, ws, blk, bh, n, sm);
      else blocks::intra_adjoint_rows_program<GR, T, kTC, false>(a, ws, blk, bh, n, sm);
    });
    return;
  }
  using GA = typename blocks::Cfg<D, C>::Adj;
  emu::emulate_grid(NT * BH, GA::NTHR, GA::kIntraAdjFloats, [&](emu::EmuBlock& blk, int64_t g, float* sm) {
    int64_t bh, n;
    blocks::intra_adjoint_chunk(g, NT, BH, bh, n);
    if (a.lean_scan == LeanScan::lean) blocks::intra_adjoint_program<GA, T, kTC, true>(a, ws, blk, bh, n, sm);
    else blocks::intra_adjoint_program<GA, T, kTC, false>(a, ws, blk, bh, n, sm);
  });
}

}  // namespace lt::kda::twin
