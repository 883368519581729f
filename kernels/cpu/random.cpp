// Random fills, CPU backend (twin: kernels/cuda/random.cu); the math is in
// kernels/philox.h, shared with the CUDA backend so both give bit-identical elements.
//   uniform: out[i] = a + (b - a) * U(seed, offset + i)
//   normal:  out[i] = a + b * N(seed, offset + i)
// i is the row-major logical index (IterParams keeps row-major order); the value is
// computed in double and rounded once to the output dtype (bf16/f16 through f32).
#include "kernels/elementwise_ops.h"
#include "kernels/philox.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class T>
void random_loop(RandomKind kind, const RandomParams& p) {
  T* out = static_cast<T*>(p.it.data[0]);
  int64_t i = 0;
  iter_for_each<1>(p.it, [&](const int64_t(&o)[1]) {
    const uint64_t n = p.offset + static_cast<uint64_t>(i++);
    double v;
    if (kind == RandomKind::uniform) {
      v = philox::rn_add(p.a, philox::rn_mul(p.b - p.a, philox::uniform_double(p.seed, n)));
    } else {
      v = philox::rn_add(p.a, philox::rn_mul(p.b, philox::normal_double(p.seed, n)));
    }
    out[o[0]] = element_from_double<T>(v);
  });
}

}  // namespace

void random(RandomKind kind, DType dtype, const RandomParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "random", [&](auto t) { random_loop<decltype(t)>(kind, p); });
}

}  // namespace lt::kern::cpu
