// Elementwise ops (engine/ops.h): validation, broadcasting, dispatch to the op table
// (kernels/table.h: binary, unary, where).
#include <stdexcept>

#include "engine/detail.h"
#include "engine/ops.h"

namespace lt::ops {
namespace {

using detail::Exec;

const char* binary_name(kern::BinaryOp op) {
  static const char* const names[] = {"add", "sub", "mul", "div"};
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
  static const char* const names[] = {"neg",  "exp",  "log",        "sigmoid",     "softplus",   "silu",
                                      "sqrt", "rsqrt", "square",    "abs",         "relu",       "tanh",
                                      "add_scalar", "mul_scalar", "rsub_scalar", "pow_scalar", "clamp"};
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

Tensor add(const Tensor& a, const Tensor& b) { return binary(kern::BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(kern::BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(kern::BinaryOp::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(kern::BinaryOp::div, a, b); }
void add_out(Tensor& out, const Tensor& a, const Tensor& b) { binary_into(kern::BinaryOp::add, out, a, b); }
void sub_out(Tensor& out, const Tensor& a, const Tensor& b) { binary_into(kern::BinaryOp::sub, out, a, b); }
void mul_out(Tensor& out, const Tensor& a, const Tensor& b) { binary_into(kern::BinaryOp::mul, out, a, b); }
void div_out(Tensor& out, const Tensor& a, const Tensor& b) { binary_into(kern::BinaryOp::div, out, a, b); }
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

Tensor neg(const Tensor& x) { return unary(kern::UnaryOp::neg, x); }
Tensor exp(const Tensor& x) { return unary(kern::UnaryOp::exp, x); }
Tensor log(const Tensor& x) { return unary(kern::UnaryOp::log, x); }
Tensor sigmoid(const Tensor& x) { return unary(kern::UnaryOp::sigmoid, x); }
Tensor softplus(const Tensor& x) { return unary(kern::UnaryOp::softplus, x); }
Tensor silu(const Tensor& x) { return unary(kern::UnaryOp::silu, x); }
Tensor sqrt(const Tensor& x) { return unary(kern::UnaryOp::sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(kern::UnaryOp::rsqrt, x); }
Tensor square(const Tensor& x) { return unary(kern::UnaryOp::square, x); }
Tensor abs(const Tensor& x) { return unary(kern::UnaryOp::abs, x); }
Tensor relu(const Tensor& x) { return unary(kern::UnaryOp::relu, x); }
Tensor tanh(const Tensor& x) { return unary(kern::UnaryOp::tanh, x); }

// ops::UnaryOp's rows are the first rows of kern::UnaryOp.
static_assert(static_cast<int>(UnaryOp::tanh) == static_cast<int>(kern::UnaryOp::tanh));
static_assert(static_cast<int>(UnaryOp::neg) == static_cast<int>(kern::UnaryOp::neg));
void unary_out(UnaryOp op, Tensor& out, const Tensor& x) {
  unary_into(static_cast<kern::UnaryOp>(op), out, x);
}

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
