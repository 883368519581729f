// The CPU twin of the KDA fused forward: its launches, in the CUDA launch order, on the
// emulated blocks of kernels/cpu/kda/emulator.h. Included only by the generated translation
// units that instantiate twin::forward<D, C, T, kTC> for one line of kernels/kda/instances.def
// each (kernels/CMakeLists.txt).
#pragma once
#include <algorithm>

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
void forward_impl(const FusedArgs& args, const ForwardWorkspace& ws) {
  const int64_t NT = args.dims.NT(), BH = args.dims.B * args.dims.H;
  // beside the intra only where asked for (fwd_overlap 2): intra_grid persistent blocks (3 if
  // unset), each chunk flagged; the grids still run one after the other, so every flag the scan
  // reads must already be set
  FusedArgs a = args;
  if (a.fwd_overlap == 2) {
    if (a.ready_epoch == 0) a.ready_epoch = 1;
    if (a.intra_grid == 0) a.intra_grid = 3;
  } else {
    a.ready_epoch = 0;
  }
  const int64_t grid = a.ready_epoch != 0 ? std::min<int64_t>(a.intra_grid, NT * BH) : NT * BH;
  if constexpr (G::kIntraRows) {
    emulate_grid(grid, G::NTHR_R, G::kIntraRowsFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
      blocks::intra_block<G>(blk, a, g, grid, [&](int64_t bh, int64_t n) {
        blocks::intra_rows_program<G, T, kTC>(a, ws, blk, bh, n, sm);
      });
    });
  } else {
    emulate_grid(grid, G::NTHR, G::kIntraFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
      blocks::intra_block<G>(blk, a, g, grid,
                             [&](int64_t bh, int64_t n) { blocks::intra_program<G, T, kTC>(a, ws, blk, bh, n, sm); });
    });
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
