// Elementwise kernels, CUDA backend (twin: kernels/cpu/elementwise.cpp; same functors from
// kernels/elementwise_ops.h). One grid-stride kernel per (op, dtype): thread i computes
// the operand offsets of linear index i from IterParams (one multiply per operand when
// the engine could merge every dim, the usual dense case) and computes in float (double
// for f64), rounding once on store.
#include "kernels/cuda/grid.h"
#include "kernels/elementwise_ops.h"
#include "kernels/launch.h"
#include "kernels/table.h"

namespace lt::kern::cuda {
namespace {

template <class T, class Op>
__global__ void binary_kernel(IterParams p) {
  T* out = static_cast<T*>(p.data[0]);
  const T* a = static_cast<const T*>(p.data[1]);
  const T* b = static_cast<const T*>(p.data[2]);
  Op op;
  for (int64_t i = global_thread(); i < p.numel; i += grid_threads()) {
    int64_t o[3];
    iter_offsets<3>(p, i, o);
    out[o[0]] = store_from_compute<T>(op(load_as_compute(a[o[1]]), load_as_compute(b[o[2]])));
  }
}

template <class T, class Op>
__global__ void unary_kernel(IterParams p, compute_t<T> alpha, compute_t<T> beta) {
  T* out = static_cast<T*>(p.data[0]);
  const T* x = static_cast<const T*>(p.data[1]);
  Op op;
  for (int64_t i = global_thread(); i < p.numel; i += grid_threads()) {
    int64_t o[2];
    iter_offsets<2>(p, i, o);
    out[o[0]] = store_from_compute<T>(op(load_as_compute(x[o[1]]), alpha, beta));
  }
}

template <class T>
__global__ void where_kernel(IterParams p) {
  T* out = static_cast<T*>(p.data[0]);
  const T* c = static_cast<const T*>(p.data[1]);
  const T* a = static_cast<const T*>(p.data[2]);
  const T* b = static_cast<const T*>(p.data[3]);
  for (int64_t i = global_thread(); i < p.numel; i += grid_threads()) {
    int64_t o[4];
    iter_offsets<4>(p, i, o);
    out[o[0]] = load_as_compute(c[o[1]]) != 0 ? a[o[2]] : b[o[3]];
  }
}

template <class T>
__global__ void fill_kernel(IterParams p, T value) {
  T* out = static_cast<T*>(p.data[0]);
  for (int64_t i = global_thread(); i < p.numel; i += grid_threads()) {
    int64_t o[1];
    iter_offsets<1>(p, i, o);
    out[o[0]] = value;
  }
}

}  // namespace

void binary(BinaryOp op, DType dtype, const IterParams& p, uintptr_t stream) {
  if (p.numel == 0) return;
  visit_float_dtype(dtype, "cuda", "binary", [&](auto t) {
    using T = decltype(t);
    visit_binary(op, [&](auto f) {
      auto kernel = binary_kernel<T, decltype(f)>;
      LT_LAUNCH(kernel, grid_for(p.numel), kThreads, 0, as_stream(stream), p);
    });
  });
}

void unary(UnaryOp op, DType dtype, const IterParams& p, double alpha, double beta, uintptr_t stream) {
  if (p.numel == 0) return;
  visit_float_dtype(dtype, "cuda", "unary", [&](auto t) {
    using T = decltype(t);
    using C = compute_t<T>;
    visit_unary(op, [&](auto f) {
      auto kernel = unary_kernel<T, decltype(f)>;
      LT_LAUNCH(kernel, grid_for(p.numel), kThreads, 0, as_stream(stream), p, static_cast<C>(alpha),
                static_cast<C>(beta));
    });
  });
}

void where(DType dtype, const IterParams& p, uintptr_t stream) {
  if (p.numel == 0) return;
  visit_float_dtype(dtype, "cuda", "where", [&](auto t) {
    auto kernel = where_kernel<decltype(t)>;
    LT_LAUNCH(kernel, grid_for(p.numel), kThreads, 0, as_stream(stream), p);
  });
}

void fill(DType dtype, const IterParams& p, double value, uintptr_t stream) {
  if (p.numel == 0) return;
  visit_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    auto kernel = fill_kernel<T>;
    LT_LAUNCH(kernel, grid_for(p.numel), kThreads, 0, as_stream(stream), p, element_from_double<T>(value));
  });
}

}  // namespace lt::kern::cuda
