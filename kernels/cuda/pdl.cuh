// Programmatic dependent launch (PDL, compute capability 9.0 and up) for chains of kernels in
// one stream. A kernel launched with LT_LAUNCH_PDL may start while the kernel before it in the
// stream is still running: its blocks are scheduled onto SMs as the previous grid's blocks
// retire, and its launch latency overlaps the previous grid's tail. A kernel launched this
// way calls pdl_enter() first, before any global-memory access: it waits until the previous
// grid has completed and its writes are visible (pdl_wait), then allows the next PDL kernel to
// launch (pdl_launch_dependents). (KDA's intra adjoint instead reads per-chunk progress counts
// that the grid before it publishes, and calls pdl_wait() only before it ends:
// kernels/kda/intra_adjoint.h.) Both instructions are no-ops under a plain launch.
//
// pdl_enabled(): the current device has compute capability >= 9.0 and the environment
// variable LINTRAIN_PDL is not "0" (read once per process; "0" gives plain launches, for
// same-binary comparisons). Otherwise LT_LAUNCH_PDL is LT_LAUNCH.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "kernels/cuda/cuda_check.h"
#include "kernels/launch.h"

namespace lt {

// Waits until the grid before this one in the stream has completed and its writes are
// visible (griddepcontrol.wait).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Lets the next PDL grid of the stream launch once every block of this grid has executed this
// or exited (griddepcontrol.launch_dependents).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_launch_dependents();
}

bool pdl_enabled();  // kernels/cuda/pdl.cu

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic stream serialization
// attribute when pdl_enabled().
template <class... P, class... A>
void launch_pdl(const char* name, const char* file, int line, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, A&&... args) {
  if (!pdl_enabled()) {
    kernel<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
    return;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
  if (err != cudaSuccess) cuda_fail(err, (std::string("launch of ") + name).c_str(), file, line);
}

}  // namespace lt

// LT_LAUNCH (kernels/launch.h) for a kernel that begins with lt::pdl_enter().
#define LT_LAUNCH_PDL(kernel, grid, block, smem, stream, ...)                                                        \
  do {                                                                                                               \
    ::lt::launch_pdl(#kernel, __FILE__, __LINE__, (kernel), dim3(grid), dim3(block), (smem), (stream), __VA_ARGS__); \
    ::lt::cuda_check_launch(#kernel, __FILE__, __LINE__);                                                            \
    ::lt::count_launch();                                                                                            \
  } while (0)
