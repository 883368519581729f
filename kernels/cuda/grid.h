// Launch geometry for the simple grid-stride kernels of the runtime ops (elementwise,
// convert, reduce, scan, random): 256 threads per block, at most kMaxBlocks blocks; each
// thread loops i += gridDim.x * blockDim.x, so any int64 element count is covered.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace lt::kern::cuda {

inline constexpr int kThreads = 256;
inline constexpr int64_t kMaxBlocks = 65536;

inline dim3 grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return dim3(static_cast<unsigned>(blocks));
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

inline cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

// 16 bytes of T: what one vector load or store of the dense elementwise paths moves.
template <class T>
struct alignas(16) Vec16 {
  static constexpr int n = 16 / static_cast<int>(sizeof(T));
  T v[n];
};
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace lt::kern::cuda
