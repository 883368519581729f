// RWKV6's fused token-shift interpolations on the CPU (engine/nn/lerp.h): forward against the
// formulas in f64, every gradient by finite differences in f64 (the sequence boundaries
// included), bf16 against f64, and errors naming the bad operand.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/nn/lerp.h"
#include "engine/ops.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/gradcheck.h"

using namespace lt;

namespace {

constexpr int64_t kB = 2, kT = 5, kD = 3, kN = kB * kT;

// a[b, t-1, c] - a[b, t, c] (0 before the first token), from a [B, T, d] as a vector.
double delta_at(const std::vector<double>& a, int64_t b, int64_t t, int64_t c) {
  const double prev = t > 0 ? a[(b * kT + t - 1) * kD + c] : 0.0;
  return prev - a[(b * kT + t) * kD + c];
}

}  // namespace

TEST_CASE("shift_mix: forward formulas, gradients by finite differences", "[nn][lerp]") {
  Tensor a = test::random_tensor({kB, kT, kD}, 1, DType::f64);
  Tensor mu0 = test::random_tensor({kD}, 2, DType::f64), mu1 = test::random_tensor({kD}, 3, DType::f64);
  const nn::ShiftMixOut f = nn::shift_mix_forward(a, {mu0, mu1});
  const std::vector<double> av = a.to_vector(), m0 = mu0.to_vector(), m1 = mu1.to_vector();
  const std::vector<double> dv = f.delta.to_vector(), o0 = f.out[0].to_vector(), o1 = f.out[1].to_vector();
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < kT; ++t)
      for (int64_t c = 0; c < kD; ++c) {
        const int64_t i = (b * kT + t) * kD + c;
        const double dl = delta_at(av, b, t, c);
        CHECK(dv[i] == Approx(dl).epsilon(1e-15));
        CHECK(o0[i] == Approx(av[i] + dl * m0[c]).epsilon(1e-14));
        CHECK(o1[i] == Approx(av[i] + dl * m1[c]).epsilon(1e-14));
      }
  // loss = sum w0 out0 + w1 out1 + wd delta + wa a: the last two stand for the gradients
  // that reach delta and a by other paths (ddelta_in, da_in)
  const Tensor w0 = test::random_tensor({kB, kT, kD}, 4, DType::f64),
               w1 = test::random_tensor({kB, kT, kD}, 5, DType::f64);
  const Tensor wd = test::random_tensor({kB, kT, kD}, 6, DType::f64),
               wa = test::random_tensor({kB, kT, kD}, 7, DType::f64);
  auto loss = [&] {
    const nn::ShiftMixOut g = nn::shift_mix_forward(a, {mu0, mu1});
    return test::weighted_sum(g.out[0], w0) + test::weighted_sum(g.out[1], w1) + test::weighted_sum(g.delta, wd) +
           test::weighted_sum(a, wa);
  };
  Tensor dmu0 = Tensor::zeros({kD}, DType::f64), dmu1 = Tensor::full({kD}, 0.5, DType::f64);  // += onto 0.5
  const Tensor da = nn::shift_mix_backward({w0, w1}, f.delta, {mu0, mu1}, wd, wa, {&dmu0, &dmu1});
  CHECK(test::gradcheck(a, da, loss) < 1e-8);
  CHECK(test::gradcheck(mu0, dmu0, loss) < 1e-8);
  CHECK(test::gradcheck(mu1, ops::add_scalar(dmu1, -0.5), loss) < 1e-8);
  // without the optional gradients
  auto loss1 = [&] { return test::weighted_sum(nn::shift_mix_forward(a, {mu0}).out[0], w0); };
  Tensor dmu = Tensor::zeros({kD}, DType::f64);
  const Tensor da1 = nn::shift_mix_backward({w0}, f.delta, {mu0}, Tensor(), Tensor(), {&dmu});
  CHECK(test::gradcheck(a, da1, loss1) < 1e-8);
  CHECK(test::gradcheck(mu0, dmu, loss1) < 1e-8);
}

TEST_CASE("lerp5: forward formulas, gradients by finite differences", "[nn][lerp]") {
  Tensor a = test::random_tensor({kB, kT, kD}, 11, DType::f64);
  Tensor delta = test::random_tensor({kB, kT, kD}, 12, DType::f64);
  Tensor mraw = test::random_tensor({5, kN, kD}, 13, DType::f64);
  Tensor bias = test::random_tensor({5, kD}, 14, DType::f64);
  const nn::Lerp5Out f = nn::lerp5_forward(a, delta, mraw, bias, false);
  const std::vector<double> av = a.to_vector(), dv = delta.to_vector(), mr = mraw.to_vector(), bv = bias.to_vector();
  const std::vector<double> m = f.m.to_vector(), xl = f.xl.to_vector();
  for (int64_t k = 0; k < 5; ++k)
    for (int64_t i = 0; i < kN * kD; ++i) {
      const double mk = mr[k * kN * kD + i] + bv[k * kD + i % kD];
      CHECK(m[k * kN * kD + i] == Approx(mk).epsilon(1e-15));
      CHECK(xl[k * kN * kD + i] == Approx(av[i] + dv[i] * mk).epsilon(1e-14));
    }
  std::vector<Tensor> w;
  for (int k = 0; k < 5; ++k) w.push_back(test::random_tensor({kB, kT, kD}, 20 + k, DType::f64));
  auto loss = [&] {
    const nn::Lerp5Out g = nn::lerp5_forward(a, delta, mraw, bias, false);
    double s = 0;
    for (int k = 0; k < 5; ++k) s += test::weighted_sum(g.xl.select(0, k).view({kB, kT, kD}), w[k]);
    return s;
  };
  const nn::Lerp5Grads g = nn::lerp5_backward(w, delta, f.m);
  CHECK(test::gradcheck(a, g.da, loss) < 1e-8);
  CHECK(test::gradcheck(delta, g.ddelta, loss) < 1e-8);
  CHECK(test::gradcheck(mraw, g.dm, loss) < 1e-8);
  // in place: m is written over mraw
  Tensor mcopy = mraw.clone();
  const nn::Lerp5Out fi = nn::lerp5_forward(a, delta, mcopy, bias, true);
  CHECK(fi.m.data_ptr() == mcopy.data_ptr());
  CHECK(ops::max_abs_diff(fi.m, f.m) == 0.0);
}

TEST_CASE("lerp kernels in bf16: one rounding per output, close to f64", "[nn][lerp]") {
  const Tensor a = test::random_tensor({kB, kT, kD}, 31, DType::bf16);
  const Tensor mu = test::random_tensor({kD}, 32);  // f32, the model's parameter dtype
  const nn::ShiftMixOut f = nn::shift_mix_forward(a, {mu});
  const nn::ShiftMixOut r = nn::shift_mix_forward(a.to(DType::f64), {mu.to(DType::f64)});
  CHECK(f.delta.dtype() == DType::bf16);
  // Each output within one bf16 rounding (2^-9 relative, plus the f32 arithmetic: bound
  // 2^-8) of the f64 formula applied to the stored inputs: delta = shift(a) - a; out from
  // the rounded delta.
  const double one_rounding = std::ldexp(1.0, -8);
  const Tensor d64 = f.delta.to(DType::f64);
  CHECK(ops::max_rel_diff(d64, r.delta) <= one_rounding);
  CHECK(ops::max_rel_diff(f.out[0].to(DType::f64), a.to(DType::f64) + d64 * mu.to(DType::f64)) <= one_rounding);
  const Tensor mraw = test::random_tensor({5, kN, kD}, 33, DType::bf16), bias = test::random_tensor({5, kD}, 34);
  const nn::Lerp5Out l = nn::lerp5_forward(a, f.delta, mraw, bias, false);
  const Tensor m64 = l.m.to(DType::f64);
  CHECK(ops::max_rel_diff(m64, mraw.to(DType::f64) + bias.to(DType::f64).view({5, 1, kD})) <= one_rounding);
  CHECK(ops::max_rel_diff(l.xl.to(DType::f64), a.to(DType::f64).view({1, kN, kD}) + d64.view({1, kN, kD}) * m64) <=
        one_rounding);
}

TEST_CASE("lerp errors name the operand", "[nn][lerp]") {
  const Tensor a = test::random_tensor({kB, kT, kD}, 41);
  const Tensor mu = test::random_tensor({kD}, 42);
  CHECK_THROWS_WITH(nn::shift_mix_forward(a, {}), Catch::Contains("1 or 2 mu"));
  CHECK_THROWS_WITH(nn::shift_mix_forward(a, {test::random_tensor({kD + 1}, 43)}), Catch::Contains("mu"));
  CHECK_THROWS_WITH(nn::shift_mix_forward(a.view({kN, kD}), {mu}), Catch::Contains("[B, T, d]"));
  const Tensor mraw = test::random_tensor({5, kN + 1, kD}, 44), bias = test::random_tensor({5, kD}, 45);
  CHECK_THROWS_WITH(nn::lerp5_forward(a, a, mraw, bias, true), Catch::Contains("mraw"));
  CHECK_THROWS_WITH(nn::lerp5_backward({a, a, a, a}, a, mraw), Catch::Contains("5 dxl"));
}
