// Activations (engine/nn/activation.h): checks, contiguous inputs, fresh contiguous outputs,
// then the activation kernel family (kernels/activation.h) on the current stream.
#include "engine/nn/activation.h"

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/detail.h"
#include "kernels/activation.h"

namespace lt::nn {
namespace {

using kern::ActivationOp;

// Every operand defined, float, on one device, with one dtype and one shape.
void check_operands(std::initializer_list<const Tensor*> ts, const char* op) {
  const Tensor& first = **ts.begin();
  for (const Tensor* t : ts) {
    detail::check_defined(*t, op);
    detail::check_float(*t, op);
    detail::check_same_device(first, *t, op);
    detail::check_same_dtype(first, *t, op);
    if (t->shape() != first.shape())
      throw std::invalid_argument(std::string(op) + ": shapes differ: " + shape_str(first.shape()) + " vs " +
                                  shape_str(t->shape()));
  }
}

void run(ActivationOp op, kern::ActivationParams& p, const Tensor& like) {
  p.n = like.numel();
  if (p.n == 0) return;
  detail::Exec ex(like.device());
  ex.k.activation(op, like.dtype(), p, ex.stream);
}

Tensor gated_forward(ActivationOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_operands({&a, &b}, name);
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor y = Tensor::empty(a.shape(), a.dtype(), a.device());
  kern::ActivationParams p;
  p.a = ac.data_ptr();
  p.b = bc.data_ptr();
  p.y = y.data_ptr();
  run(op, p, a);
  return y;
}

std::pair<Tensor, Tensor> gated_backward(ActivationOp op, const Tensor& dy, const Tensor& a, const Tensor& b,
                                         const char* name) {
  check_operands({&dy, &a, &b}, name);
  const Tensor dyc = dy.contiguous(), ac = a.contiguous(), bc = b.contiguous();
  Tensor da = Tensor::empty(a.shape(), a.dtype(), a.device());
  Tensor db = Tensor::empty(a.shape(), a.dtype(), a.device());
  kern::ActivationParams p;
  p.backward = true;
  p.dy = dyc.data_ptr();
  p.a = ac.data_ptr();
  p.b = bc.data_ptr();
  p.da = da.data_ptr();
  p.db = db.data_ptr();
  run(op, p, a);
  return {da, db};
}

// [..., T, d] viewed as [R, T, d].
void check_sequence(const Tensor& x, const char* op) {
  if (x.dim() < 2) throw std::invalid_argument(std::string(op) + ": expected [B, T, d], got " + shape_str(x.shape()));
}

// The one-operand ops: y = f(x) forward; dx = dy f'(.) from `a` (x, or y for the ops whose
// derivative comes from their output).
Tensor unary_forward(ActivationOp op, const Tensor& x, const char* name) {
  check_operands({&x}, name);
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  kern::ActivationParams p;
  p.a = xc.data_ptr();
  p.y = y.data_ptr();
  run(op, p, x);
  return y;
}

Tensor unary_backward(ActivationOp op, const Tensor& dy, const Tensor& a, const char* name) {
  check_operands({&dy, &a}, name);
  const Tensor dyc = dy.contiguous(), ac = a.contiguous();
  Tensor dx = Tensor::empty(a.shape(), a.dtype(), a.device());
  kern::ActivationParams p;
  p.backward = true;
  p.dy = dyc.data_ptr();
  p.a = ac.data_ptr();
  p.da = dx.data_ptr();
  run(op, p, a);
  return dx;
}

}  // namespace

Tensor swiglu_forward(const Tensor& a, const Tensor& b) {
  return gated_forward(ActivationOp::swiglu, a, b, "swiglu_forward");
}
SwigluGrads swiglu_backward(const Tensor& dh, const Tensor& a, const Tensor& b) {
  auto [da, db] = gated_backward(ActivationOp::swiglu, dh, a, b, "swiglu_backward");
  return {da, db};
}

Tensor sigmoid_mul_forward(const Tensor& r, const Tensor& v) {
  return gated_forward(ActivationOp::sigmoid_mul, r, v, "sigmoid_mul_forward");
}
SigmoidMulGrads sigmoid_mul_backward(const Tensor& dy, const Tensor& r, const Tensor& v) {
  auto [dr, dv] = gated_backward(ActivationOp::sigmoid_mul, dy, r, v, "sigmoid_mul_backward");
  return {dr, dv};
}

Tensor silu_mul_forward(const Tensor& o, const Tensor& g) {
  return gated_forward(ActivationOp::silu_mul, o, g, "silu_mul_forward");
}
SiluMulGrads silu_mul_backward(const Tensor& dy, const Tensor& o, const Tensor& g) {
  auto [d_o, dg] = gated_backward(ActivationOp::silu_mul, dy, o, g, "silu_mul_backward");
  return {d_o, dg};
}

Tensor sqrelu_forward(const Tensor& x) { return unary_forward(ActivationOp::sqrelu, x, "sqrelu_forward"); }
Tensor sqrelu_backward(const Tensor& dy, const Tensor& x) {
  return unary_backward(ActivationOp::sqrelu, dy, x, "sqrelu_backward");
}
Tensor tanh_forward(const Tensor& x) { return unary_forward(ActivationOp::tanh, x, "tanh_forward"); }
Tensor tanh_backward(const Tensor& dy, const Tensor& y) {
  return unary_backward(ActivationOp::tanh, dy, y, "tanh_backward");
}
Tensor neg_exp_forward(const Tensor& x) { return unary_forward(ActivationOp::neg_exp, x, "neg_exp_forward"); }
Tensor neg_exp_backward(const Tensor& dy, const Tensor& y) {
  return unary_backward(ActivationOp::neg_exp, dy, y, "neg_exp_backward");
}

Tensor token_shift_forward(const Tensor& x) {
  check_operands({&x}, "token_shift_forward");
  check_sequence(x, "token_shift_forward");
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  kern::ActivationParams p;
  p.T = x.size(-2);
  p.d = x.size(-1);
  p.a = xc.data_ptr();
  p.y = y.data_ptr();
  run(ActivationOp::token_shift, p, x);
  return y;
}

Tensor token_shift_backward(const Tensor& ddelta) {
  check_operands({&ddelta}, "token_shift_backward");
  check_sequence(ddelta, "token_shift_backward");
  const Tensor gc = ddelta.contiguous();
  Tensor dx = Tensor::empty(ddelta.shape(), ddelta.dtype(), ddelta.device());
  kern::ActivationParams p;
  p.backward = true;
  p.T = ddelta.size(-2);
  p.d = ddelta.size(-1);
  p.dy = gc.data_ptr();
  p.da = dx.data_ptr();
  run(ActivationOp::token_shift, p, ddelta);
  return dx;
}

}  // namespace lt::nn
