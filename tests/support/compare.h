// Relative errors for comparing a result x with a reference ref, shared by every test.
//
//   CHECK(lt::test::rel_err(x, ref) < 1e-12);     // max-norm: max_i |x_i - ref_i| / max_i |ref_i|
//   CHECK(lt::test::rel_err_l2(x, ref) < 1e-5);   // 2-norm:   ||x - ref|| / ||ref||
//
// One NaN rule for both: a NaN in x or in ref, or sizes that differ, give +infinity, which
// fails every `err < tol` and `err <= tol` check (outputs are poisoned with NaN before a
// kernel runs, so an element it did not write shows up here). The denominators are floored
// (1e-30, 1e-300) only to keep an all-zero reference from dividing by zero; tests never
// compare against zeros.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace lt::test {

template <class X, class Y>
double rel_err(const std::vector<X>& x, const std::vector<Y>& ref) {
  if (x.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = static_cast<double>(x[i]), b = static_cast<double>(ref[i]);
    if (std::isnan(a) || std::isnan(b)) return INFINITY;
    num = std::max(num, std::fabs(a - b));
    den = std::max(den, std::fabs(b));
  }
  return num / std::max(den, 1e-30);
}

template <class X, class Y>
double rel_err_l2(const std::vector<X>& x, const std::vector<Y>& ref) {
  if (x.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double a = static_cast<double>(x[i]), b = static_cast<double>(ref[i]);
    if (std::isnan(a) || std::isnan(b)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

}  // namespace lt::test
