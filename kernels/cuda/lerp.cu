// RWKV6's token-shift interpolations, CUDA backend (twin: kernels/cpu/lerp.cpp; the math
// and shapes: kernels/lerp.h). A thread per 16-byte pack of a token's row (grid-stride) when
// the width is a multiple of the pack and every operand is 16-byte aligned, else a thread per
// element; the op uniform across the grid. The same per-element arithmetic as the CPU, so
// results agree up to the compiler's contraction of a * b + c.
#include "kernels/cuda/grid.h"
#include "kernels/launch.h"
#include "kernels/lerp.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

template <class T, int W>
__global__ void lerp_kernel(LerpOp op, LerpParams p) {
  const int64_t units = p.n / W;
  for (int64_t u = global_thread(); u < units; u += grid_threads()) LerpMath<T, W>::element(op, p, u * W);
}

// Every operand the pass may touch is null or 16-byte aligned.
bool operands_aligned(const LerpParams& p) {
  const void* ptrs[] = {p.a, p.delta, p.out[0], p.out[1], p.dout[0], p.dout[1], p.ddelta_in, p.da_in,  p.da, p.mraw,
                        p.m, p.xl,    p.dxl[0], p.dxl[1], p.dxl[2],  p.dxl[3],  p.dxl[4],    p.ddelta, p.dm};
  for (const void* q : ptrs)
    if (q != nullptr && !aligned16(q)) return false;
  return true;
}

}  // namespace

void lerp(LerpOp op, DType dtype, const LerpParams& p, uintptr_t stream) {
  if (p.n == 0) return;
  visit_float_dtype(dtype, "cuda", "lerp", [&](auto t) {
    using T = decltype(t);
    constexpr int W = Vec16<T>::n;
    if (p.d % W == 0 && operands_aligned(p)) {
      auto kernel = lerp_kernel<T, W>;
      LT_LAUNCH(kernel, grid_for(p.n / W), kThreads, 0, as_stream(stream), op, p);
      return;
    }
    auto kernel = lerp_kernel<T, 1>;
    LT_LAUNCH(kernel, grid_for(p.n), kThreads, 0, as_stream(stream), op, p);
  });
}

}  // namespace lt::kern::cuda
