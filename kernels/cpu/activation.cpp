// Activations, CPU backend (twin: kernels/cuda/activation.cu; math and shapes:
// kernels/activation.h). One loop per element; token_shift walks [R, T, d] rows.
#include "kernels/activation.h"
#include "kernels/elementwise_ops.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class T>
void token_shift(const ActivationParams& p) {
  using C = compute_t<T>;
  const int64_t row = p.T * p.d;  // one sequence
  if (!p.backward) {
    const T* x = static_cast<const T*>(p.a);
    T* y = static_cast<T*>(p.y);
    for (int64_t i = 0; i < p.n; ++i) {
      const C prev = (i % row) >= p.d ? load_as_compute(x[i - p.d]) : C(0);
      y[i] = store_from_compute<T>(prev - load_as_compute(x[i]));
    }
  } else {
    const T* dy = static_cast<const T*>(p.dy);
    T* dx = static_cast<T*>(p.da);
    for (int64_t i = 0; i < p.n; ++i) {
      const C next = (i % row) < row - p.d ? load_as_compute(dy[i + p.d]) : C(0);
      dx[i] = store_from_compute<T>(next - load_as_compute(dy[i]));
    }
  }
}

template <class T>
void pointwise(ActivationOp op, const ActivationParams& p) {
  using C = compute_t<T>;
  using M = ActivationMath<C>;
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const bool has_b = activation_has_b(op);
  if (!p.backward) {
    T* y = static_cast<T*>(p.y);
    for (int64_t i = 0; i < p.n; ++i)
      y[i] = store_from_compute<T>(M::forward(op, load_as_compute(a[i]), has_b ? load_as_compute(b[i]) : C(0)));
  } else {
    const T* dy = static_cast<const T*>(p.dy);
    T* da = static_cast<T*>(p.da);
    T* db = static_cast<T*>(p.db);
    for (int64_t i = 0; i < p.n; ++i) {
      C ga, gb;
      M::backward(op, load_as_compute(dy[i]), load_as_compute(a[i]), has_b ? load_as_compute(b[i]) : C(0), ga, gb);
      da[i] = store_from_compute<T>(ga);
      if (has_b) db[i] = store_from_compute<T>(gb);
    }
  }
}

}  // namespace

void activation(ActivationOp op, DType dtype, const ActivationParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "activation", [&](auto t) {
    using T = decltype(t);
    if (op == ActivationOp::token_shift) token_shift<T>(p);
    else pointwise<T>(op, p);
  });
}

}  // namespace lt::kern::cpu
