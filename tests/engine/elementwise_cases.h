// Every elementwise op of kernels/op_lists.h as a test case, generated from the lists (as
// ggml's test-backend-ops walks every op): its name, how to call it and its in-place form,
// the inputs it is defined on and how closely two backends must agree. A row added to a list
// appears here by itself; it fails test_elementwise_cases.cpp until spec_of() has its row.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/ops.h"
#include "engine/tensor.h"
#include "kernels/op_lists.h"

namespace lt::test {

enum class Domain { any, positive };         // inputs: uniform in [-30, 30], or in [0.01, 10]
enum class Agreement { bitwise, rounding };  // one IEEE operation, or a libm function

struct OpSpec {
  Domain domain = Domain::any;
  Agreement agreement = Agreement::rounding;
  // The scalar ops' arguments (add_scalar(x, alpha), clamp(x, alpha, beta)): exact in bf16, so
  // every dtype computes with the same scalar.
  double alpha = 0, beta = 0;
};

// The spec row of an op-list name; nullptr when the op has none (a new op: add its row).
inline const OpSpec* spec_of(const std::string& name) {
  using D = Domain;
  using A = Agreement;
  static const std::map<std::string, OpSpec> rows = {
      {"add", {D::any, A::bitwise}},
      {"sub", {D::any, A::bitwise}},
      {"mul", {D::any, A::bitwise}},
      {"div", {D::any, A::bitwise}},
      {"neg", {D::any, A::rounding}},
      {"exp", {D::any, A::rounding}},
      {"log", {D::positive, A::rounding}},
      {"sigmoid", {D::any, A::rounding}},
      {"softplus", {D::any, A::rounding}},
      {"silu", {D::any, A::rounding}},
      {"sqrt", {D::positive, A::rounding}},
      {"rsqrt", {D::positive, A::rounding}},
      {"square", {D::any, A::rounding}},
      {"abs", {D::any, A::rounding}},
      {"relu", {D::any, A::rounding}},
      {"tanh", {D::any, A::rounding}},
      {"add_scalar", {D::any, A::bitwise, 0.375}},
      {"mul_scalar", {D::any, A::bitwise, -1.75}},
      {"rsub_scalar", {D::any, A::bitwise, 1.0}},
      {"pow_scalar", {D::positive, A::rounding, 1.5}},
      {"clamp", {D::any, A::bitwise, -2, 3}},
  };
  auto it = rows.find(name);
  return it == rows.end() ? nullptr : &it->second;
}

struct ElementwiseCase {
  std::string name;
  int arity = 1;                                                              // tensor inputs
  std::function<Tensor(const std::vector<Tensor>&, const OpSpec&)> run;       // fresh result
  std::function<void(Tensor& out, const std::vector<Tensor>&)> run_in_place;  // out = f(out, ...)
};

namespace detail {
// The scalar ops take one or two scalars (clamp(x, lo, hi)); call each with as many as it has.
template <class F>
Tensor call_scalar(F f, const Tensor& x, const OpSpec& s) {
  if constexpr (std::is_invocable_v<F, const Tensor&, double, double>) return f(x, s.alpha, s.beta);
  else return f(x, s.alpha);
}
}  // namespace detail

// The cases in list order: binary ops, unary ops, scalar ops.
inline std::vector<ElementwiseCase> elementwise_cases() {
  std::vector<ElementwiseCase> c;
#define LT_BINARY_CASE(name, Functor)                                                                       \
  c.push_back({#name, 2, [](const std::vector<Tensor>& t, const OpSpec&) { return ops::name(t[0], t[1]); }, \
               [](Tensor& out, const std::vector<Tensor>& t) { ops::name##_out(out, out, t[1]); }});
  LT_BINARY_OPS(LT_BINARY_CASE)
#undef LT_BINARY_CASE
#define LT_UNARY_CASE(name, Functor)                                                                  \
  c.push_back({#name, 1, [](const std::vector<Tensor>& t, const OpSpec&) { return ops::name(t[0]); }, \
               [](Tensor& out, const std::vector<Tensor>&) { ops::unary_out(ops::UnaryOp::name, out, out); }});
  LT_UNARY_OPS(LT_UNARY_CASE)
#undef LT_UNARY_CASE
#define LT_SCALAR_CASE(name, Functor)                                                                                  \
  c.push_back({#name, 1,                                                                                               \
               [](const std::vector<Tensor>& t, const OpSpec& s) { return detail::call_scalar(&ops::name, t[0], s); }, \
               nullptr});
  LT_SCALAR_UNARY_OPS(LT_SCALAR_CASE)
#undef LT_SCALAR_CASE
  return c;
}

}  // namespace lt::test
