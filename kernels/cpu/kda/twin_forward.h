// The CPU twin of the KDA fused forward: its launches, in the CUDA launch order, on the
// emulated blocks of kernels/cpu/kda/emulator.h. Included only by the generated translation
// units that instantiate twin::forward<D, C, T, kTC> for one line of kernels/kda/instances.def
// each (kernels/CMakeLists.txt).
#pragma once
#include "kernels/cpu/kda/emulator.h"
#include "kernels/cpu/kda/twin.h"
#include "kernels/kda/intra.h"
#include "kernels/kda/intra_rows.h"
#include "kernels/kda/scan.h"

namespace lt::kda::twin {
namespace {
using emu::EmuBlock;
using emu::emulate_grid;

template <class G, class T, bool kTC>
void forward_impl(const FusedArgs& a, const ForwardWorkspace& ws) {
  const int64_t NT = a.dims.NT(), BH = a.dims.B * a.dims.H;
  if constexpr (G::kIntraRows) {
    emulate_grid(NT * BH, G::NTHR_R, G::kIntraRowsFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
      blocks::intra_rows_program<G, T, kTC>(a, ws, blk, g / NT, g % NT, sm);
    });
  } else {
    emulate_grid(NT * BH, G::NTHR, G::kIntraFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
      blocks::intra_program<G, T, kTC>(a, ws, blk, g / NT, g % NT, sm);
    });
  }
  // the two-level scan: one grid as on CUDA, tickets in block order
  if constexpr (kTC) {
    if (two_level_forward(a)) {
      emulate_grid(fwd_two_level_blocks(a), G::NTHR_I, G::kFwdTwoLevelFloats,
                   [&](EmuBlock& blk, int64_t j, float* sm) { blocks::forward_scan_item<G, T>(a, ws, blk, j, sm); });
      return;
    }
  }
  emulate_grid(G::NV * BH, G::NTHR_I, G::kInterFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
    blocks::inter_program<G, T, kTC>(a, ws, blk, g / G::NV, static_cast<int>(g % G::NV), sm);
  });
}

}  // namespace

template <int D, int C, class T, bool kTC>
void forward(const FusedArgs& a, const ForwardWorkspace& ws) {
  forward_impl<blocks::Cfg<D, C>, T, kTC>(a, ws);
}

}  // namespace lt::kda::twin
