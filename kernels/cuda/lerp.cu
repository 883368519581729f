// RWKV6's token-shift interpolations, CUDA backend (twin: kernels/cpu/lerp.cpp; the math
// and shapes: kernels/lerp.h). One thread per element of a (grid-stride), the op uniform
// across the grid; the same per-element functions as the CPU, so results agree up to the
// compiler's contraction of a * b + c.
#include "kernels/cuda/grid.h"
#include "kernels/launch.h"
#include "kernels/lerp.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

template <class T>
__global__ void lerp_kernel(LerpOp op, LerpParams p) {
  for (int64_t i = global_thread(); i < p.n; i += grid_threads()) LerpMath<T>::element(op, p, i);
}

}  // namespace

void lerp(LerpOp op, DType dtype, const LerpParams& p, uintptr_t stream) {
  if (p.n == 0) return;
  visit_float_dtype(dtype, "cuda", "lerp", [&](auto t) {
    using T = decltype(t);
    auto kernel = lerp_kernel<T>;
    LT_LAUNCH(kernel, grid_for(p.n), kThreads, 0, as_stream(stream), op, p);
  });
}

}  // namespace lt::kern::cuda
