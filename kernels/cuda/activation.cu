// Activations, CUDA backend (twin: kernels/cpu/activation.cpp; math and shapes:
// kernels/activation.h). One thread per element, or per 16 bytes of each operand when all
// are aligned (grid-stride), the op a runtime argument (uniform across the grid).
// Deterministic; results match the CPU up to the last ulp or so of the device's expf.
#include "kernels/activation.h"
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

// Vec: every operand 16-byte aligned; thread i then does elements [i n, i n + n) with one
// vector access per operand, and the tail (< n elements) goes to the first threads.
template <class T, bool Vec>
__global__ void pointwise_forward(ActivationOp op, ActivationParams p) {
  using C = compute_t<T>;
  using V = Vec16<T>;
  constexpr int n = Vec ? V::n : 1;
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  T* y = static_cast<T*>(p.y);
  const bool has_b = activation_has_b(op);
  auto one = [&](int64_t i) {
    y[i] = store_from_compute<T>(
        ActivationMath<C>::forward(op, load_as_compute(a[i]), has_b ? load_as_compute(b[i]) : C(0)));
  };
  const int64_t nvec = p.n / n;
  for (int64_t i = global_thread(); i < nvec; i += grid_threads()) {
    if constexpr (Vec) {
      const V va = reinterpret_cast<const V*>(a)[i];
      const V vb = has_b ? reinterpret_cast<const V*>(b)[i] : V{};
      V vy;
#pragma unroll
      for (int e = 0; e < n; ++e)
        vy.v[e] = store_from_compute<T>(
            ActivationMath<C>::forward(op, load_as_compute(va.v[e]), has_b ? load_as_compute(vb.v[e]) : C(0)));
      reinterpret_cast<V*>(y)[i] = vy;
    } else {
      one(i);
    }
  }
  if constexpr (Vec)
    for (int64_t i = nvec * n + global_thread(); i < p.n; i += grid_threads()) one(i);
}

template <class T, bool Vec>
__global__ void pointwise_backward(ActivationOp op, ActivationParams p) {
  using C = compute_t<T>;
  using V = Vec16<T>;
  constexpr int n = Vec ? V::n : 1;
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const T* dy = static_cast<const T*>(p.dy);
  T* da = static_cast<T*>(p.da);
  T* db = static_cast<T*>(p.db);
  const bool has_b = activation_has_b(op);
  auto one = [&](int64_t i) {
    C ga, gb;
    ActivationMath<C>::backward(op, load_as_compute(dy[i]), load_as_compute(a[i]), has_b ? load_as_compute(b[i]) : C(0),
                                ga, gb);
    da[i] = store_from_compute<T>(ga);
    if (has_b) db[i] = store_from_compute<T>(gb);
  };
  const int64_t nvec = p.n / n;
  for (int64_t i = global_thread(); i < nvec; i += grid_threads()) {
    if constexpr (Vec) {
      const V va = reinterpret_cast<const V*>(a)[i], vdy = reinterpret_cast<const V*>(dy)[i];
      const V vb = has_b ? reinterpret_cast<const V*>(b)[i] : V{};
      V vda, vdb;
#pragma unroll
      for (int e = 0; e < n; ++e) {
        C ga, gb;
        ActivationMath<C>::backward(op, load_as_compute(vdy.v[e]), load_as_compute(va.v[e]),
                                    has_b ? load_as_compute(vb.v[e]) : C(0), ga, gb);
        vda.v[e] = store_from_compute<T>(ga);
        vdb.v[e] = store_from_compute<T>(gb);
      }
      reinterpret_cast<V*>(da)[i] = vda;
      if (has_b) reinterpret_cast<V*>(db)[i] = vdb;
    } else {
      one(i);
    }
  }
  if constexpr (Vec)
    for (int64_t i = nvec * n + global_thread(); i < p.n; i += grid_threads()) one(i);
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
    } else {
      // the vector path when every operand of the pass is 16-byte aligned (absent ones are null)
      const bool vec = aligned16(p.a) && aligned16(p.b) &&
                       (p.backward ? aligned16(p.dy) && aligned16(p.da) && aligned16(p.db) : aligned16(p.y));
      const int64_t work = vec && p.n >= Vec16<T>::n ? p.n / Vec16<T>::n : p.n;
      if (p.backward) {
        auto kernel = vec ? pointwise_backward<T, true> : pointwise_backward<T, false>;
        LT_LAUNCH(kernel, grid_for(work), kThreads, 0, s, op, p);
      } else {
        auto kernel = vec ? pointwise_forward<T, true> : pointwise_forward<T, false>;
        LT_LAUNCH(kernel, grid_for(work), kThreads, 0, s, op, p);
      }
    }
  });
}

}  // namespace lt::kern::cuda
