// Elementwise activation kernels, forward beside backward (engine: engine/nn/activation.h;
// CPU: kernels/cpu/activation.cpp, CUDA: kernels/cuda/activation.cu). s(x) = sigmoid(x).
//
//   op           forward (a, b -> y)        backward (dy, a, b -> da, db)
//   swiglu       y = silu(a) * b            da = dy * b * s(a) (1 + a (1 - s(a))), db = dy * silu(a)
//   sqrelu       y = relu(a)^2              da = dy * 2 relu(a)                 (b unused)
//   sigmoid_mul  y = s(a) * b               da = dy * b * s(a) (1 - s(a)),      db = dy * s(a)
//   silu_mul     y = a * silu(b)            da = dy * silu(b),                   db = dy * a * s(b) (1 + b (1 - s(b)))
//   tanh         y = tanh(a)                da = dy * (1 - a^2)   (a: the forward's OUTPUT y)
//   neg_exp      y = -exp(a)                da = dy * a           (a: the forward's OUTPUT y)
//   token_shift  y[r, t, :] = a[r, t-1, :] - a[r, t, :]  (a[r, -1, :] = 0)
//                da[r, t, :] = dy[r, t+1, :] - dy[r, t, :] (dy[r, T, :] = 0)      (b unused)
// All operands contiguous, one float dtype (compute in f32, f64 for f64), n elements;
// token_shift views them as [n / (T * d), T, d]. Outputs are written (=).
#pragma once
#include <cstdint>

#include "kernels/elementwise_ops.h"

namespace lt::kern {

enum class ActivationOp : uint8_t { swiglu, sqrelu, sigmoid_mul, silu_mul, tanh, neg_exp, token_shift, count };

struct ActivationParams {
  int64_t n = 0;         // elements of every operand
  int64_t T = 1, d = 1;  // token_shift only: sequence length and width
  bool backward = false;
  const void* a = nullptr;
  const void* b = nullptr;   // swiglu, sigmoid_mul, silu_mul
  const void* dy = nullptr;  // backward
  void* y = nullptr;         // forward output
  void* da = nullptr;        // backward outputs (db: the ops with b)
  void* db = nullptr;
};

// The pointwise math of the gated ops, one definition for both backends.
template <class C>
struct ActivationMath {
  static LT_HD C sigmoid(C x) { return SigmoidOp{}(x, C(0), C(0)); }
  // y = f(a, b)
  static LT_HD C forward(ActivationOp op, C a, C b) {
    switch (op) {
      case ActivationOp::swiglu: return a * sigmoid(a) * b;
      case ActivationOp::sqrelu: return a > C(0) ? a * a : C(0);
      case ActivationOp::sigmoid_mul: return sigmoid(a) * b;
      case ActivationOp::silu_mul: return a * (b * sigmoid(b));
      case ActivationOp::tanh: return TanhOp{}(a, C(0), C(0));
      case ActivationOp::neg_exp: return -ExpOp{}(a, C(0), C(0));
      default: return C(0);
    }
  }
  // (da, db) = dy * (df/da, df/db); for tanh and neg_exp, a is the forward's output
  // (the derivative from the saved output, nothing recomputed).
  static LT_HD void backward(ActivationOp op, C dy, C a, C b, C& da, C& db) {
    switch (op) {
      case ActivationOp::swiglu: {
        const C s = sigmoid(a);
        da = dy * b * s * (C(1) + a * (C(1) - s));
        db = dy * a * s;
        return;
      }
      case ActivationOp::sqrelu:
        da = a > C(0) ? dy * C(2) * a : C(0);
        db = C(0);
        return;
      case ActivationOp::sigmoid_mul: {
        const C s = sigmoid(a);
        da = dy * b * s * (C(1) - s);
        db = dy * s;
        return;
      }
      case ActivationOp::silu_mul: {
        const C s = sigmoid(b);
        da = dy * b * s;
        db = dy * a * s * (C(1) + b * (C(1) - s));
        return;
      }
      case ActivationOp::tanh:
        da = dy * (C(1) - a * a);
        db = C(0);
        return;
      case ActivationOp::neg_exp:
        da = dy * a;
        db = C(0);
        return;
      default: da = db = C(0); return;
    }
  }
};

LT_HD constexpr bool activation_has_b(ActivationOp op) {
  return op == ActivationOp::swiglu || op == ActivationOp::sigmoid_mul || op == ActivationOp::silu_mul;
}

}  // namespace lt::kern
