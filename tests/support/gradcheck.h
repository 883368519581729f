// Finite-difference gradient checks in float64 on the CPU, shared by the op, layer and model
// tests.
//
//   double err = lt::test::gradcheck(x, dx, [&] { return loss_of_current_x(); });
//   REQUIRE(err < 1e-7);
//
// x: a contiguous f64 CPU tensor that the loss reads (perturbed in place, restored after);
// analytic: the gradient the code under test computed for x (same shape, any float dtype).
// Central differences with step h; the error is max_i |numeric_i - analytic_i| divided by
// max(max_i |numeric_i|, 1e-12): relative to the gradient's own scale, so a gradient entry
// that is ~0 is judged against its neighbours, not against itself.
// max_elements > 0 checks that many elements spread evenly over x (large parameters).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include "engine/tensor.h"

namespace lt::test {

inline double gradcheck(Tensor& x, const Tensor& analytic, const std::function<double()>& loss, double h = 1e-6,
                        int64_t max_elements = 0) {
  if (x.dtype() != DType::f64 || !x.device().is_cpu() || !x.is_contiguous())
    throw std::invalid_argument("gradcheck: x must be a contiguous f64 CPU tensor");
  if (analytic.shape() != x.shape())
    throw std::invalid_argument("gradcheck: analytic gradient shape " + shape_str(analytic.shape()) + " != x shape " +
                                shape_str(x.shape()));
  const std::vector<double> ana = analytic.to_vector();
  double* p = x.data<double>();
  const int64_t n = x.numel();
  const int64_t stride = (max_elements > 0 && n > max_elements) ? (n + max_elements - 1) / max_elements : 1;
  double max_num = 0.0, max_err = 0.0;
  for (int64_t i = 0; i < n; i += stride) {
    const double saved = p[i];
    p[i] = saved + h;
    const double up = loss();
    p[i] = saved - h;
    const double down = loss();
    p[i] = saved;
    const double num = (up - down) / (2.0 * h);
    max_num = std::max(max_num, std::fabs(num));
    max_err = std::max(max_err, std::fabs(num - ana[static_cast<size_t>(i)]));
  }
  return max_err / std::max(max_num, 1e-12);
}

// sum(w * y) for a fixed random weight w: a scalar loss whose gradient with respect to y
// is w, so an op's backward can be checked with dy = w.
inline double weighted_sum(const Tensor& y, const Tensor& w) {
  const std::vector<double> a = y.to_vector(), b = w.to_vector();
  if (a.size() != b.size()) throw std::invalid_argument("weighted_sum: sizes differ");
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace lt::test
