// Random fills, CUDA backend (twin: kernels/cpu/random.cpp). Thread i computes element i
// (row-major logical index) from kernels/philox.h, the same code as the CPU, so the
// elements are bit-identical to the CPU's for every dtype.
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/philox.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

template <class T, bool Normal>
__global__ void random_kernel(RandomParams p) {
  T* out = static_cast<T*>(p.it.data[0]);
  for (int64_t i = global_thread(); i < p.it.numel; i += grid_threads()) {
    int64_t o[1];
    iter_offsets<1>(p.it, i, o);
    const uint64_t n = p.offset + static_cast<uint64_t>(i);
    double v;
    if constexpr (Normal) {
      v = philox::rn_add(p.a, philox::rn_mul(p.b, philox::normal_double(p.seed, n)));
    } else {
      v = philox::rn_add(p.a, philox::rn_mul(p.b - p.a, philox::uniform_double(p.seed, n)));
    }
    out[o[0]] = element_from_double<T>(v);
  }
}

}  // namespace

void random(RandomKind kind, DType dtype, const RandomParams& p, uintptr_t stream) {
  if (p.it.numel == 0) return;
  visit_float_dtype(dtype, "cuda", "random", [&](auto t) {
    using T = decltype(t);
    if (kind == RandomKind::normal) {
      auto kernel = random_kernel<T, true>;
      LT_LAUNCH(kernel, grid_for(p.it.numel), kThreads, 0, as_stream(stream), p);
    } else {
      auto kernel = random_kernel<T, false>;
      LT_LAUNCH(kernel, grid_for(p.it.numel), kThreads, 0, as_stream(stream), p);
    }
  });
}

}  // namespace lt::kern::cuda
