// KDA fused CUDA path, between its translation units: kernels/cuda/kda.cu (the entry points,
// the argument checks and the host-side picks below) calls one launcher per head dim and
// pass, each compiled in its own translation unit (kernels/cuda/kda/{forward,backward}_d{64,128}.cu,
// the bodies in kernels/cuda/kda/launch.cuh), so the build compiles them in parallel.
#pragma once
#include <cuda_runtime.h>

#include "kernels/kda.h"

namespace lt::kda::cuda_launch {

// The forward (2 launches) and the backward (3, or `part` of them) at head dim D, for every
// chunk and dtype of that head dim; the arguments are already checked.
template <int D>
void forward(const FusedArgs& a, const ForwardWorkspace& ws, cudaStream_t s);
template <int D>
void backward(const FusedArgs& a, const BackwardWorkspace& ws, cudaStream_t s, BackwardPart part);

// The split of the inter adjoint (1, 2 or 4) and the scan's form (FusedArgs::lean_scan, 1 or 2)
// that a backward launches with (kernels/cuda/kda.cu).
int scan_split(const FusedArgs& a);
int lean_scan(const FusedArgs& a, int nv);

}  // namespace lt::kda::cuda_launch
