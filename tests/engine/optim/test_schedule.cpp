// Learning-rate schedules (engine/optim/schedule.h): warm-up ramp, the three decays at their
// defining points, monotonicity, the end value past total_steps, names and argument checks.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>
#include <string>

#include "engine/optim/schedule.h"

using namespace lt;
using optim::LrDecay;
using optim::LrSchedule;

namespace {

LrSchedule make(LrDecay d, int64_t warmup, int64_t total) {
  LrSchedule s;
  s.lr = 6e-4;
  s.warmup_steps = warmup;
  s.total_steps = total;
  s.decay = d;
  s.min_lr_ratio = 0.1;
  return s;
}

}  // namespace

TEST_CASE("lr schedule: linear warm-up from lr / W to lr", "[optim][schedule]") {
  for (LrDecay d : {LrDecay::constant, LrDecay::cosine, LrDecay::linear}) {
    INFO(optim::lr_decay_name(d));
    const LrSchedule s = make(d, 10, 110);
    for (int64_t step = 0; step < 10; ++step) CHECK(optim::lr_at(s, step) == s.lr * (step + 1) / 10.0);
    CHECK(optim::lr_at(s, 10) == s.lr);  // the first step after warm-up is at the peak
  }
}

TEST_CASE("lr schedule: decays between warm-up and total_steps", "[optim][schedule]") {
  const double lr = 6e-4, lo = 0.1 * lr;
  const LrSchedule c = make(LrDecay::cosine, 10, 110), l = make(LrDecay::linear, 10, 110),
                   k = make(LrDecay::constant, 10, 110);
  // Halfway through the decay: cosine and linear both sit at the midpoint of [lo, lr].
  CHECK(optim::lr_at(c, 60) == Approx((lr + lo) / 2).epsilon(1e-12));
  CHECK(optim::lr_at(l, 60) == Approx((lr + lo) / 2).epsilon(1e-12));
  // A quarter of the way: cosine is above linear (cos(pi/4) > 1/2 of the drop remaining).
  CHECK(optim::lr_at(c, 35) == Approx(lo + (lr - lo) * 0.5 * (1 + std::cos(std::numbers::pi / 4))).epsilon(1e-12));
  CHECK(optim::lr_at(l, 35) == Approx(lr - (lr - lo) * 0.25).epsilon(1e-12));
  CHECK(optim::lr_at(c, 35) > optim::lr_at(l, 35));
  // Non-increasing after warm-up; the end value from total_steps on.
  for (const LrSchedule* s : {&c, &l}) {
    for (int64_t step = 10; step < 200; ++step) CHECK(optim::lr_at(*s, step + 1) <= optim::lr_at(*s, step));
    CHECK(optim::lr_at(*s, 110) == Approx(lo).epsilon(1e-12));
    CHECK(optim::lr_at(*s, 5000) == Approx(lo).epsilon(1e-12));
    CHECK(optim::lr_at(*s, 109) > lo);
  }
  for (int64_t step : {int64_t{10}, int64_t{60}, int64_t{5000}}) CHECK(optim::lr_at(k, step) == lr);
  // No warm-up: step 0 is already the peak; min_lr_ratio 0 decays to 0.
  LrSchedule z = make(LrDecay::cosine, 0, 50);
  z.min_lr_ratio = 0.0;
  CHECK(optim::lr_at(z, 0) == lr);
  CHECK(optim::lr_at(z, 50) == Approx(0.0).margin(1e-18));
  // Warm-up as long as the run: after it the schedule is at its end value.
  CHECK(optim::lr_at(make(LrDecay::linear, 20, 20), 20) == Approx(lo).epsilon(1e-12));
}

TEST_CASE("lr schedule: names and argument checks", "[optim][schedule]") {
  for (LrDecay d : {LrDecay::constant, LrDecay::cosine, LrDecay::linear})
    CHECK(optim::parse_lr_decay(optim::lr_decay_name(d)) == d);
  CHECK_THROWS_WITH(optim::parse_lr_decay("cosin"), Catch::Contains("\"cosin\""));
  LrSchedule s = make(LrDecay::cosine, 10, 100);
  CHECK_THROWS_WITH(optim::lr_at(s, -1), Catch::Contains("step -1"));
  s.total_steps = 0;
  CHECK_THROWS_WITH(optim::lr_at(s, 0), Catch::Contains("total_steps"));
  s = make(LrDecay::cosine, -1, 100);
  CHECK_THROWS_WITH(optim::lr_at(s, 0), Catch::Contains("warmup_steps"));
  s = make(LrDecay::cosine, 10, 100);
  s.min_lr_ratio = 1.5;
  CHECK_THROWS_WITH(optim::lr_at(s, 0), Catch::Contains("min_lr_ratio"));
}
