// The training run as an object: train_run (loop.h) makes a Trainer and runs it. The
// constructor checks every input before anything is written (config against a checkpoint,
// model, data, init_from, trajectory dump, output folder) and sets the run up (weights from the
// seed, a folder or the checkpoint; data-parallel sync; metrics.jsonl); run() is the step loop.
// The members are the run's state shared by the step, its report, the checkpoint and the stop
// logic; loop.h's header comment describes one step and when the host waits for the device.
#pragma once
#include <cstdint>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/loader.h"
#include "engine/parallel/grad_sync.h"
#include "engine/staging.h"
#include "engine/train/loop.h"
#include "engine/train/resume.h"
#include "engine/train/step_graph.h"
#include "engine/train/trajectory.h"

namespace lt::train {

class Trainer {
 public:
  // Throws ConfigError for bad input (nothing written then), std::runtime_error otherwise.
  Trainer(const RunConfig& rc, const RunOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  RunResult run();

 private:
  struct InFlight;  // a step whose result is on its way to the host

  void check_output_folder();  // writable; leftovers of interrupted checkpoints removed
  void set_up_state();         // weights, sync, resume, metrics.jsonl, rank agreement
  std::string save_checkpoint();
  void enqueue_step();  // one step's work, its result left in flight
  Tensor graph_step(const std::vector<data::DeviceBatch>& uploaded, double inv_count);
  Tensor step_body(const std::vector<data::DeviceBatch>& inputs,
                   const std::vector<std::optional<mixers::Segments>>& segments, double inv_count);
  void retire();          // the in-flight step's result: counters, window, report
  bool stop_for_skips();  // after a retire: too many skips in a row end the run
  void report(const StepStats& st);
  void evaluate_and_log();
  void sample_and_log();
  void clear_live() const;

  // The run as configured.
  const RunConfig& rc_;
  const TrainConfig& tc_;
  const RunOptions& options_;
  dist::Job* const job_;
  const int rank_, world_;
  const bool writer_;  // the rank that writes files, evaluates and samples
  Device dev_;
  const int64_t B_, T_;
  const std::vector<int64_t>& inject_;  // LINTRAIN_INJECT_NONFINITE steps

  // What the constructor sets up.
  std::optional<Checkpoint> resume_from_;
  bool weights_from_folder_ = false;  // train.init_from was loaded
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<data::Loader> loader_;
  std::unique_ptr<dist::GradSync> sync_;
  std::unique_ptr<TrajectoryDump> dump_;
  std::string metrics_path_, config_text_;

  // The loop's counters (a checkpoint's "lintrain_state") and its running figures.
  LoopState state_;
  int64_t first_step_ = 0;
  double ema_ms_ = 0.0;
  bool agreed_stop_ = false;  // data parallel: a rank asked to stop (read one step late)
  RunResult result_ = RunResult::finished;

  // Reporting.
  std::ofstream metrics_;
  bool live_ = false;  // a terminal: the progress line is redrawn every step
  double flops_per_token_ = 0.0, peak_ = 0.0;
  int64_t tokens_per_step_ = 0;

  // Device scalars of the step and the staging of its result.
  Tensor step_scalars_;  // [2] loss (over the micro-batches), stop request; the params' dtype
  Tensor loss_accum_, stop_flag_;
  Tensor skipped_dev_;    // i32 {}
  Tensor inv_count_dev_;  // f64 {}: the step's loss scale, 1 / (scored targets of the step)
  Tensor report_dev_;     // [3] f64: loss, grad norm, skip code of the step
  std::unique_ptr<HostStaging> readback_;
  std::unique_ptr<InFlight> in_flight_;
  std::unique_ptr<StepGraph> graph_;  // train.cuda_graph (null: every step eager)
};

}  // namespace lt::train
