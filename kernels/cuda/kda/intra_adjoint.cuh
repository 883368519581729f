// KDA fused CUDA path, the backward's last launch: the __global__ wrapper of the intra adjoint
// program (kernels/kda/intra_adjoint.h) and its launch, called by launch_backward
// (kernels/cuda/kda/backward.cuh). Included only by the generated translation units that
// instantiate launch_intra_adjoint<D, C, T, kTC> for one line of kernels/kda/instances.def each.
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda/kda/blk.cuh"
#include "kernels/cuda/kda/launch.h"
#include "kernels/kda.h"
#include "kernels/kda/intra_adjoint.h"
#include "kernels/kda/intra_adjoint_rows.h"
#include "kernels/launch.h"

namespace lt::kda::cuda_launch {
namespace blocks = blocks_dev;  // kernels/kda/cfg.h: the device-side namespace
namespace {

template <class G, class T, bool kTC, bool kLean>  // G = Cfg<D, C>::Adj (512 threads at C = 64, else 256)
__global__ void __launch_bounds__(G::NTHR, G::kIntraAdjMinBlocks)
    kda_intra_adjoint_kernel(FusedArgs a, BackwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  int64_t bh, n;
  blocks::intra_adjoint_chunk(blockIdx.x, a.dims.NT(), a.dims.B * a.dims.H, bh, n);
  blocks::intra_adjoint_program<G, T, kTC, kLean>(a, ws, blk, bh, n, reinterpret_cast<float*>(smem4));
}

// G = Cfg<D, C, C D / 8> (Cfg::kIntraRows): 512 / NTHR blocks an SM, so 128 registers a thread
// (D64: two at C = 32, four at C = 16, as their shared memory admits; D128: one at C = 32, two
// at C = 16).
template <class G, class T, bool kTC, bool kLean>
__global__ void __launch_bounds__(G::NTHR, 512 / G::NTHR)
    kda_intra_adjoint_rows_kernel(FusedArgs a, BackwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  int64_t bh, n;
  blocks::intra_adjoint_chunk(blockIdx.x, a.dims.NT(), a.dims.B * a.dims.H, bh, n);
  blocks::intra_adjoint_rows_program<G, T, kTC, kLean>(a, ws, blk, bh, n, reinterpret_cast<float*>(smem4));
}

// The row-ownership program (C <= 32).
template <class G, class T, bool kTC>
void launch_intra_adjoint_rows(const FusedArgs& a, const BackwardWorkspace& ws, cudaStream_t s) {
  const int64_t NT = a.dims.NT(), BH = a.dims.B * a.dims.H;
  auto* kda_bwd_intra_adjoint_full = &kda_intra_adjoint_rows_kernel<G, T, kTC, false>;
  auto* kda_bwd_intra_adjoint_lean = &kda_intra_adjoint_rows_kernel<G, T, kTC, true>;
  auto* kda_bwd_intra_adjoint = a.lean_scan == LeanScan::lean ? kda_bwd_intra_adjoint_lean : kda_bwd_intra_adjoint_full;
  const size_t smem_ia = G::kIntraAdjRowsFloats * sizeof(float);
  static const bool once = [&] {
    allow_smem(kda_bwd_intra_adjoint_full, smem_ia);
    allow_smem(kda_bwd_intra_adjoint_lean, smem_ia);
    return true;
  }();
  (void)once;
  LT_LAUNCH_PDL(kda_bwd_intra_adjoint, dim3(static_cast<unsigned>(NT * BH)), dim3(G::NTHR), smem_ia, s, a, ws);
}

}  // namespace

template <int D, int C, class T, bool kTC>
void launch_intra_adjoint(const FusedArgs& a, const BackwardWorkspace& ws, cudaStream_t s) {
  if constexpr (blocks::Cfg<D, C>::kIntraRows) {
    launch_intra_adjoint_rows<blocks::Cfg<D, C, blocks::Cfg<D, C>::NTHR_R>, T, kTC>(a, ws, s);
    return;
  } else {
    using GA = typename blocks::Cfg<D, C>::Adj;
    const int64_t NT = a.dims.NT(), BH = a.dims.B * a.dims.H;
    // the scan's form is compiled in, as in the inter adjoint (launch_backward)
    auto* kda_bwd_intra_adjoint_full = &kda_intra_adjoint_kernel<GA, T, kTC, false>;
    auto* kda_bwd_intra_adjoint_lean = &kda_intra_adjoint_kernel<GA, T, kTC, true>;
    auto* kda_bwd_intra_adjoint =
        a.lean_scan == LeanScan::lean ? kda_bwd_intra_adjoint_lean : kda_bwd_intra_adjoint_full;
    const size_t smem_ia = GA::kIntraAdjFloats * sizeof(float);
    static const bool once = [&] {
      allow_smem(kda_bwd_intra_adjoint_full, smem_ia);
      allow_smem(kda_bwd_intra_adjoint_lean, smem_ia);
      return true;
    }();
    (void)once;
    // launched while the scan runs (programmatic dependent launch: the scan's blocks let it
    // launch at their start); each block waits for its chunk's scan_progress, so the chunk
    // programs fill the SMs the scan leaves idle
    LT_LAUNCH_PDL(kda_bwd_intra_adjoint, dim3(static_cast<unsigned>(NT * BH)), dim3(GA::NTHR), smem_ia, s, a, ws);
  }
}

}  // namespace lt::kda::cuda_launch
