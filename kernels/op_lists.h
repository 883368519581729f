// The elementwise op lists: one row per op, (name, functor in kernels/elementwise_ops.h).
// Everything that names an elementwise op is generated from these rows: the kern::BinaryOp
// and kern::UnaryOp enums (kernels/table.h), the functor dispatch (visit_binary /
// visit_unary), the engine's op names and its public functions (engine/ops.h). Adding an
// op is a functor and a row here.
#pragma once

// a (op) b, broadcasting.
#define LT_BINARY_OPS(X) \
  X(add, AddOp)          \
  X(sub, SubOp)          \
  X(mul, MulOp)          \
  X(div, DivOp)

// f(x): the public unary ops (lt::ops::name(x), lt::ops::UnaryOp::name).
#define LT_UNARY_OPS(X)   \
  X(neg, NegOp)           \
  X(exp, ExpOp)           \
  X(log, LogOp)           \
  X(sigmoid, SigmoidOp)   \
  X(softplus, SoftplusOp) \
  X(silu, SiluOp)         \
  X(sqrt, SqrtOp)         \
  X(rsqrt, RsqrtOp)       \
  X(square, SquareOp)     \
  X(abs, AbsOp)           \
  X(relu, ReluOp)         \
  X(tanh, TanhOp)

// f(x; alpha, beta): unary ops with scalar arguments (their public forms in engine/ops.h
// take the scalars by name: add_scalar(x, s), clamp(x, lo, hi), ...).
#define LT_SCALAR_UNARY_OPS(X) \
  X(add_scalar, AddScalarOp)   \
  X(mul_scalar, MulScalarOp)   \
  X(rsub_scalar, RsubScalarOp) \
  X(pow_scalar, PowScalarOp)   \
  X(clamp, ClampOp)
