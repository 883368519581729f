// Elementwise kernels, CPU backend (twin: kernels/cuda/elementwise.cu).
//   binary  out[i] = op(a[i], b[i])            it: 0 out, 1 a, 2 b (broadcast via stride 0)
//   unary   out[i] = op(x[i], alpha, beta)     it: 0 out, 1 x
//   where   out[i] = cond[i] != 0 ? a[i] : b[i] it: 0 out, 1 cond, 2 a, 3 b
//   fill    out[i] = value                     it: 0 out (any dtype)
// Every element is loaded into its compute type (float; double for f64), computed and
// rounded once on store. Operands may alias the output exactly (in place): each element
// is read before it is written.
#include "kernels/elementwise_ops.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class T, class Op>
void binary_loop(const IterParams& p) {
  T* out = static_cast<T*>(p.data[0]);
  const T* a = static_cast<const T*>(p.data[1]);
  const T* b = static_cast<const T*>(p.data[2]);
  Op op;
  iter_for_each<3>(p, [&](const int64_t(&o)[3]) {
    out[o[0]] = store_from_compute<T>(op(load_as_compute(a[o[1]]), load_as_compute(b[o[2]])));
  });
}

template <class T, class Op>
void unary_loop(const IterParams& p, double alpha, double beta) {
  using C = compute_t<T>;
  T* out = static_cast<T*>(p.data[0]);
  const T* x = static_cast<const T*>(p.data[1]);
  const C ca = static_cast<C>(alpha), cb = static_cast<C>(beta);
  Op op;
  iter_for_each<2>(
      p, [&](const int64_t(&o)[2]) { out[o[0]] = store_from_compute<T>(op(load_as_compute(x[o[1]]), ca, cb)); });
}

template <class T>
void where_loop(const IterParams& p) {
  T* out = static_cast<T*>(p.data[0]);
  const T* c = static_cast<const T*>(p.data[1]);
  const T* a = static_cast<const T*>(p.data[2]);
  const T* b = static_cast<const T*>(p.data[3]);
  iter_for_each<4>(p, [&](const int64_t(&o)[4]) { out[o[0]] = load_as_compute(c[o[1]]) != 0 ? a[o[2]] : b[o[3]]; });
}

template <class T>
void fill_loop(const IterParams& p, double value) {
  T* out = static_cast<T*>(p.data[0]);
  const T v = element_from_double<T>(value);
  iter_for_each<1>(p, [&](const int64_t(&o)[1]) { out[o[0]] = v; });
}

}  // namespace

void binary(BinaryOp op, DType dtype, const IterParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "binary", [&](auto t) {
    using T = decltype(t);
    visit_binary(op, [&](auto f) { binary_loop<T, decltype(f)>(p); });
  });
}

void unary(UnaryOp op, DType dtype, const IterParams& p, double alpha, double beta, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "unary", [&](auto t) {
    using T = decltype(t);
    visit_unary(op, [&](auto f) { unary_loop<T, decltype(f)>(p, alpha, beta); });
  });
}

void where(DType dtype, const IterParams& p, uintptr_t) {
  visit_float_dtype(dtype, "cpu", "where", [&](auto t) { where_loop<decltype(t)>(p); });
}

void fill(DType dtype, const IterParams& p, double value, uintptr_t) {
  visit_dtype(dtype, [&](auto t) { fill_loop<decltype(t)>(p, value); });
}

}  // namespace lt::kern::cpu
