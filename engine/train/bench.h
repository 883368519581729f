// The quiet-card arm: `trainer --config F --bench 200 --timers step%50` and
// `trainer bench-compare A.json B.json`.
//
// A bench run times warm-up steps (excluded) and then N steps. Every measured step's total
// time comes from a pair of CUDA events around it (steady clock on the CPU); the fwd / bwd
// / optim split and the per-stage times come from the steps the --timers spec times
// (engine/train/timers.h). The result JSON holds median / p10 / p90 of each, tokens/s,
// launches per step, the allocator's peaks, the build, the GPU and its state before and
// after the run (other processes, SM clock against its maximum, temperature, utilisation),
// with a warning when the card was not quiet.
//
// Comparing two results: for each of total, fwd, bwd, optim and every stage present in
// both, the ratio B / A of the medians, and a verdict ("faster", "slower") only when the
// medians differ by more than the spread of the runs themselves: B's median lies outside
// A's [p10, p90] and A's outside B's. Otherwise "within noise". The documented way to
// compare two configs or builds on a shared card is interleaved rounds (A B A B ...) in one
// call, so that drift of the card hits both alike.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/train/timers.h"

namespace lt::train {

struct Spread {
  double median = 0.0, p10 = 0.0, p90 = 0.0;
  int64_t n = 0;
};
// Median and the 10th / 90th percentiles (linear interpolation between order statistics).
// An empty sample gives n = 0 and zeros.
Spread spread_of(std::vector<double> samples);
nlohmann::json spread_json(const Spread& s);

// The card's state from NVML's command-line face (nvidia-smi): name, driver, SM clock and
// its maximum, memory clock, temperature, utilisation, and the processes using the GPU.
// On the CPU, or without nvidia-smi, {"available": false, "why": ...}.
nlohmann::json card_state(Device device);
// Warnings for a state that is not quiet: other processes on the GPU, utilisation above 5 %
// before the run, an SM clock under 90 % of its maximum while busy, temperature >= 80 C.
std::vector<std::string> card_warnings(const nlohmann::json& before, const nlohmann::json& after, int64_t own_pid);

// Collects the per-step measurements of one bench run.
class BenchRecorder {
 public:
  void add_step(double step_ms);
  void add_timed(const StepTiming& t);
  int64_t steps() const { return static_cast<int64_t>(step_ms_.size()); }
  // The result JSON (caller adds build, config, card state, memory).
  nlohmann::json summary(double tokens_per_step, int64_t launches_per_step) const;

 private:
  std::vector<double> step_ms_;
  std::vector<double> fwd_ms_, bwd_ms_, optim_ms_;
  std::vector<std::pair<std::string, double>> stage_ms_;  // (stage, inclusive ms) of timed steps
};

// The per-stage comparison table of two bench result files; throws std::runtime_error
// naming the file when one cannot be read or is not a bench result.
std::string bench_compare(const nlohmann::json& a, const nlohmann::json& b, const std::string& name_a,
                          const std::string& name_b);

}  // namespace lt::train
