// The CPU twins of the KDA fused kernels, one pass of one line of kernels/kda/instances.def
// each (bodies: kernels/cpu/kda/twin_{forward,backward}.h, instantiated in generated units);
// the entry points that dispatch to them: kernels/cpu/kda/twin.cpp.
#pragma once
#include "kernels/kda.h"

namespace lt::kda::twin {

template <int D, int C, class T, bool kTC>
void forward(const FusedArgs& a, const ForwardWorkspace& ws);
template <int D, int C, class T, bool kTC>
void backward(const FusedArgs& a, const BackwardWorkspace& ws, BackwardLaunches part);
// The backward's last launch (its own units; `a` as resolved by the backward: lean_scan full or lean).
template <int D, int C, class T, bool kTC>
void intra_adjoint(const FusedArgs& a, const BackwardWorkspace& ws);

}  // namespace lt::kda::twin
