// The AdamW step gate on the CPU (engine/optim/adamw.h StepGate, kernels/adamw.h): the skip
// code for a non-finite loss, a non-finite norm and a loss spike (the z-score rule in f64,
// at the boundary), the report (loss, norm, code), params and moments untouched by a skip,
// and the argument checks.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/ops.h"
#include "engine/optim/adamw.h"
#include "kernels/adamw.h"

using namespace lt;

namespace {

struct Arenas {
  optim::AdamWArenas a;
  explicit Arenas(int64_t P) {
    a.params = ops::randn({P}, 5, 0, DType::f32);
    a.grads = ops::randn({P}, 6, 0, DType::f32);
    a.m = ops::randn({P}, 7, 0, DType::f32) * 0.01;
    a.v = ops::rand({P}, 8, 0, DType::f32) * 0.01;
    a.decay_end = P / 2;
  }
};

struct Outcome {
  std::vector<double> report;
  bool changed = false;
  double skipped = 0;
};

Outcome run(double loss, bool nan_grad, bool spike, double mean, double sd, double z) {
  Arenas ar(257);
  if (nan_grad) ar.a.grads.narrow(0, 100, 1).fill_(INFINITY);
  const std::vector<double> p0 = ar.a.params.to_vector(), m0 = ar.a.m.to_vector(), v0 = ar.a.v.to_vector();
  Tensor norm = optim::grad_norm(ar.a.grads);
  Tensor skipped = Tensor::zeros({}, DType::i32);
  optim::StepGate g;
  g.loss = Tensor::full({}, loss, DType::f32);
  g.report = Tensor::full({3}, -1.0, DType::f64);
  g.spike_test = spike;
  g.spike_mean = mean;
  g.spike_sd = sd;
  g.spike_zscore = z;
  optim::adamw_step(ar.a, optim::AdamWConfig{}, 1e-3, 3, norm, skipped, &g);
  Outcome o;
  o.report = g.report.to_vector();
  o.skipped = skipped.item();
  const bool p_changed = ar.a.params.to_vector() != p0, m_changed = ar.a.m.to_vector() != m0,
             v_changed = ar.a.v.to_vector() != v0;
  CHECK(p_changed == m_changed);
  CHECK(p_changed == v_changed);
  o.changed = p_changed;
  return o;
}

double code(const Outcome& o) { return o.report[2]; }
double as_code(kern::SkipCode c) { return static_cast<double>(static_cast<int32_t>(c)); }

}  // namespace

TEST_CASE("adamw gate: skip codes, report and untouched state on a skip", "[optim][adamw]") {
  const Outcome ok = run(2.0, false, false, 0, 0, 0);
  CHECK(code(ok) == as_code(kern::SkipCode::applied));
  CHECK(ok.changed);
  CHECK(ok.skipped == 0);
  CHECK(ok.report[0] == 2.0);
  CHECK(std::isfinite(ok.report[1]));
  CHECK(ok.report[1] > 0);

  const Outcome nan_loss = run(std::nan(""), false, false, 0, 0, 0);
  CHECK(code(nan_loss) == as_code(kern::SkipCode::nonfinite_loss));
  CHECK_FALSE(nan_loss.changed);
  CHECK(nan_loss.skipped == 1);
  CHECK(std::isnan(nan_loss.report[0]));

  // A non-finite loss is named first even when the norm is non-finite too.
  CHECK(code(run(INFINITY, true, false, 0, 0, 0)) == as_code(kern::SkipCode::nonfinite_loss));
  const Outcome inf_norm = run(2.0, true, false, 0, 0, 0);
  CHECK(code(inf_norm) == as_code(kern::SkipCode::nonfinite_norm));
  CHECK_FALSE(inf_norm.changed);
  CHECK(std::isinf(inf_norm.report[1]));
}

TEST_CASE("adamw gate: the spike test is (loss - mean) / sd > z in f64, as the loop's rule", "[optim][adamw]") {
  // loss 3.0 against mean 2.0: z = 1 / sd. With sd = 0.25 z is 4 exactly: not > 4.
  CHECK(code(run(3.0, false, true, 2.0, 0.25, 4.0)) == as_code(kern::SkipCode::applied));
  const Outcome spike = run(3.0, false, true, 2.0, 0.25, 3.999);
  CHECK(code(spike) == as_code(kern::SkipCode::loss_spike));
  CHECK_FALSE(spike.changed);
  CHECK(spike.skipped == 1);
  // sd = 0: no test (the loop's rule gives z = 0).
  CHECK(code(run(30.0, false, true, 2.0, 0.0, 1.0)) == as_code(kern::SkipCode::applied));
  // No spike test requested: a large loss updates.
  CHECK(code(run(30.0, false, false, 2.0, 0.1, 1.0)) == as_code(kern::SkipCode::applied));
}

TEST_CASE("adamw gate: bad gate arguments name the argument", "[optim][adamw]") {
  Arenas ar(64);
  Tensor norm = optim::grad_norm(ar.a.grads);
  Tensor skipped = Tensor::zeros({}, DType::i32);
  optim::StepGate g;
  g.loss = Tensor::zeros({}, DType::f64);
  CHECK_THROWS_WITH(optim::adamw_step(ar.a, optim::AdamWConfig{}, 1e-3, 1, norm, skipped, &g),
                    Catch::Contains("gate.loss"));
  g.loss = Tensor::zeros({}, DType::f32);
  g.report = Tensor::zeros({2}, DType::f64);
  CHECK_THROWS_WITH(optim::adamw_step(ar.a, optim::AdamWConfig{}, 1e-3, 1, norm, skipped, &g),
                    Catch::Contains("gate.report"));
  g.report = Tensor();
  g.spike_test = true;
  g.spike_sd = std::nan("");
  CHECK_THROWS_WITH(optim::adamw_step(ar.a, optim::AdamWConfig{}, 1e-3, 1, norm, skipped, &g),
                    Catch::Contains("spike test"));
}
