// Activations, CUDA backend (twin: kernels/cpu/activation.cpp; math and shapes:
// kernels/activation.h). One thread per element (grid-stride), the op a runtime argument
// (uniform across the grid). Deterministic; results match the CPU up to the last ulp or
// so of the device's expf.
#include "kernels/activation.h"
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

template <class T>
__global__ void pointwise_forward(ActivationOp op, ActivationParams p) {
  using C = compute_t<T>;
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* y = static_cast<T*>(p.y);
  const bool has_b = activation_has_b(op);
  for (int64_t i = global_thread(); i < p.n; i += grid_threads())
    y[i] = store_from_compute<T>(
        ActivationMath<C>::forward(op, load_as_compute(a[i]), has_b ? load_as_compute(b[i]) : C(0)));
}

template <class T>
__global__ void pointwise_backward(ActivationOp op, ActivationParams p) {
  using C = compute_t<T>;
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const T* dy = static_cast<const T*>(p.dy);
  T* da = static_cast<T*>(p.da);
  T* db = static_cast<T*>(p.db);
  const bool has_b = activation_has_b(op);
  for (int64_t i = global_thread(); i < p.n; i += grid_threads()) {
    C ga, gb;
    ActivationMath<C>::backward(op, load_as_compute(dy[i]), load_as_compute(a[i]), has_b ? load_as_compute(b[i]) : C(0),
                                ga, gb);
    da[i] = store_from_compute<T>(ga);
    if (has_b) db[i] = store_from_compute<T>(gb);
  }
}

// forward: y[i] = x[i - d] - x[i] (0 for the first token of a sequence);
// backward: dx[i] = dy[i + d] - dy[i] (0 for the last token's successor).
template <class T>
__global__ void token_shift_kernel(ActivationParams p) {
  using C = compute_t<T>;
  const int64_t seq = p.T * p.d;
  for (int64_t i = global_thread(); i < p.n; i += grid_threads()) {
    const int64_t in_seq = i % seq;
    if (!p.backward) {
      const T* x = static_cast<const T*>(p.a);
      const C prev = in_seq >= p.d ? load_as_compute(x[i - p.d]) : C(0);
      static_cast<T*>(p.y)[i] = store_from_compute<T>(prev - load_as_compute(x[i]));
    } else {
      const T* dy = static_cast<const T*>(p.dy);
      const C next = in_seq < seq - p.d ? load_as_compute(dy[i + p.d]) : C(0);
      static_cast<T*>(p.da)[i] = store_from_compute<T>(next - load_as_compute(dy[i]));
    }
  }
}

}  // namespace

void activation(ActivationOp op, DType dtype, const ActivationParams& p, uintptr_t stream) {
  if (p.n == 0) return;
  const cudaStream_t s = as_stream(stream);
  visit_float_dtype(dtype, "cuda", "activation", [&](auto t) {
    using T = decltype(t);
    if (op == ActivationOp::token_shift) {
      auto kernel = token_shift_kernel<T>;
      LT_LAUNCH(kernel, grid_for(p.n), kThreads, 0, s, p);
    } else if (p.backward) {
      auto kernel = pointwise_backward<T>;
      LT_LAUNCH(kernel, grid_for(p.n), kThreads, 0, s, op, p);
    } else {
      auto kernel = pointwise_forward<T>;
      LT_LAUNCH(kernel, grid_for(p.n), kThreads, 0, s, op, p);
    }
  });
}

}  // namespace lt::kern::cuda
