// KDA fused CUDA path, backward: the __global__ wrappers of the aqk_dO and inter adjoint (one
// block, or a cluster split over V) programs (kernels/kda/aqk_dO.h, inter_adjoint.h) and the
// backward's launch sequence; the intra adjoint's wrapper and launch are in their own units
// (kernels/cuda/kda/intra_adjoint.cuh), so an edit of one program rebuilds its units only. Included only by the generated
// translation units that instantiate backward<D, C, T, kTC> for one line of
// kernels/kda/instances.def each (kernels/CMakeLists.txt); the entry points: kernels/cuda/kda.cu.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/kda/blk.cuh"
#include "kernels/cuda/kda/launch.h"
#include "kernels/kda.h"
#include "kernels/kda/aqk_dO.h"
#include "kernels/kda/inter_adjoint.h"
#include "kernels/launch.h"

namespace lt::kda::cuda_launch {
namespace blocks = blocks_dev;  // kernels/kda/cfg.h: the device-side namespace
namespace {

// One thin wrapper per program, on purpose: each carries its own __launch_bounds__. A shared
// template with an explicit __launch_bounds__(NTHR, 1) compiles the intra program to 104
// registers where __launch_bounds__(NTHR) gives 64 (ptxas -v, D64 C32 bf16), and is slower
// (docs/notes-kda.md, "Measurements behind the kernel constants").
// The launches are plain but one: with programmatic dependent launch (kernels/cuda/pdl.cuh)
// of every kernel, waiting for the whole grid before it, the fwd+bwd was slower at every long
// row (docs/notes-kda.md, "2026-12-03 (later)"). The intra adjoint is launched
// so, and waits per chunk for the scan's progress instead (launch_backward).
template <class G, class T, bool kTC>
__global__ void __launch_bounds__(G::NTHR) kda_aqk_dO_kernel(FusedArgs a, BackwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  const int64_t NT = a.dims.NT(), g = blockIdx.x;
  blocks::aqk_dO_program<G, T, kTC>(a, ws, blk, g / NT, g % NT, reinterpret_cast<float*>(smem4));
}

template <class G, class T, bool kTC, bool kLean>
__global__ void __launch_bounds__(G::NTHR_A) kda_inter_adjoint_kernel(FusedArgs a, BackwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  blocks::inter_adjoint_program<G, T, kTC, kLean>(a, ws, blk, blockIdx.x, reinterpret_cast<float*>(smem4));
}

// Cluster of NV blocks per (b, h); block rank in the cluster = blockIdx.x % NV (1-D).

template <class G, class T, bool kTC, int NV>
__global__ void KDA_CLUSTER_DIMS(NV) __launch_bounds__(blocks::SplitCfg<G, NV>::NTHR)
    kda_inter_adjoint_split_kernel(FusedArgs a, BackwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaClusterBlk blk;
  const int64_t g = blockIdx.x;
  blocks::inter_adjoint_split_program<G, T, kTC, NV>(a, ws, blk, g / NV, static_cast<int>(g % NV),
                                                     reinterpret_cast<float*>(smem4));
}

// The two-level scan in one grid (FusedArgs::scan_group): a block's item is its ticket
// (scan_ticket), not its index, so every item a block waits on (a boundary flag, a group map)
// was taken by a running block whatever order the hardware starts blocks in
// (kernels/kda/inter_adjoint.h, backward_scan_item).
template <class G, class T, bool kTC>
__global__ void __launch_bounds__(G::NTHR_A) kda_inter_adjoint_two_level_kernel(FusedArgs a, BackwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  __shared__ uint32_t ticket;
  CudaBlk blk;
  if constexpr (kTC) {  // the two-level scan is tensor-core only (check_fused_args)
    if (threadIdx.x == 0) ticket = atomicAdd(blocks::scan_ticket(ws, a.dims), 1u);
    __syncthreads();
    blocks::backward_scan_item<G, T>(a, ws, blk, ticket, reinterpret_cast<float*>(smem4));
  }
}

template <class G, class T, bool kTC, int NV>
void launch_inter_adjoint_split(const FusedArgs& a, const BackwardWorkspace& ws, cudaStream_t s) {
  using SC = blocks::SplitCfg<G, NV>;
  auto* kda_bwd_inter_adjoint_split = &kda_inter_adjoint_split_kernel<G, T, kTC, NV>;
  const size_t smem = SC::kFloats * sizeof(float);
  static const bool once = [&] {
    allow_smem(kda_bwd_inter_adjoint_split, smem);
    return true;
  }();
  (void)once;
  const int64_t BH = a.dims.B * a.dims.H;
  LT_LAUNCH(kda_bwd_inter_adjoint_split, dim3(static_cast<unsigned>(NV * BH)), dim3(SC::NTHR), smem, s, a, ws);
}

template <class G, class T, bool kTC>
void launch_backward(const FusedArgs& args, const BackwardWorkspace& ws, cudaStream_t s, BackwardLaunches part) {
  const int64_t NT = args.dims.NT(), BH = args.dims.B * args.dims.H;
  const bool two_level = two_level_scan(args);  // scan_group resolved by fused_backward_cuda
  const int nv = two_level ? 1 : scan_split(args);
  FusedArgs a = args;
  a.lean_scan = two_level ? LeanScan::lean : lean_scan(args, nv);  // the same for both parts of a split backward
  a.scan_split = nv;  // the intra adjoint counts the scan's blocks (scan_blocks)
  auto* kda_bwd_aqk_dO = &kda_aqk_dO_kernel<G, T, kTC>;
  // the scan's form is compiled into the two adjoint programs (a runtime branch slows the full
  // form: docs/notes-kda.md, "2026-12-02: three products off the backward scan")
  const bool lean = a.lean_scan == LeanScan::lean;
  auto* kda_bwd_inter_adjoint_full = &kda_inter_adjoint_kernel<G, T, kTC, false>;
  auto* kda_bwd_inter_adjoint_lean = &kda_inter_adjoint_kernel<G, T, kTC, true>;
  auto* kda_bwd_inter_adjoint = lean ? kda_bwd_inter_adjoint_lean : kda_bwd_inter_adjoint_full;
  const size_t smem_aq = G::kAqkFloats * sizeof(float);
  const size_t smem_adj = G::kAdjFloats * sizeof(float);
  auto* kda_bwd_inter_adjoint_two_level = &kda_inter_adjoint_two_level_kernel<G, T, kTC>;
  using SA = blocks::StateAdjCfg<G>;
  const size_t smem_two = std::max({G::kAdjFloats, SA::kFloats, SA::kMapFloats, SA::kChainFloats}) * sizeof(float);
  static const bool once = [&] {
    allow_smem(kda_bwd_aqk_dO, smem_aq);
    allow_smem(kda_bwd_inter_adjoint_full, smem_adj);
    allow_smem(kda_bwd_inter_adjoint_lean, smem_adj);
    allow_smem(kda_bwd_inter_adjoint_two_level, smem_two);
    return true;
  }();
  (void)once;
  if (part != BackwardLaunches::adjoints) {
    StageScope st("aqk_dO");
    LT_LAUNCH(kda_bwd_aqk_dO, dim3(static_cast<unsigned>(NT * BH)), dim3(G::NTHR), smem_aq, s, a, ws);
  }
  if (part == BackwardLaunches::aqk_dO) return;
  {
    StageScope st("inter_adjoint");
    if (two_level) {
      LT_LAUNCH(kda_bwd_inter_adjoint_two_level, dim3(static_cast<unsigned>(bwd_two_level_blocks(a))), dim3(G::NTHR_A),
                smem_two, s, a, ws);
    } else if (nv == 4) launch_inter_adjoint_split<G, T, kTC, 4>(a, ws, s);
    else if (nv == 2) launch_inter_adjoint_split<G, T, kTC, 2>(a, ws, s);
    else LT_LAUNCH(kda_bwd_inter_adjoint, dim3(static_cast<unsigned>(BH)), dim3(G::NTHR_A), smem_adj, s, a, ws);
  }
  {
    StageScope st("intra_adjoint");
    launch_intra_adjoint<G::D, G::C, T, kTC>(a, ws, s);  // its own unit: kernels/cuda/kda/intra_adjoint.cuh
  }
}

}  // namespace

template <int D, int C, class T, bool kTC>
void backward(const FusedArgs& a, const BackwardWorkspace& ws, cudaStream_t s, BackwardLaunches part) {
  launch_backward<blocks::Cfg<D, C>, T, kTC>(a, ws, s, part);
}

}  // namespace lt::kda::cuda_launch
