// The quiet-card arm's pieces on the CPU: percentiles, the bench summary JSON, the card
// warnings and bench-compare's verdicts.
#include <catch2/catch.hpp>

#include "engine/train/bench.h"

using namespace lt;
using namespace lt::train;

TEST_CASE("spread_of: median and p10 / p90 by linear interpolation", "[bench]") {
  std::vector<double> v;
  for (int i = 10; i >= 0; --i) v.push_back(i);  // 0..10, unsorted
  const Spread s = spread_of(v);
  CHECK(s.n == 11);
  CHECK(s.median == Approx(5.0));
  CHECK(s.p10 == Approx(1.0));
  CHECK(s.p90 == Approx(9.0));
  const Spread two = spread_of({1.0, 2.0});
  CHECK(two.median == Approx(1.5));
  CHECK(two.p10 == Approx(1.1));
  CHECK(spread_of({}).n == 0);
  CHECK(spread_json(spread_of({})).is_null());
}

TEST_CASE("BenchRecorder: the summary has the spreads, tokens/s and per-stage medians", "[bench]") {
  BenchRecorder r;
  for (int i = 0; i < 9; ++i) r.add_step(10.0 + i);  // 10..18 ms
  StepTiming t;
  t.fwd_ms = 3.0;
  t.bwd_ms = 6.0;
  t.optim_ms = 1.0;
  t.stages.push_back({"fwd", "fwd", 0, 1, 4, 3.0, 1.0, 0.3});
  t.stages.push_back({"fwd/L0", "L0", 1, 1, 2, 2.0, 2.0, 0.2});
  r.add_timed(t);
  t.fwd_ms = 5.0;
  t.stages[0].inclusive_ms = 5.0;
  r.add_timed(t);
  const nlohmann::json j = r.summary(4096.0, 42);
  CHECK(j["kind"] == "lintrain-bench");
  CHECK(j["steps"] == 9);
  CHECK(j["ms_per_step"]["median"].get<double>() == Approx(14.0));
  CHECK(j["tokens_per_s"].get<double>() == Approx(4096.0 / 0.014));
  CHECK(j["fwd_ms"]["median"].get<double>() == Approx(4.0));
  CHECK(j["bwd_ms"]["median"].get<double>() == Approx(6.0));
  CHECK(j["stages"]["fwd"]["median"].get<double>() == Approx(4.0));
  CHECK(j["stages"]["fwd/L0"]["n"] == 2);
  CHECK(j["launches_per_step"] == 42);
}

TEST_CASE("card_warnings: other processes, a busy or hot card, a low clock", "[bench]") {
  const nlohmann::json quiet = {
      {"available", true},      {"processes", nlohmann::json::array({{{"pid", 7}, {"name", "me"}}})},
      {"temperature_c", 40.0},  {"utilization_pct", 0.0},
      {"sm_clock_mhz", 1980.0}, {"sm_clock_max_mhz", 1980.0}};
  CHECK(card_warnings(quiet, quiet, 7).empty());
  nlohmann::json busy = quiet;
  busy["processes"].push_back({{"pid", 99}, {"name", "python3"}});
  busy["utilization_pct"] = 60.0;
  busy["temperature_c"] = 85.0;
  busy["sm_clock_mhz"] = 1200.0;
  const auto w = card_warnings(busy, busy, 7);
  auto has = [&](const std::string& s) {
    for (const auto& x : w)
      if (x.find(s) != std::string::npos) return true;
    return false;
  };
  CHECK(has("pid 99"));
  CHECK(has("60 % busy"));
  CHECK(has("85 C"));
  CHECK(has("SM clock 1200 MHz"));
  const auto cpu = card_warnings(card_state(Device::cpu()), card_state(Device::cpu()), 7);
  REQUIRE(cpu.size() == 2);
  CHECK(cpu[0].find("card state unknown") != std::string::npos);
}

TEST_CASE("bench_compare: a verdict only where the medians lie outside each other's spread", "[bench]") {
  auto result = [](double step, double fwd) {
    nlohmann::json j = {{"kind", "lintrain-bench"}};
    j["ms_per_step"] = {{"median", step}, {"p10", step - 0.1}, {"p90", step + 0.1}, {"n", 100}};
    j["fwd_ms"] = {{"median", fwd}, {"p10", fwd - 1.0}, {"p90", fwd + 1.0}, {"n", 4}};
    j["stages"] = {{"fwd", j["fwd_ms"]}, {"bwd", j["ms_per_step"]}};
    return j;
  };
  const nlohmann::json a = result(10.0, 4.0), b = result(9.0, 4.5);
  nlohmann::json b_only = b;
  b_only["stages"]["loss"] = b["fwd_ms"];
  const std::string out = bench_compare(a, b_only, "a.json", "b.json");
  CHECK(out.find("A = a.json") != std::string::npos);
  // step: 9.0 lies outside [9.9, 10.1] and 10.0 outside [8.9, 9.1]: a verdict.
  CHECK(out.find("0.900  B faster") != std::string::npos);
  // fwd: 4.5 inside [3, 5]: within noise.
  CHECK(out.find("1.125  within noise") != std::string::npos);
  CHECK(out.find("only in B: loss") != std::string::npos);
  CHECK_THROWS_WITH(bench_compare(nlohmann::json::object(), b, "x.json", "b.json"),
                    Catch::Matchers::Contains("'x.json' is not a trainer --bench result"));
}
