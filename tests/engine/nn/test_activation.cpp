// Activations on the CPU: forward against the formulas written out in f64, backward by
// finite differences in f64 (one check per input), the f32 / bf16 paths against f64,
// token shift's boundaries, shape / dtype errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "engine/nn/activation.h"
#include "engine/ops.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/gradcheck.h"

using namespace lt;

namespace {

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// y = f(a, b) elementwise, in f64.
std::vector<double> apply(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const std::vector<double> av = a.to_vector(), bv = b.to_vector();
  std::vector<double> y(av.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = f(av[i], bv[i]);
  return y;
}

struct GatedCase {
  const char* name;
  std::function<double(double, double)> f;
  std::function<Tensor(const Tensor&, const Tensor&)> fwd;
  std::function<std::pair<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&)> bwd;
};

std::vector<GatedCase> gated_cases() {
  return {
      {"swiglu", [](double a, double b) { return a * sig(a) * b; }, nn::swiglu_forward,
       [](const Tensor& dy, const Tensor& a, const Tensor& b) {
         auto g = nn::swiglu_backward(dy, a, b);
         return std::make_pair(g.da, g.db);
       }},
      {"sigmoid_mul", [](double r, double v) { return sig(r) * v; }, nn::sigmoid_mul_forward,
       [](const Tensor& dy, const Tensor& r, const Tensor& v) {
         auto g = nn::sigmoid_mul_backward(dy, r, v);
         return std::make_pair(g.dr, g.dv);
       }},
      {"silu_mul", [](double o, double g) { return o * g * sig(g); }, nn::silu_mul_forward,
       [](const Tensor& dy, const Tensor& o, const Tensor& g) {
         auto r = nn::silu_mul_backward(dy, o, g);
         return std::make_pair(r.do_, r.dg);
       }},
  };
}

}  // namespace

TEST_CASE("gated activations: forward formulas and finite-difference backward in f64", "[nn][activation]") {
  for (const GatedCase& c : gated_cases()) {
    INFO(c.name);
    // wide inputs so both sigmoid branches and large |x| are exercised
    Tensor a = test::uniform_tensor({3, 4, 5}, 1, -6, 6, DType::f64);
    Tensor b = test::random_tensor({3, 4, 5}, 2, DType::f64);
    const Tensor w = test::random_tensor({3, 4, 5}, 3, DType::f64);
    CHECK(test::rel_err(c.fwd(a, b).to_vector(), apply(a, b, c.f)) < 1e-15);
    auto [da, db] = c.bwd(w, a, b);
    CHECK(test::gradcheck(a, da, [&] { return test::weighted_sum(c.fwd(a, b), w); }) < 1e-8);
    CHECK(test::gradcheck(b, db, [&] { return test::weighted_sum(c.fwd(a, b), w); }) < 1e-8);
    // f32 and bf16 against the f64 result
    for (DType dt : {DType::f32, DType::bf16}) {
      INFO(dtype_name(dt));
      const Tensor a_l = a.to(dt), b_l = b.to(dt), w_l = w.to(dt);
      const double tol = dt == DType::f32 ? 1e-6 : 1e-2;
      const Tensor a_r = a_l.to(DType::f64), b_r = b_l.to(DType::f64), w_r = w_l.to(DType::f64);
      CHECK(test::rel_err(c.fwd(a_l, b_l).to_vector(), c.fwd(a_r, b_r).to_vector()) < tol);
      auto [da_l, db_l] = c.bwd(w_l, a_l, b_l);
      auto [da_r, db_r] = c.bwd(w_r, a_r, b_r);
      CHECK(da_l.dtype() == dt);
      CHECK(test::rel_err(da_l.to_vector(), da_r.to_vector()) < tol);
      CHECK(test::rel_err(db_l.to_vector(), db_r.to_vector()) < tol);
    }
  }
}

TEST_CASE("squared relu: forward and finite-difference backward", "[nn][activation]") {
  Tensor x = test::random_tensor({4, 7}, 4, DType::f64);
  const Tensor w = test::random_tensor({4, 7}, 5, DType::f64);
  const std::vector<double> xv = x.to_vector();
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) want[i] = xv[i] > 0 ? xv[i] * xv[i] : 0.0;
  CHECK(test::rel_err(nn::sqrelu_forward(x).to_vector(), want) < 1e-15);
  const Tensor dx = nn::sqrelu_backward(w, x);
  CHECK(test::gradcheck(x, dx, [&] { return test::weighted_sum(nn::sqrelu_forward(x), w); }) < 1e-8);
  const Tensor x32 = x.to(DType::f32), w32 = w.to(DType::f32);
  CHECK(test::rel_err(nn::sqrelu_backward(w32, x32).to_vector(),
                      nn::sqrelu_backward(w32.to(DType::f64), x32.to(DType::f64)).to_vector()) < 1e-6);
}

TEST_CASE("tanh and -exp: forward, and the backward from the forward's output by finite differences",
          "[nn][activation]") {
  Tensor x = test::random_tensor({5, 9}, 11, DType::f64);
  const Tensor w = test::random_tensor({5, 9}, 12, DType::f64);
  const std::vector<double> xv = x.to_vector();
  std::vector<double> want_tanh(xv.size()), want_nexp(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    want_tanh[i] = std::tanh(xv[i]);
    want_nexp[i] = -std::exp(xv[i]);
  }
  const Tensor yt = nn::tanh_forward(x), yn = nn::neg_exp_forward(x);
  CHECK(test::rel_err(yt.to_vector(), want_tanh) < 1e-15);
  CHECK(test::rel_err(yn.to_vector(), want_nexp) < 1e-15);
  CHECK(test::gradcheck(x, nn::tanh_backward(w, yt), [&] { return test::weighted_sum(nn::tanh_forward(x), w); }) <
        1e-8);
  CHECK(test::gradcheck(x, nn::neg_exp_backward(w, yn), [&] { return test::weighted_sum(nn::neg_exp_forward(x), w); }) <
        1e-8);
  // bf16: the ops equal tanh / -exp rounded once (the same as ops::tanh and -ops::exp)
  const Tensor xb = x.to(DType::bf16);
  CHECK(nn::tanh_forward(xb).to_vector() == ops::tanh(xb).to_vector());
  CHECK(nn::neg_exp_forward(xb).to_vector() == ops::neg(ops::exp(xb)).to_vector());
  // the backward's one rounding: within bf16's half ulp of the f64 result on the same inputs
  const Tensor wb = w.to(DType::bf16), ytb = nn::tanh_forward(xb);
  CHECK(test::rel_err(nn::tanh_backward(wb, ytb).to_vector(),
                      nn::tanh_backward(wb.to(DType::f64), ytb.to(DType::f64)).to_vector()) < 4e-3);
  CHECK_THROWS_WITH(nn::tanh_backward(w, yt.reshape({9, 5})), Catch::Contains("tanh_backward"));
}

TEST_CASE("token shift: delta = x[t-1] - x[t] with x[-1] = 0, and its backward", "[nn][activation]") {
  const int64_t B = 2, T = 5, d = 3;
  Tensor x = test::random_tensor({B, T, d}, 6, DType::f64);
  const Tensor w = test::random_tensor({B, T, d}, 7, DType::f64);
  const std::vector<double> xv = x.to_vector();
  std::vector<double> want(xv.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < d; ++c) {
        const int64_t i = (b * T + t) * d + c;
        want[i] = (t > 0 ? xv[i - d] : 0.0) - xv[i];
      }
  CHECK(test::rel_err(nn::token_shift_forward(x).to_vector(), want) < 1e-15);
  // a transposed (non-contiguous) input gives the same result
  const Tensor xt = x.transpose(0, 1).contiguous().transpose(0, 1);
  CHECK(test::rel_err(nn::token_shift_forward(xt).to_vector(), want) < 1e-15);
  const Tensor dx = nn::token_shift_backward(w);
  CHECK(test::gradcheck(x, dx, [&] { return test::weighted_sum(nn::token_shift_forward(x), w); }) < 1e-8);
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    const Tensor xl = x.to(dt);
    CHECK(test::rel_err(nn::token_shift_forward(xl).to_vector(),
                        nn::token_shift_forward(xl.to(DType::f64)).to_vector()) < (dt == DType::f32 ? 1e-7 : 1e-2));
  }
}

TEST_CASE("activation errors name the op and the shapes", "[nn][activation]") {
  const Tensor a = test::random_tensor({2, 3}, 1), b = test::random_tensor({3, 2}, 2);
  CHECK_THROWS_WITH(nn::swiglu_forward(a, b),
                    Catch::Contains("swiglu_forward") && Catch::Contains("[2, 3]") && Catch::Contains("[3, 2]"));
  CHECK_THROWS_WITH(nn::silu_mul_backward(a, a, a.to(DType::f64)), Catch::Contains("silu_mul_backward"));
  CHECK_THROWS_WITH(nn::sqrelu_forward(a.to(DType::i32)), Catch::Contains("sqrelu_forward"));
  CHECK_THROWS_WITH(nn::token_shift_forward(test::random_tensor({4}, 3)),
                    Catch::Contains("token_shift_forward") && Catch::Contains("[4]"));
}
