// RWKV6's token-shift interpolations, CPU backend (twin: kernels/cuda/lerp.cu; the math and
// shapes: kernels/lerp.h, whose per-element functions both backends run: here one element at a time).
#include "kernels/lerp.h"
#include "kernels/table.h"

namespace lt::kern::cpu {

void lerp(LerpOp op, DType dtype, const LerpParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "lerp", [&](auto t) {
    using T = decltype(t);
    for (int64_t i = 0; i < p.n; ++i) LerpMath<T, 1>::element(op, p, i);
  });
}

}  // namespace lt::kern::cpu
