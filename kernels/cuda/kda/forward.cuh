// KDA fused CUDA path, forward: the __global__ wrappers of the intra and inter programs
// (kernels/kda/intra.h, kernels/kda/scan.h) and their launch sequence. Included only by the
// generated translation units that instantiate forward<D, C, T, kTC> for one line of
// kernels/kda/instances.def each (kernels/CMakeLists.txt); the entry points: kernels/cuda/kda.cu.
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda/kda/blk.cuh"
#include "kernels/cuda/kda/launch.h"
#include "kernels/kda.h"
#include "kernels/kda/intra.h"
#include "kernels/kda/intra_rows.h"
#include "kernels/kda/scan.h"
#include "kernels/launch.h"

namespace lt::kda::cuda_launch {
namespace blocks = blocks_dev;  // kernels/kda/cfg.h: the device-side namespace
namespace {

// One thin wrapper per program, on purpose: each carries its own __launch_bounds__
// (kernels/cuda/kda/backward.cuh says why).
template <class G, class T, bool kTC>
__global__ void __launch_bounds__(G::NTHR) kda_intra_kernel(FusedArgs a, ForwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  const int64_t NT = a.dims.NT(), g = blockIdx.x;
  blocks::intra_program<G, T, kTC>(a, ws, blk, g / NT, g % NT, reinterpret_cast<float*>(smem4));
}

template <class G, class T, bool kTC>
__global__ void __launch_bounds__(G::NTHR_R) kda_intra_rows_kernel(FusedArgs a, ForwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  const int64_t NT = a.dims.NT(), g = blockIdx.x;
  blocks::intra_rows_program<G, T, kTC>(a, ws, blk, g / NT, g % NT, reinterpret_cast<float*>(smem4));
}

template <class G, class T, bool kTC>
__global__ void __launch_bounds__(G::NTHR_I) kda_inter_kernel(FusedArgs a, ForwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  const int64_t g = blockIdx.x;
  blocks::inter_program<G, T, kTC>(a, ws, blk, g / G::NV, static_cast<int>(g % G::NV), reinterpret_cast<float*>(smem4));
}

// The two-level scan in one grid (FusedArgs::fwd_group): a block's item is its ticket
// (fwd_ticket), not its index, so every item a block waits on was taken by a running block
// whatever order the hardware starts blocks in (kernels/kda/block_products.h, fwd_groups).
// Two blocks an SM (a block's first-level work is a third shorter than the full scan's; the
// grid has many blocks): without the bound the roles together take 161 registers at D128 C32.
template <class G, class T, bool kTC>
__global__ void __launch_bounds__(G::NTHR_I, 2) kda_inter_two_level_kernel(FusedArgs a, ForwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  __shared__ uint32_t ticket;
  CudaBlk blk;
  if constexpr (kTC) {  // the two-level scan is tensor-core only (check_fused_args)
    if (threadIdx.x == 0) ticket = atomicAdd(blocks::fwd_ticket(ws, a.dims), 1u);
    __syncthreads();
    blocks::forward_scan_item<G, T>(a, ws, blk, ticket, reinterpret_cast<float*>(smem4));
  }
}

template <class G, class T, bool kTC>
void launch_forward(const FusedArgs& a, const ForwardWorkspace& ws, cudaStream_t s) {
  const int64_t NT = a.dims.NT(), BH = a.dims.B * a.dims.H;
  // the row-ownership program where it is compiled for (Cfg::kIntraRows), else the slice program
  auto* kda_fwd_intra = [] {
    if constexpr (G::kIntraRows) return &kda_intra_rows_kernel<G, T, kTC>;
    else return &kda_intra_kernel<G, T, kTC>;
  }();
  auto* kda_fwd_inter = &kda_inter_kernel<G, T, kTC>;
  auto* kda_fwd_inter_two_level = &kda_inter_two_level_kernel<G, T, kTC>;
  const size_t smem_two = G::kFwdTwoLevelFloats * sizeof(float);
  const size_t smem_intra = (G::kIntraRows ? G::kIntraRowsFloats : G::kIntraFloats) * sizeof(float);
  const int nthr_intra = G::kIntraRows ? G::NTHR_R : G::NTHR;
  const size_t smem_inter = G::kInterFloats * sizeof(float);
  static const bool once = [&] {
    allow_smem(kda_fwd_intra, smem_intra);
    allow_smem(kda_fwd_inter, smem_inter);
    allow_smem(kda_fwd_inter_two_level, smem_two);
    return true;
  }();
  (void)once;
  {
    StageScope st("intra");
    LT_LAUNCH(kda_fwd_intra, dim3(static_cast<unsigned>(NT * BH)), dim3(nthr_intra), smem_intra, s, a, ws);
  }
  {
    StageScope st("inter");
    if (two_level_forward(a)) {
      const int64_t items = fwd_two_level_blocks(a);
      LT_LAUNCH(kda_fwd_inter_two_level, dim3(static_cast<unsigned>(items)), dim3(G::NTHR_I), smem_two, s, a, ws);
    } else {
      LT_LAUNCH(kda_fwd_inter, dim3(static_cast<unsigned>(G::NV * BH)), dim3(G::NTHR_I), smem_inter, s, a, ws);
    }
  }
}

// The inter adjoint as NV-block clusters (grid NV * B * H).

}  // namespace

template <int D, int C, class T, bool kTC>
void forward(const FusedArgs& a, const ForwardWorkspace& ws, cudaStream_t s) {
  launch_forward<blocks::Cfg<D, C>, T, kTC>(a, ws, s);
}

}  // namespace lt::kda::cuda_launch
