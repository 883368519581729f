// AdamW and the global gradient norm on the CPU (engine/optim/adamw.h) against a direct
// double-precision implementation of the formula: several steps with the clip active,
// inactive and off; non-finite gradients skip the step and count it; weight decay stops at
// decay_end; the bf16 shadow equals the rounded params; bit-identical reruns; argument checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/ops.h"
#include "engine/optim/adamw.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using lt::test::same_bits;

namespace {

struct RefState {
  std::vector<double> p, m, v;
};

double ref_norm(const std::vector<double>& g) {
  double s = 0.0;
  for (double x : g) s += x * x;
  return std::sqrt(s);
}

// One AdamW step in double, straight from the formula in engine/optim/adamw.h, with the
// norm given (so a test can feed the kernel's own norm). Returns false when skipped.
bool ref_step(RefState& s, const std::vector<double>& g, double norm, const optim::AdamWConfig& c, double lr, int64_t t,
              int64_t decay_end) {
  if (!std::isfinite(norm)) return false;
  const double scale = c.max_grad_norm > 0 ? std::min(1.0, c.max_grad_norm / (norm + 1e-6)) : 1.0;
  const double bc1 = 1 - std::pow(c.beta1, t), bc2 = 1 - std::pow(c.beta2, t);
  for (size_t i = 0; i < g.size(); ++i) {
    const double gi = g[i] * scale;
    s.m[i] = c.beta1 * s.m[i] + (1 - c.beta1) * gi;
    s.v[i] = c.beta2 * s.v[i] + (1 - c.beta2) * gi * gi;
    const double decay = static_cast<int64_t>(i) < decay_end ? c.weight_decay * s.p[i] : 0.0;
    s.p[i] -= lr * (s.m[i] / bc1 / (std::sqrt(s.v[i] / bc2) + c.eps) + decay);
  }
  return true;
}

struct Arenas {
  optim::AdamWArenas a;
  Tensor skipped;
};

// Random params and moments (v > 0), zero-free, on the CPU in `dt`.
Arenas make_arenas(int64_t P, DType dt, uint64_t seed, int64_t decay_end, bool shadow = false) {
  Arenas r;
  r.a.params = test::random_tensor({P}, seed, dt);
  r.a.grads = test::random_tensor({P}, seed + 1, dt);
  r.a.m = ops::mul_scalar(test::random_tensor({P}, seed + 2, dt), 0.1);
  r.a.v = test::uniform_tensor({P}, seed + 3, 0.01, 0.5, dt);
  r.a.decay_end = decay_end;
  if (shadow) r.a.params_bf16 = Tensor::full({P}, NAN, DType::bf16);
  r.skipped = Tensor::zeros({}, DType::i32);
  return r;
}

RefState state_of(const optim::AdamWArenas& a) { return {a.params.to_vector(), a.m.to_vector(), a.v.to_vector()}; }

}  // namespace

TEST_CASE("grad_norm: sqrt of the sum of squares, f64 and f32", "[optim][adamw]") {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1024}, int64_t{5003}}) {
    INFO("n " << n);
    const Tensor g64 = test::random_tensor({n}, 10 + n, DType::f64);
    const double ref = ref_norm(g64.to_vector());
    const Tensor nrm = optim::grad_norm(g64);
    REQUIRE(nrm.dim() == 0);
    REQUIRE(nrm.dtype() == DType::f64);
    CHECK(std::fabs(nrm.item() - ref) <= 1e-14 * ref);
    // f32: the exact norm of the f32 values, rounded once to f32.
    const Tensor g32 = g64.to(DType::f32);
    const Tensor n32 = optim::grad_norm(g32);
    REQUIRE(n32.dtype() == DType::f32);
    CHECK(n32.item() == static_cast<double>(static_cast<float>(ref_norm(g32.to_vector()))));
  }
  CHECK(optim::grad_norm(Tensor::zeros({0})).item() == 0.0);
  // A NaN or inf anywhere makes the norm non-finite.
  Tensor g = test::random_tensor({3000}, 20);
  g.narrow(0, 2222, 1).fill_(NAN);
  CHECK(std::isnan(optim::grad_norm(g).item()));
  g.narrow(0, 2222, 1).fill_(INFINITY);
  CHECK(std::isinf(optim::grad_norm(g).item()));
}

TEST_CASE("adamw_step: f64 arenas follow the formula over several steps", "[optim][adamw]") {
  const int64_t P = 1500, decay_end = 1001;
  for (double max_norm : {0.0, 1e6, 5.0}) {  // off, inactive, active (the norms are ~40)
    INFO("max_grad_norm " << max_norm);
    optim::AdamWConfig cfg;
    cfg.max_grad_norm = max_norm;
    cfg.weight_decay = 0.1;
    Arenas r = make_arenas(P, DType::f64, 100, decay_end);
    RefState ref = state_of(r.a);
    for (int64_t t = 1; t <= 5; ++t) {
      r.a.grads.copy_(test::random_tensor({P}, 200 + t, DType::f64));
      const double lr = 1e-2 / t;
      const Tensor nrm = optim::grad_norm(r.a.grads);
      if (max_norm == 5.0) REQUIRE(nrm.item() > 5.0);  // the clip is active
      optim::adamw_step(r.a, cfg, lr, t, nrm, r.skipped);
      REQUIRE(ref_step(ref, r.a.grads.to_vector(), ref_norm(r.a.grads.to_vector()), cfg, lr, t, decay_end));
    }
    CHECK(test::rel_err(r.a.params.to_vector(), ref.p) < 1e-13);
    CHECK(test::rel_err(r.a.m.to_vector(), ref.m) < 1e-13);
    CHECK(test::rel_err(r.a.v.to_vector(), ref.v) < 1e-13);
    CHECK(r.skipped.item() == 0);
  }
}

TEST_CASE("adamw_step: f32 arenas, each step the formula rounded once", "[optim][adamw]") {
  const int64_t P = 777, decay_end = 400;
  optim::AdamWConfig cfg;
  cfg.max_grad_norm = 3.0;
  Arenas r = make_arenas(P, DType::f32, 300, decay_end, /*shadow=*/true);
  for (int64_t t = 1; t <= 4; ++t) {
    INFO("step " << t);
    r.a.grads.copy_(test::random_tensor({P}, 400 + t));
    // The reference starts from the kernel's own f32 state and norm each step.
    RefState ref = state_of(r.a);
    const Tensor nrm = optim::grad_norm(r.a.grads);
    optim::adamw_step(r.a, cfg, 3e-3, t, nrm, r.skipped);
    REQUIRE(ref_step(ref, r.a.grads.to_vector(), nrm.item(), cfg, 3e-3, t, decay_end));
    // One f32 rounding per stored value: within 2^-24 relative, judged on each vector's scale.
    CHECK(test::rel_err(r.a.params.to_vector(), ref.p) < 1.2e-7);
    CHECK(test::rel_err(r.a.m.to_vector(), ref.m) < 1.2e-7);
    CHECK(test::rel_err(r.a.v.to_vector(), ref.v) < 1.2e-7);
    // The shadow is exactly the params rounded to bf16.
    CHECK(same_bits(r.a.params_bf16, ops::convert(r.a.params, DType::bf16)));
  }
}

TEST_CASE("adamw_step: a non-finite gradient norm skips the step and counts it", "[optim][adamw]") {
  const int64_t P = 300;
  optim::AdamWConfig cfg;
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    Arenas r = make_arenas(P, dt, 500, 100, /*shadow=*/true);
    const Tensor p0 = r.a.params.clone(), m0 = r.a.m.clone(), v0 = r.a.v.clone();
    for (double poison : {NAN, INFINITY, -INFINITY}) {
      r.a.grads.narrow(0, 123, 1).fill_(poison);
      r.a.params_bf16.fill_(NAN);
      optim::adamw_step(r.a, cfg, 1e-2, 1, optim::grad_norm(r.a.grads), r.skipped);
      CHECK(same_bits(r.a.params, p0));
      CHECK(same_bits(r.a.m, m0));
      CHECK(same_bits(r.a.v, v0));
      CHECK(same_bits(r.a.params_bf16, ops::convert(p0, DType::bf16)));  // rewritten from params
    }
    CHECK(r.skipped.item() == 3);
    // Skipping does not need clipping: with max_grad_norm = 0 a NaN norm still skips.
    cfg.max_grad_norm = 0.0;
    optim::adamw_step(r.a, cfg, 1e-2, 1, Tensor::full({}, NAN, dt), r.skipped);
    CHECK(same_bits(r.a.params, p0));
    CHECK(r.skipped.item() == 4);
    // A finite step afterwards updates and leaves the counter alone.
    r.a.grads.copy_(test::random_tensor({P}, 600, dt));
    optim::adamw_step(r.a, cfg, 1e-2, 1, optim::grad_norm(r.a.grads), r.skipped);
    CHECK_FALSE(same_bits(r.a.params, p0));
    CHECK(r.skipped.item() == 4);
    cfg.max_grad_norm = 1.0;
  }
}

TEST_CASE("adamw_step: weight decay applies to [0, decay_end) only", "[optim][adamw]") {
  const int64_t P = 64, decay_end = 37;
  optim::AdamWConfig with, without;
  with.weight_decay = 0.5;
  without.weight_decay = 0.0;
  Arenas a = make_arenas(P, DType::f64, 700, decay_end);
  Arenas b = make_arenas(P, DType::f64, 700, decay_end);
  const std::vector<double> p0 = a.a.params.to_vector();
  const double lr = 0.1;
  optim::adamw_step(a.a, with, lr, 3, optim::grad_norm(a.a.grads), a.skipped);
  optim::adamw_step(b.a, without, lr, 3, optim::grad_norm(b.a.grads), b.skipped);
  CHECK(same_bits(a.a.m, b.a.m));
  CHECK(same_bits(a.a.v, b.a.v));
  const std::vector<double> pa = a.a.params.to_vector(), pb = b.a.params.to_vector();
  for (int64_t i = 0; i < P; ++i) {
    INFO("element " << i);
    if (i < decay_end) CHECK(std::fabs((pa[i] - pb[i]) - (-lr * 0.5 * p0[i])) <= 1e-14 * (1.0 + std::fabs(p0[i])));
    else CHECK(pa[i] == pb[i]);
  }
  // decay_end = 0 and = P: none and all.
  for (int64_t end : {int64_t{0}, P}) {
    Arenas c = make_arenas(P, DType::f64, 700, end);
    optim::adamw_step(c.a, with, lr, 3, optim::grad_norm(c.a.grads), c.skipped);
    const std::vector<double> pc = c.a.params.to_vector();
    for (int64_t i = 0; i < P; ++i) {
      INFO("decay_end " << end << " element " << i);
      if (end == 0) CHECK(pc[i] == pb[i]);
      else CHECK(std::fabs((pc[i] - pb[i]) - (-lr * 0.5 * p0[i])) <= 1e-14 * (1.0 + std::fabs(p0[i])));
    }
  }
}

TEST_CASE("adamw: reruns are bit-identical", "[optim][adamw]") {
  const int64_t P = 4099;
  optim::AdamWConfig cfg;
  cfg.max_grad_norm = 10.0;
  Arenas a = make_arenas(P, DType::f32, 800, 2000, true), b = make_arenas(P, DType::f32, 800, 2000, true);
  for (int64_t t = 1; t <= 3; ++t) {
    const Tensor g = test::random_tensor({P}, 900 + t);
    a.a.grads.copy_(g);
    b.a.grads.copy_(g);
    const Tensor na = optim::grad_norm(a.a.grads), nb = optim::grad_norm(b.a.grads);
    CHECK(same_bits(na, nb));
    optim::adamw_step(a.a, cfg, 1e-3, t, na, a.skipped);
    optim::adamw_step(b.a, cfg, 1e-3, t, nb, b.skipped);
  }
  CHECK(same_bits(a.a.params, b.a.params));
  CHECK(same_bits(a.a.m, b.a.m));
  CHECK(same_bits(a.a.v, b.a.v));
  CHECK(same_bits(a.a.params_bf16, b.a.params_bf16));
}

TEST_CASE("adamw: argument checks name the problem", "[optim][adamw]") {
  optim::AdamWConfig cfg;
  Arenas r = make_arenas(10, DType::f32, 1000, 5);
  const Tensor nrm = optim::grad_norm(r.a.grads);
  CHECK_THROWS_WITH(optim::grad_norm(Tensor::zeros({2, 3})), Catch::Contains("grad_norm") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(optim::grad_norm(Tensor::zeros({4}, DType::bf16)), Catch::Contains("bf16"));
  CHECK_THROWS_WITH(optim::adamw_step(r.a, cfg, 1e-3, 0, nrm, r.skipped), Catch::Contains("t = 0"));
  CHECK_THROWS_WITH(optim::adamw_step(r.a, cfg, 1e-3, 1, nrm.to(DType::f64), r.skipped), Catch::Contains("norm"));
  Tensor skipped64 = Tensor::zeros({}, DType::i64);
  CHECK_THROWS_WITH(optim::adamw_step(r.a, cfg, 1e-3, 1, nrm, skipped64), Catch::Contains("skipped"));
  Arenas bad = make_arenas(10, DType::f32, 1000, 11);
  CHECK_THROWS_WITH(optim::adamw_step(bad.a, cfg, 1e-3, 1, nrm, bad.skipped), Catch::Contains("decay_end 11"));
  Arenas short_m = make_arenas(10, DType::f32, 1000, 5);
  short_m.a.m = Tensor::zeros({9});
  CHECK_THROWS_WITH(optim::adamw_step(short_m.a, cfg, 1e-3, 1, nrm, short_m.skipped),
                    Catch::Contains("m [9]") && Catch::Contains("params [10]"));
  Arenas bad_shadow = make_arenas(10, DType::f32, 1000, 5);
  bad_shadow.a.params_bf16 = Tensor::zeros({10});
  CHECK_THROWS_WITH(optim::adamw_step(bad_shadow.a, cfg, 1e-3, 1, nrm, bad_shadow.skipped),
                    Catch::Contains("params_bf16"));
  cfg.beta2 = 1.0;
  CHECK_THROWS_WITH(optim::adamw_step(r.a, cfg, 1e-3, 1, nrm, r.skipped), Catch::Contains("beta2"));
}
