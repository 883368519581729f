// Elementwise kernels, CUDA backend (twin: kernels/cpu/elementwise.cpp; same functors from
// kernels/elementwise_ops.h). One grid-stride kernel per (op, dtype): thread i computes
// the operand offsets of linear index i from IterParams (one multiply per operand when
// the engine could merge every dim, the usual dense case) and computes in float (double
// for f64), rounding once on store. Dense operands (ndim 1, unit strides, 16-byte aligned) take
// the vector path: 16 bytes per operand per access, the same functor on every element.
// A binary op whose one operand is a row repeated over the rows of the other (a bias [n] over
// [R, n], n a multiple of the vector) takes the same path, the row read through its column.
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

// True when operands 0..nops-1 are dense (ndim 1, stride 1) and 16-byte aligned.
inline bool dense_aligned(const IterParams& p, int nops) {
  if (p.ndim != 1) return false;
  for (int k = 0; k < nops; ++k)
    if (p.strides[k][0] != 1 || !aligned16(p.data[k])) return false;
  return true;
}

// Dense binary op: thread i does vector i (elements [i n, i n + n)), the tail (< n elements)
// goes to the first threads one element each.
template <class T, class Op>
__global__ void binary_dense_kernel(T* out, const T* a, const T* b, int64_t numel) {
  using V = Vec16<T>;
  Op op;
  const int64_t nvec = numel / V::n;
  for (int64_t i = global_thread(); i < nvec; i += grid_threads()) {
    const V va = reinterpret_cast<const V*>(a)[i], vb = reinterpret_cast<const V*>(b)[i];
    V vo;
#pragma unroll
    for (int e = 0; e < V::n; ++e)
      vo.v[e] = store_from_compute<T>(op(load_as_compute(va.v[e]), load_as_compute(vb.v[e])));
    reinterpret_cast<V*>(out)[i] = vo;
  }
  for (int64_t i = nvec * V::n + global_thread(); i < numel; i += grid_threads())
    out[i] = store_from_compute<T>(op(load_as_compute(a[i]), load_as_compute(b[i])));
}

// Dense binary op over [rows, row_vecs] vectors where a (a_row) or b (b_row) is one row of
// row_vecs vectors repeated over every row (stride 0 between rows).
template <class T, class Op>
__global__ void binary_rowcast_kernel(T* out, const T* a, const T* b, int64_t nvec, int64_t row_vecs, bool a_row,
                                      bool b_row) {
  using V = Vec16<T>;
  Op op;
  for (int64_t i = global_thread(); i < nvec; i += grid_threads()) {
    const int64_t col = i % row_vecs;
    const V va = reinterpret_cast<const V*>(a)[a_row ? col : i], vb = reinterpret_cast<const V*>(b)[b_row ? col : i];
    V vo;
#pragma unroll
    for (int e = 0; e < V::n; ++e)
      vo.v[e] = store_from_compute<T>(op(load_as_compute(va.v[e]), load_as_compute(vb.v[e])));
    reinterpret_cast<V*>(out)[i] = vo;
  }
}

// True when p is [rows, n] with out dense, n a multiple of V's width, all three aligned, and
// each of a and b either dense or one row repeated (row stride 0, unit column stride).
template <class T>
bool rowcast_aligned(const IterParams& p, bool& a_row, bool& b_row) {
  if (p.ndim != 2 || p.shape[1] % Vec16<T>::n != 0) return false;
  const int64_t n = p.shape[1];
  for (int k = 0; k < 3; ++k)
    if (p.strides[k][1] != 1 || !aligned16(p.data[k])) return false;
  if (p.strides[0][0] != n) return false;
  auto dense_or_row = [&](int k, bool& row) {
    row = p.strides[k][0] == 0;
    return row || p.strides[k][0] == n;
  };
  return dense_or_row(1, a_row) && dense_or_row(2, b_row);
}

template <class T, class Op>
__global__ void unary_dense_kernel(T* out, const T* x, int64_t numel, compute_t<T> alpha, compute_t<T> beta) {
  using V = Vec16<T>;
  Op op;
  const int64_t nvec = numel / V::n;
  for (int64_t i = global_thread(); i < nvec; i += grid_threads()) {
    const V vx = reinterpret_cast<const V*>(x)[i];
    V vo;
#pragma unroll
    for (int e = 0; e < V::n; ++e) vo.v[e] = store_from_compute<T>(op(load_as_compute(vx.v[e]), alpha, beta));
    reinterpret_cast<V*>(out)[i] = vo;
  }
  for (int64_t i = nvec * V::n + global_thread(); i < numel; i += grid_threads())
    out[i] = store_from_compute<T>(op(load_as_compute(x[i]), alpha, beta));
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

// Dense fill: thread i stores vector i, the tail (< n elements) goes to the first threads.
template <class T>
__global__ void fill_dense_kernel(T* out, int64_t numel, T value) {
  using V = Vec16<T>;
  V vv;
#pragma unroll
  for (int e = 0; e < V::n; ++e) vv.v[e] = value;
  const int64_t nvec = numel / V::n;
  for (int64_t i = global_thread(); i < nvec; i += grid_threads()) reinterpret_cast<V*>(out)[i] = vv;
  for (int64_t i = nvec * V::n + global_thread(); i < numel; i += grid_threads()) out[i] = value;
}

}  // namespace

void binary(BinaryOp op, DType dtype, const IterParams& p, uintptr_t stream) {
  if (p.numel == 0) return;
  visit_float_dtype(dtype, "cuda", "binary", [&](auto t) {
    using T = decltype(t);
    visit_binary(op, [&](auto f) {
      if (dense_aligned(p, 3)) {
        auto kernel = binary_dense_kernel<T, decltype(f)>;
        const int64_t work = p.numel / Vec16<T>::n > 0 ? p.numel / Vec16<T>::n : p.numel;
        LT_LAUNCH(kernel, grid_for(work), kThreads, 0, as_stream(stream), static_cast<T*>(p.data[0]),
                  static_cast<const T*>(p.data[1]), static_cast<const T*>(p.data[2]), p.numel);
        return;
      }
      bool a_row = false, b_row = false;
      if (rowcast_aligned<T>(p, a_row, b_row)) {
        auto kernel = binary_rowcast_kernel<T, decltype(f)>;
        const int64_t nvec = p.numel / Vec16<T>::n;
        LT_LAUNCH(kernel, grid_for(nvec), kThreads, 0, as_stream(stream), static_cast<T*>(p.data[0]),
                  static_cast<const T*>(p.data[1]), static_cast<const T*>(p.data[2]), nvec, p.shape[1] / Vec16<T>::n,
                  a_row, b_row);
        return;
      }
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
      if (dense_aligned(p, 2)) {
        auto kernel = unary_dense_kernel<T, decltype(f)>;
        const int64_t work = p.numel / Vec16<T>::n > 0 ? p.numel / Vec16<T>::n : p.numel;
        LT_LAUNCH(kernel, grid_for(work), kThreads, 0, as_stream(stream), static_cast<T*>(p.data[0]),
                  static_cast<const T*>(p.data[1]), p.numel, static_cast<C>(alpha), static_cast<C>(beta));
        return;
      }
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
    if (dense_aligned(p, 1)) {
      auto kernel = fill_dense_kernel<T>;
      const int64_t work = p.numel / Vec16<T>::n > 0 ? p.numel / Vec16<T>::n : p.numel;
      LT_LAUNCH(kernel, grid_for(work), kThreads, 0, as_stream(stream), static_cast<T*>(p.data[0]), p.numel,
                element_from_double<T>(value));
      return;
    }
    auto kernel = fill_kernel<T>;
    LT_LAUNCH(kernel, grid_for(p.numel), kThreads, 0, as_stream(stream), p, element_from_double<T>(value));
  });
}

}  // namespace lt::kern::cuda
