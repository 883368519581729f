// Elementwise op functors, one definition for the CPU and CUDA backends. Each takes and
// returns the compute type C (float, or double for f64). Transcendentals come from the
// platform's libm (host) or CUDA's math library (device): they may differ by an ulp or so
// between backends, so CPU-vs-CUDA tests of exp/log/... use a relative tolerance.
#pragma once
#include <cmath>

#include "kernels/half.h"
#include "kernels/table.h"

namespace lt::kern {

namespace math {
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float exp(float x) { return ::expf(x); }
__device__ __forceinline__ double exp(double x) { return ::exp(x); }
__device__ __forceinline__ float log(float x) { return ::logf(x); }
__device__ __forceinline__ double log(double x) { return ::log(x); }
__device__ __forceinline__ float log1p(float x) { return ::log1pf(x); }
__device__ __forceinline__ double log1p(double x) { return ::log1p(x); }
__device__ __forceinline__ float sqrt(float x) { return ::sqrtf(x); }
__device__ __forceinline__ double sqrt(double x) { return ::sqrt(x); }
__device__ __forceinline__ float tanh(float x) { return ::tanhf(x); }
__device__ __forceinline__ double tanh(double x) { return ::tanh(x); }
__device__ __forceinline__ float pow(float x, float y) { return ::powf(x, y); }
__device__ __forceinline__ double pow(double x, double y) { return ::pow(x, y); }
__device__ __forceinline__ float fabs(float x) { return ::fabsf(x); }
__device__ __forceinline__ double fabs(double x) { return ::fabs(x); }
#else
using std::exp;
using std::fabs;
using std::log;
using std::log1p;
using std::pow;
using std::sqrt;
using std::tanh;
#endif
}  // namespace math

// ---- binary ----
struct AddOp {
  template <class C>
  LT_HD C operator()(C a, C b) const {
    return a + b;
  }
};
struct SubOp {
  template <class C>
  LT_HD C operator()(C a, C b) const {
    return a - b;
  }
};
struct MulOp {
  template <class C>
  LT_HD C operator()(C a, C b) const {
    return a * b;
  }
};
struct DivOp {
  template <class C>
  LT_HD C operator()(C a, C b) const {
    return a / b;
  }
};

// ---- unary: operator()(x, alpha, beta) ----
struct NegOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    return -x;
  }
};
struct ExpOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    return math::exp(x);
  }
};
struct LogOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    return math::log(x);
  }
};
// Two branches so exp never overflows: for x < 0, e^x / (1 + e^x).
struct SigmoidOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    if (x >= C(0)) return C(1) / (C(1) + math::exp(-x));
    const C e = math::exp(x);
    return e / (C(1) + e);
  }
};
// fla's softplus: x for x > 20, else log(1 + e^x) (log1p for accuracy at very negative x).
struct SoftplusOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    return x > C(20) ? x : math::log1p(math::exp(x));
  }
};
struct SiluOp {
  template <class C>
  LT_HD C operator()(C x, C a, C b) const {
    return x * SigmoidOp{}(x, a, b);
  }
};
struct SqrtOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    return math::sqrt(x);
  }
};
struct RsqrtOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    return C(1) / math::sqrt(x);
  }
};
struct SquareOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    return x * x;
  }
};
struct AbsOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    return math::fabs(x);
  }
};
struct ReluOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    return x > C(0) ? x : C(0);
  }
};
struct TanhOp {
  template <class C>
  LT_HD C operator()(C x, C, C) const {
    return math::tanh(x);
  }
};
struct AddScalarOp {
  template <class C>
  LT_HD C operator()(C x, C a, C) const {
    return x + a;
  }
};
struct MulScalarOp {
  template <class C>
  LT_HD C operator()(C x, C a, C) const {
    return x * a;
  }
};
struct RsubScalarOp {
  template <class C>
  LT_HD C operator()(C x, C a, C) const {
    return a - x;
  }
};
struct PowScalarOp {
  template <class C>
  LT_HD C operator()(C x, C a, C) const {
    return math::pow(x, a);
  }
};
// NaN passes through (comparisons with NaN are false).
struct ClampOp {
  template <class C>
  LT_HD C operator()(C x, C lo, C hi) const {
    return x < lo ? lo : (x > hi ? hi : x);
  }
};

// Calls fn.template operator()<Functor>() for the functor of `op` (one row per op: the
// single place that maps enum rows to functors, used by both backends' tables; the cases
// come from the op lists in kernels/op_lists.h).
#define LT_VISIT_CASE(name, Functor) \
  case Op::name: return v(Functor());
template <class Visitor>
inline auto visit_binary(BinaryOp op, Visitor&& v) {
  using Op = BinaryOp;
  switch (op) {
    LT_BINARY_OPS(LT_VISIT_CASE)
    case Op::count: break;
  }
  return v(AddOp{});
}
template <class Visitor>
inline auto visit_unary(UnaryOp op, Visitor&& v) {
  using Op = UnaryOp;
  switch (op) {
    LT_UNARY_OPS(LT_VISIT_CASE)
    LT_SCALAR_UNARY_OPS(LT_VISIT_CASE)
    case Op::count: break;
  }
  return v(NegOp{});
}
#undef LT_VISIT_CASE

// Same for the float dtypes: v(T{}) with T = float, double, bfloat16, float16.
template <class Visitor>
inline auto visit_float_dtype(DType d, const char* backend, const char* family, Visitor&& v) {
  switch (d) {
    case DType::f32: return v(float{});
    case DType::f64: return v(double{});
    case DType::bf16: return v(bfloat16{});
    case DType::f16: return v(float16{});
    default: break;
  }
  unsupported_dtype(backend, family, d);
}
// Every dtype: v(T{}).
template <class Visitor>
inline auto visit_dtype(DType d, Visitor&& v) {
  switch (d) {
    case DType::f32: return v(float{});
    case DType::f64: return v(double{});
    case DType::bf16: return v(bfloat16{});
    case DType::f16: return v(float16{});
    case DType::i32: return v(int32_t{});
    case DType::i64: return v(int64_t{});
    case DType::u16: return v(uint16_t{});
  }
  return v(float{});
}

}  // namespace lt::kern
