// KDA fused CUDA path: the CUDA executor of the block programs (kernels/kda/cfg.h
// states the contract a Blk fulfils; the CPU twin's executor: kernels/cpu/kda/emulator.h).
// Included by kernels/cuda/kda/forward.cuh and backward.cuh.
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/pdl.cuh"

namespace lt::kda::cuda_launch {
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
  // Scan progress (kernels/kda/block_products.h, scan_progress): publish() by one thread after a
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
  __device__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { tc::mma(d, a, b); }
  __device__ void frag_a(uint32_t (&a)[4], const uint16_t* tile, int ld, int m0, int k0) {
    tc::load_a(a, reinterpret_cast<const tc::bf16*>(tile), ld, m0, k0);
  }
  __device__ void frag_a_t(uint32_t (&a)[4], const uint16_t* tile, int ld, int m0, int k0) {
    tc::load_a_trans(a, reinterpret_cast<const tc::bf16*>(tile), ld, m0, k0);
  }
  __device__ void frag_b(uint32_t (&b)[2], const uint16_t* tile, int ld, int k0, int n0) {
    tc::load_b(b, reinterpret_cast<const tc::bf16*>(tile), ld, k0, n0);
  }
  __device__ void frag_b_t(uint32_t (&b)[2], const uint16_t* tile, int ld, int k0, int n0) {
    tc::load_b_trans(b, reinterpret_cast<const tc::bf16*>(tile), ld, k0, n0);
  }
  __device__ void copy16_async(float* dst, const float* src) { tc::cp_async16(dst, src, 16); }
  __device__ void wait_copies() {
    tc::cp_async_commit();
    tc::cp_async_wait<0>();
  }
};

// A block of a thread-block cluster (the split inter adjoint): cluster barrier and the
// peers' shared memory (DSMEM), through the sm_90 intrinsics that cooperative_groups' cluster
// group wraps (its header adds ~3 s to each unit's compile: docs/BUILD.md).
// Clusters exist from sm_90 on: the compute_80 PTX of the build gets a kernel that traps,
// never launched (scan_split picks 1 below compute capability 9.0).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define KDA_CLUSTER_DIMS(n) __cluster_dims__(n, 1, 1)
#else
#define KDA_CLUSTER_DIMS(n)
#endif
struct CudaClusterBlk : CudaBlk {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __device__ void cluster_sync() {
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
  }
  __device__ float* peer(float* p, int rank) {
    return static_cast<float*>(__cluster_map_shared_rank(p, static_cast<unsigned>(rank)));
  }
#else
  __device__ void cluster_sync() { __trap(); }
  __device__ float* peer(float* p, int) {
    __trap();
    return p;
  }
#endif
};

// Dynamic shared memory above 48 KB must be allowed per kernel, once.
template <class K>
void allow_smem(K* kernel, size_t bytes) {
  LT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace
}  // namespace lt::kda::cuda_launch
