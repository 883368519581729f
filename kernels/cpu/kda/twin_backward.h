// The CPU twin of the KDA fused backward: its launches, in the CUDA launch order (the last, the
// intra adjoint, in its own units: kernels/cpu/kda/twin_intra_adjoint.h), on the
// emulated blocks of kernels/cpu/kda/emulator.h. Included only by the generated translation
// units that instantiate twin::backward<D, C, T, kTC> for one line of kernels/kda/instances.def
// each (kernels/CMakeLists.txt).
#pragma once
#include <algorithm>

#include "kernels/cpu/kda/emulator.h"
#include "kernels/cpu/kda/twin.h"
#include "kernels/kda/aqk_dO.h"
#include "kernels/kda/inter_adjoint.h"

namespace lt::kda::twin {
namespace {
using emu::EmuBlock;
using emu::emulate_cluster_grid;
using emu::emulate_grid;

template <class G, class T, bool kTC>
void backward_impl(const FusedArgs& a, const BackwardWorkspace& ws, BackwardLaunches part) {
  const int64_t NT = a.dims.NT(), BH = a.dims.B * a.dims.H;
  if (part != BackwardLaunches::adjoints)
    emulate_grid(NT * BH, G::NTHR, G::kAqkFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
      blocks::aqk_dO_program<G, T, kTC>(a, ws, blk, g / NT, g % NT, sm);
    });
  if (part == BackwardLaunches::aqk_dO) return;
  auto split = [&]<int NV>() {
    using SC = blocks::SplitCfg<G, NV>;
    emulate_cluster_grid(BH, NV, SC::NTHR, SC::kFloats, [&](EmuBlock& blk, int64_t g, int rank, float* sm) {
      blocks::inter_adjoint_split_program<G, T, kTC, NV>(a, ws, blk, g, rank, sm);
    });
  };
  // the two-level scan: one grid as on CUDA, tickets in block order (kernels/kda/inter_adjoint.h,
  // backward_scan_item)
  if constexpr (kTC) {
    if (two_level_scan(a)) {
      using SA = blocks::StateAdjCfg<G>;
      emulate_grid(bwd_two_level_blocks(a), G::NTHR_A,
                   std::max({G::kAdjFloats, SA::kFloats, SA::kMapFloats, SA::kChainFloats}),
                   [&](EmuBlock& blk, int64_t j, float* sm) { blocks::backward_scan_item<G, T>(a, ws, blk, j, sm); });
      intra_adjoint<G::D, G::C, T, kTC>(a, ws);
      return;
    }
  }
  if (a.scan_split == 4) split.template operator()<4>();
  else if (a.scan_split == 2) split.template operator()<2>();
  else if (a.lean_scan == LeanScan::lean)
    emulate_grid(BH, G::NTHR_A, G::kAdjFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
      blocks::inter_adjoint_program<G, T, kTC, true>(a, ws, blk, g, sm);
    });
  else
    emulate_grid(BH, G::NTHR_A, G::kAdjFloats, [&](EmuBlock& blk, int64_t g, float* sm) {
      blocks::inter_adjoint_program<G, T, kTC, false>(a, ws, blk, g, sm);
    });
  intra_adjoint<G::D, G::C, T, kTC>(a, ws);  // its own unit: kernels/cpu/kda/twin_intra_adjoint.h
}

}  // namespace

template <int D, int C, class T, bool kTC>
void backward(const FusedArgs& a, const BackwardWorkspace& ws, BackwardLaunches part) {
  backward_impl<blocks::Cfg<D, C>, T, kTC>(a, ws, part);
}

}  // namespace lt::kda::twin
