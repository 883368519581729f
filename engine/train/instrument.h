// What the trainer's measurement flags attach to the training loop (a StepListener,
// engine/train/loop.h): the per-stage timers (--timers, --timers-trace), the quiet-card
// bench arm (--bench N) and the allocator traces (--alloc-trace, --alloc-snapshot-at).
//
// Step numbers: the loop's steps are 1-based; the timers count from 0 at the first step
// after the warm-up (the bench arm's warm-up steps; none otherwise), so `step%50` times the
// first measured step and every 50th after it.
// Timed steps: a table in the log and one {"type": "timers", ...} line in metrics.jsonl;
// with kernel_trace set, also one kernel-trace line (engine/train/kernel_trace.h) in that
// file, from CUPTI (the constructor throws std::runtime_error when it cannot be recorded).
// The allocator's bytes are sampled at stage boundaries only for --timers-trace.
// Bench: every measured step's time from a CUDA event pair recorded at its boundaries
// (data parallel: also each measured step's gradient-reduction time and its exposed part,
// StepStats::comm_ms / comm_exposed_ms, as "dist" in the result)
// (steady clock on the CPU); the events are read at the end, not per step, so measuring
// leaves the host free to run ahead of the GPU; a timed step's end is recorded before its
// table is built, so the table's host work is not part of the step. At the end the result JSON (engine/train/bench.h) with the card's state before and after.
// Allocator: tracing on for the first `alloc_trace_steps` steps of the run, then the
// PyTorch-schema snapshot (FILE, FILE with .pickle) and the Chrome trace (FILE with
// .trace.json) are written; an out-of-memory error while tracing writes the snapshot too.
// At the end, summary() gives the allocator's line: allocations, cache hits, device mallocs
// after the first step, peak in-use and reserved and their ratio, the largest free block.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/train/loop.h"
#include "engine/train/timers.h"

namespace lt::train {

struct InstrumentOptions {
  TimerSpec timers;               // --timers
  std::string timers_trace;       // --timers-trace FILE (Chrome / Perfetto JSON)
  std::string kernel_trace;       // --kernel-trace FILE (JSON lines; "" = off)
  std::string metrics_path;       // timer lines are appended here ("" = none)
  int64_t bench_steps = 0;        // --bench N (0: off)
  int64_t bench_warmup = 10;      // --bench-warmup W
  std::string bench_out;          // the result JSON
  std::string alloc_trace;        // --alloc-trace FILE ("" = off)
  int64_t alloc_trace_steps = 3;  // steps traced from the first of the run
  int64_t alloc_snapshot_at = 0;  // --alloc-snapshot-at STEP (0 = never)
  int ranks = 1;                  // data-parallel ranks of the job (the bench result says it)
};

class Instrumentation : public StepListener {
 public:
  Instrumentation(const InstrumentOptions& options, Device device, double tokens_per_step);
  ~Instrumentation() override;
  void before_step(int64_t step) override;
  void after_step(const StepStats& stats) override;
  void step_result(const StepStats& stats) override;  // the bench's data-parallel comm figures
  // Writes what is pending (bench result, timers trace, an allocator trace cut short) and
  // returns the allocator summary as JSON. Call once, after the run.
  nlohmann::json finish();
  // The allocator summary line for the log.
  static std::string summary_line(const nlohmann::json& summary);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt::train
