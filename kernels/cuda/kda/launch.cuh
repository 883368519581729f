// KDA fused CUDA path: thin __global__ wrappers around the block programs of
// kernels/kda_blocks.h (the CPU twins in kernels/cpu/kda/twin.h run the same programs) and the
// launch sequence of each pass. Included by the generated translation units that instantiate
// forward<D, C, T, kTC> or backward<...> for one line of kernels/kda/instances.def each
// (kernels/CMakeLists.txt); the entry points: kernels/cuda/kda.cu.
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kda/launch.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/kda.h"
#include "kernels/kda_blocks.h"
#include "kernels/launch.h"

namespace lt::kda::cuda_launch {
namespace blocks = blocks_dev;  // kernels/kda_blocks.h: the device-side namespace
namespace {

struct CudaBlk {
  __device__ int tid() const { return static_cast<int>(threadIdx.x); }
  __device__ void sync() { __syncthreads(); }
  __device__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
  __device__ float shfl_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
  __device__ void fence() { __threadfence(); }
  __device__ uint32_t arrive(uint32_t* counter) { return atomicAdd(counter, 1u); }
  __device__ void acquire() { __threadfence(); }
  __device__ float load_cg(const float* p) { return __ldcg(p); }
  // Scan progress (kernels/kda/block_common.h, scan_progress): publish() by one thread after a
  // block barrier that follows the block's writes (fence, then the add: the grid-barrier
  // pattern); wait_progress() by one thread, a block barrier after it.
  __device__ void publish(uint32_t* counter) {
    __threadfence();
    atomicAdd(counter, 1u);
  }
  __device__ void wait_progress(const uint32_t* counter, uint32_t target) {
    for (;;) {
      uint32_t v;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
      if (v >= target) return;
      __nanosleep(200);
    }
  }
  // Programmatic dependent launch (kernels/cuda/pdl.cuh): let the next grid of the stream
  // launch now; wait until the grid before this one has completed and its writes are visible.
  // Both are no-ops under a plain launch.
  __device__ void allow_dependents() { pdl_launch_dependents(); }
  __device__ void wait_prior_grid() { pdl_wait(); }
  __device__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
  __device__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { tc::mma_tf32(d, a, b); }
  __device__ void copy16_async(float* dst, const float* src) { tc::cp_async16(dst, src, 16); }
  __device__ void wait_copies() {
    tc::cp_async_commit();
    tc::cp_async_wait<0>();
  }
};

// A block of a thread-block cluster (the split inter adjoint): cluster barrier and the
// peers' shared memory (DSMEM).
// Clusters exist from sm_90 on: the compute_80 PTX of the build gets a kernel that traps,
// never launched (scan_split picks 1 below compute capability 9.0).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define KDA_CLUSTER_DIMS(n) __cluster_dims__(n, 1, 1)
#else
#define KDA_CLUSTER_DIMS(n)
#endif
struct CudaClusterBlk : CudaBlk {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __device__ void cluster_sync() { cooperative_groups::this_cluster().sync(); }
  __device__ float* peer(float* p, int rank) {
    return cooperative_groups::this_cluster().map_shared_rank(p, static_cast<unsigned>(rank));
  }
#else
  __device__ void cluster_sync() { __trap(); }
  __device__ float* peer(float* p, int) {
    __trap();
    return p;
  }
#endif
};

// One thin wrapper per program, on purpose: each carries its own __launch_bounds__. A shared
// template with an explicit __launch_bounds__(NTHR, 1) compiles the intra program to 104
// registers where __launch_bounds__(NTHR) gives 64 (ptxas -v, D64 C32 bf16), and is slower
// (docs/notes-kda.md, "Measurements behind the kernel constants").
// The launches are plain but one: with programmatic dependent launch (kernels/cuda/pdl.cuh)
// of every kernel, waiting for the whole grid before it, the fwd+bwd measured 1.6-2.9 % slower
// at every long row (docs/notes-kda.md, "2026-12-03 (later)"). The intra adjoint is launched
// so, and waits per chunk for the scan's progress instead (launch_backward).
template <class G, class T, bool kTC>
__global__ void __launch_bounds__(G::NTHR) kda_intra_kernel(FusedArgs a, ForwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  const int64_t NT = a.dims.NT(), g = blockIdx.x;
  blocks::intra_program<G, T, kTC>(a, ws, blk, g / NT, g % NT, reinterpret_cast<float*>(smem4));
}

template <class G, class T, bool kTC>
__global__ void __launch_bounds__(G::NTHR) kda_aqk_dO_kernel(FusedArgs a, BackwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  const int64_t NT = a.dims.NT(), g = blockIdx.x;
  blocks::aqk_dO_program<G, T, kTC>(a, ws, blk, g / NT, g % NT, reinterpret_cast<float*>(smem4));
}

template <class G, class T, bool kTC>
__global__ void __launch_bounds__(G::NTHR_I) kda_inter_kernel(FusedArgs a, ForwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  const int64_t g = blockIdx.x;
  blocks::inter_program<G, T, kTC>(a, ws, blk, g / G::NV, static_cast<int>(g % G::NV), reinterpret_cast<float*>(smem4));
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

template <class G, class T, bool kTC, bool kLean>  // G = Cfg<D, C>::Adj (512 threads at C = 64, else 256)
__global__ void __launch_bounds__(G::NTHR, G::kIntraAdjMinBlocks)
    kda_intra_adjoint_kernel(FusedArgs a, BackwardWorkspace ws) {
  extern __shared__ float4 smem4[];
  CudaBlk blk;
  int64_t bh, n;
  blocks::intra_adjoint_chunk(blockIdx.x, a.dims.NT(), a.dims.B * a.dims.H, bh, n);
  blocks::intra_adjoint_program<G, T, kTC, kLean>(a, ws, blk, bh, n, reinterpret_cast<float*>(smem4));
}

// Dynamic shared memory above 48 KB must be allowed per kernel, once.
template <class K>
void allow_smem(K* kernel, size_t bytes) {
  LT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <class G, class T, bool kTC>
void launch_forward(const FusedArgs& a, const ForwardWorkspace& ws, cudaStream_t s) {
  const int64_t NT = a.dims.NT(), BH = a.dims.B * a.dims.H;
  auto* kda_fwd_intra = &kda_intra_kernel<G, T, kTC>;
  auto* kda_fwd_inter = &kda_inter_kernel<G, T, kTC>;
  const size_t smem_intra = G::kIntraFloats * sizeof(float);
  const size_t smem_inter = G::kInterFloats * sizeof(float);
  static const bool once = [&] {
    allow_smem(kda_fwd_intra, smem_intra);
    allow_smem(kda_fwd_inter, smem_inter);
    return true;
  }();
  (void)once;
  {
    StageScope st("intra");
    LT_LAUNCH(kda_fwd_intra, dim3(static_cast<unsigned>(NT * BH)), dim3(G::NTHR), smem_intra, s, a, ws);
  }
  {
    StageScope st("inter");
    LT_LAUNCH(kda_fwd_inter, dim3(static_cast<unsigned>(G::NV * BH)), dim3(G::NTHR_I), smem_inter, s, a, ws);
  }
}

// The inter adjoint as NV-block clusters (grid NV * B * H).
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
void launch_backward(const FusedArgs& args, const BackwardWorkspace& ws, cudaStream_t s, BackwardPart part) {
  const int64_t NT = args.dims.NT(), BH = args.dims.B * args.dims.H;
  const int nv = scan_split(args);
  FusedArgs a = args;
  a.lean_scan = lean_scan(args, nv);  // the same for both parts of a split backward
  a.scan_split = nv;                  // the intra adjoint counts the scan's blocks (scan_blocks)
  auto* kda_bwd_aqk_dO = &kda_aqk_dO_kernel<G, T, kTC>;
  // the scan's form is compiled into the two adjoint programs (a runtime branch costs the full
  // form 0.4-3.4 %: docs/notes-kda.md, "2026-12-02: three products off the backward scan")
  const bool lean = a.lean_scan == 2;
  auto* kda_bwd_inter_adjoint_full = &kda_inter_adjoint_kernel<G, T, kTC, false>;
  auto* kda_bwd_inter_adjoint_lean = &kda_inter_adjoint_kernel<G, T, kTC, true>;
  using GA = typename G::Adj;
  auto* kda_bwd_intra_adjoint_full = &kda_intra_adjoint_kernel<GA, T, kTC, false>;
  auto* kda_bwd_intra_adjoint_lean = &kda_intra_adjoint_kernel<GA, T, kTC, true>;
  auto* kda_bwd_inter_adjoint = lean ? kda_bwd_inter_adjoint_lean : kda_bwd_inter_adjoint_full;
  auto* kda_bwd_intra_adjoint = lean ? kda_bwd_intra_adjoint_lean : kda_bwd_intra_adjoint_full;
  const size_t smem_aq = (a.lean_scan == 2 ? G::kAqkFloats : G::kAqkFloatsFull) * sizeof(float);
  const size_t smem_aq_max = G::kAqkFloats * sizeof(float);
  const size_t smem_adj = G::kAdjFloats * sizeof(float);
  const size_t smem_ia = GA::kIntraAdjFloats * sizeof(float);
  static const bool once = [&] {
    allow_smem(kda_bwd_aqk_dO, smem_aq_max);
    allow_smem(kda_bwd_inter_adjoint_full, smem_adj);
    allow_smem(kda_bwd_inter_adjoint_lean, smem_adj);
    allow_smem(kda_bwd_intra_adjoint_full, smem_ia);
    allow_smem(kda_bwd_intra_adjoint_lean, smem_ia);
    return true;
  }();
  (void)once;
  if (part != BackwardPart::adjoints) {
    StageScope st("aqk_dO");
    LT_LAUNCH(kda_bwd_aqk_dO, dim3(static_cast<unsigned>(NT * BH)), dim3(G::NTHR), smem_aq, s, a, ws);
  }
  if (part == BackwardPart::aqk_dO) return;
  {
    StageScope st("inter_adjoint");
    if (nv == 4) launch_inter_adjoint_split<G, T, kTC, 4>(a, ws, s);
    else if (nv == 2) launch_inter_adjoint_split<G, T, kTC, 2>(a, ws, s);
    else LT_LAUNCH(kda_bwd_inter_adjoint, dim3(static_cast<unsigned>(BH)), dim3(G::NTHR_A), smem_adj, s, a, ws);
  }
  {
    StageScope st("intra_adjoint");
    // launched while the scan runs (programmatic dependent launch: the scan's blocks let it
    // launch at their start); each block waits for its chunk's scan_progress, so the chunk
    // programs fill the SMs the scan leaves idle
    LT_LAUNCH_PDL(kda_bwd_intra_adjoint, dim3(static_cast<unsigned>(NT * BH)), dim3(GA::NTHR), smem_ia, s, a, ws);
  }
}

}  // namespace

template <int D, int C, class T, bool kTC>
void forward(const FusedArgs& a, const ForwardWorkspace& ws, cudaStream_t s) {
  launch_forward<blocks::Cfg<D, C>, T, kTC>(a, ws, s);
}

template <int D, int C, class T, bool kTC>
void backward(const FusedArgs& a, const BackwardWorkspace& ws, cudaStream_t s, BackwardPart part) {
  launch_backward<blocks::Cfg<D, C>, T, kTC>(a, ws, s, part);
}

}  // namespace lt::kda::cuda_launch
