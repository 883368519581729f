// Per-stage step timers: `trainer --timers step%50` times every stage of every 50th step.
//
//   lt::train::TimerSpec spec = lt::train::TimerSpec::parse("step%50");
//   lt::train::StageTimer timer(device);
//   for (step ...) {
//     bool timed = spec.timed(step);           // step counts from 0, the first after warm-up
//     if (timed) timer.begin_step(step);       // installs the stage listener, records "start"
//     ... the step, inside lt::StageScope's ...
//     if (timed) { lt::train::StepTiming t = timer.end_step(); log(t.table()); }
//   }
//
// How a step is timed. begin_step installs a listener on the launch atlas's stage hooks
// (kernels/launch.h). Entering or leaving a stage records a CUDA event on the device's
// current stream (events come from a pool created once, in the constructor); on the CPU
// backend it reads std::chrono::steady_clock instead. end_step records a final event,
// waits for that one event (after the step: nothing synchronises inside it), removes the
// listener and turns the events into times: each stage's inclusive time is the sum of
// the durations of its scopes in the step (a stage entered once per micro-batch adds up),
// its self time the inclusive time less its children's, its share the inclusive time over
// the step's. Launches per stage come from the launch atlas, counted over the step.
// Untimed steps pay nothing: no hook is installed, so a stage scope costs one atomic load
// beyond its own bookkeeping, and no event is recorded. A timed step's boundary costs a clock
// read (CPU) or a clock read and a cudaEventRecord (CUDA; no record when this thread enqueued
// no device work since the previous boundary, under 2 us of host time ago, whose event it then
// shares: nested enters, a leave and the next enter) and an append to a vector whose capacity
// stays from step to step:
// no lock, no string, no map lookup (stages are interned as the atlas's StageNodes, whose
// paths are only read at end_step). Memory samples (a lock and a copy of the allocator's
// stats) are taken only when the constructor asks for them.
// With a KernelRecorder attached (record_kernels; engine/train/kernel_trace.h) a timed step
// also records CUPTI's kernel activity, each kernel tagged with the stages it ran inside.
// Built with LINTRAIN_STAGE_TIMERS=OFF (kernels/launch.h) no stage is ever reported: a timed
// step has its total time and launches only.
// The step's time is from begin_step's event to end_step's; work outside every stage in
// between shows as the row "(outside stages)".
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device.h"

namespace lt::train {

class KernelRecorder;
struct KernelRecord;

// The --timers grammar: off | all | step%N | step=N | step=A..B  (N >= 1 for step%N;
// A <= B; steps count from 0, the first step after warm-up).
extern const char* const kTimerGrammar;

struct TimerSpec {
  enum class Kind : uint8_t { off, all, every, one, range };
  Kind kind = Kind::off;
  int64_t a = 0, b = 0;  // every: a = N; one: a = N; range: [a, b]
  // Throws std::invalid_argument("--timers 'x': expected off | all | ...") on a bad spec.
  static TimerSpec parse(const std::string& text);
  bool timed(int64_t step) const;
  bool enabled() const { return kind != Kind::off; }
  std::string str() const;
};

struct StageTime {
  std::string stage;     // full path, e.g. "fwd/L0/attn/kda"
  std::string label;     // the path below its nearest timed ancestor ("kda"; "optim/clip" at the top)
  int depth = 0;         // number of '/' in the path
  int64_t calls = 0;     // scopes of this stage in the step
  int64_t launches = 0;  // kernel launches, this stage and its children (inclusive)
  double inclusive_ms = 0.0;
  double self_ms = 0.0;  // inclusive less the children's inclusive time
  double share = 0.0;    // inclusive / step
};

struct StepTiming {
  int64_t step = 0;
  double step_ms = 0.0;                               // begin_step -> end_step
  double fwd_ms = 0.0, bwd_ms = 0.0, optim_ms = 0.0;  // top-level stages fwd, bwd, optim
  int64_t launches = 0;                               // all launches in the step
  std::vector<StageTime> stages;                      // depth-first, children after their parent, by name
  // The table: stage tree, calls, launches, inclusive ms, self ms, share of the step.
  std::string table() const;
  // One metrics line: {"kind": "timers", "step": .., "step_ms": .., "fwd_ms": ..,
  // "stages": [{"stage": .., "depth": .., "calls": .., "launches": .., "ms": .., "self_ms": ..,
  // "share": ..}, ...]}; depth 0 = a scope entered outside every other.
  nlohmann::json to_json() const;
};

class StageTimer {
 public:
  // sample_memory: read the caching allocator's bytes at every stage boundary for the Chrome
  // trace's counter tracks (a lock and a copy per boundary: off unless a trace is wanted).
  explicit StageTimer(Device device, bool sample_memory = true);
  ~StageTimer();
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

  void begin_step(int64_t step);
  StepTiming end_step();
  bool active() const;

  // Records the kernels of every timed step with `recorder` (nullptr: stop); not while a
  // step is open. The recorder must outlive the timer's use of it.
  void record_kernels(KernelRecorder* recorder);
  // The kernels of the last timed step (empty without a recorder).
  const std::vector<KernelRecord>& step_kernels() const;

  // Chrome / Perfetto trace of every timed step so far: the stages as complete ("X")
  // slices on a track per stream, each step's launches as a counter, and the caching
  // allocator's in-use and reserved bytes (sampled at stage boundaries) as counter tracks.
  nlohmann::json chrome_trace() const;
  void write_chrome_trace(const std::string& path) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt::train
