// Elementwise ops (engine/ops.h): validation, broadcasting, dispatch to the op table
// (kernels/table.h: binary, unary, where).
#include <stdexcept>

#include "engine/detail.h"
#include "engine/ops.h"

namespace lt::ops {
namespace {

using detail::Exec;

const char* binary_name(kern::BinaryOp op) {
#define LT_OP_NAME(name, Functor) #name,
  static const char* const names[] = {LT_BINARY_OPS(LT_OP_NAME)};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(kern::BinaryOp::count));
  return names[static_cast<int>(op)];
}

void binary_into(kern::BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  detail::check_same_device(a, b, name);
  detail::check_same_device(out, a, name);
  detail::check_float(a, name);
  detail::check_same_dtype(a, b, name);
  detail::check_same_dtype(out, a, name);
  const Tensor* operands[3] = {&out, &a, &b};
  const kern::IterParams p = detail::make_iter(out.shape(), operands, 3, name);
  Exec ex(out.device());
  ex.k.binary(op, a.dtype(), p, ex.stream);
}

Tensor binary(kern::BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  detail::check_same_device(a, b, name);
  const Shape shape = detail::broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  binary_into(op, out, a, b);
  return out;
}

const char* unary_name(kern::UnaryOp op) {
  static const char* const names[] = {LT_UNARY_OPS(LT_OP_NAME) LT_SCALAR_UNARY_OPS(LT_OP_NAME)};
#undef LT_OP_NAME
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(kern::UnaryOp::count));
  return names[static_cast<int>(op)];
}

void unary_into(kern::UnaryOp op, Tensor& out, const Tensor& x, double alpha = 0.0, double beta = 0.0) {
  const char* name = unary_name(op);
  detail::check_float(x, name);
  detail::check_same_device(out, x, name);
  detail::check_same_dtype(out, x, name);
  if (out.shape() != x.shape())
    throw std::invalid_argument(std::string(name) + ": output shape " + shape_str(out.shape()) + " != input shape " +
                                shape_str(x.shape()));
  const Tensor* operands[2] = {&out, &x};
  const kern::IterParams p = detail::make_iter(out.shape(), operands, 2, name);
  Exec ex(out.device());
  ex.k.unary(op, x.dtype(), p, alpha, beta, ex.stream);
}

Tensor unary(kern::UnaryOp op, const Tensor& x, double alpha = 0.0, double beta = 0.0) {
  detail::check_float(x, unary_name(op));
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  unary_into(op, out, x, alpha, beta);
  return out;
}

}  // namespace

#define LT_PUBLIC_BINARY(name, Functor)                                                        \
  Tensor name(const Tensor& a, const Tensor& b) { return binary(kern::BinaryOp::name, a, b); } \
  void name##_out(Tensor& out, const Tensor& a, const Tensor& b) { binary_into(kern::BinaryOp::name, out, a, b); }
LT_BINARY_OPS(LT_PUBLIC_BINARY)
#undef LT_PUBLIC_BINARY
Tensor& add_(Tensor& a, const Tensor& b) {
  binary_into(kern::BinaryOp::add, a, a, b);
  return a;
}

Tensor add_scalar(const Tensor& x, double s) { return unary(kern::UnaryOp::add_scalar, x, s); }
Tensor mul_scalar(const Tensor& x, double s) { return unary(kern::UnaryOp::mul_scalar, x, s); }
Tensor rsub_scalar(const Tensor& x, double s) { return unary(kern::UnaryOp::rsub_scalar, x, s); }
Tensor pow_scalar(const Tensor& x, double p) { return unary(kern::UnaryOp::pow_scalar, x, p); }
Tensor clamp(const Tensor& x, double lo, double hi) {
  if (!(lo <= hi)) throw std::invalid_argument("clamp: lo " + std::to_string(lo) + " > hi " + std::to_string(hi));
  return unary(kern::UnaryOp::clamp, x, lo, hi);
}

#define LT_PUBLIC_UNARY(name, Functor) \
  Tensor name(const Tensor& x) { return unary(kern::UnaryOp::name, x); }
LT_UNARY_OPS(LT_PUBLIC_UNARY)
#undef LT_PUBLIC_UNARY

void unary_out(UnaryOp op, Tensor& out, const Tensor& x) { unary_into(op, out, x); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_same_device(cond, a, "where");
  detail::check_same_device(a, b, "where");
  detail::check_float(a, "where");
  detail::check_same_dtype(a, b, "where");
  const Shape shape =
      detail::broadcast_shapes(detail::broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  // The kernel reads cond in a's dtype (documented in ops.h).
  Tensor c = cond.dtype() == a.dtype() ? cond : convert(cond, a.dtype());
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  const Tensor* operands[4] = {&out, &c, &a, &b};
  const kern::IterParams p = detail::make_iter(shape, operands, 4, "where");
  Exec ex(out.device());
  ex.k.where(a.dtype(), p, ex.stream);
  return out;
}

}  // namespace lt::ops
