// The training run's interface (train_run; its implementation is the Trainer class,
// engine/train/trainer.h, with resume, report and fault injection in files of their own) and
// the pieces the trainer's subcommands share (device choice, model from a checkpoint, evaluation).
//
// One step (stages in the launch atlas / timers in brackets):
//   ["data"]        grad_accum micro-batches from the loader, which writes them (on its
//                   prefetch thread) into host staging slots: pinned memory on CUDA
//                   (engine/staging.h); inv_count = 1 / (valid targets over the whole step),
//                   so the loss is the mean over the step's tokens
//   ["zero_grad"], then per micro-batch ["data/upload"] (an asynchronous copy from the
//                   pinned slot on the compute stream; the slot is reused only once that copy
//                   has run) and Model::forward_backward, whose stages are the model's own:
//                   "fwd/...", "loss", "bwd/..." (grads +=)
//   ["optim/clip"]  grad norm (on the device)
//   ["report"]      the previous step's result read back (see Synchronisation): skip
//                   counters, the progress line and its metrics.jsonl record (host work)
//   ["optim/adamw"] AdamW at lr_at(schedule, step), gated on the device (optim::StepGate): a
//                   NaN/Inf loss or norm, or a loss spike beyond train.spike_zscore standard
//                   deviations of the last train.spike_window losses of applied updates,
//                   skips the update; then the step's loss, grad norm and skip code are
//                   copied (asynchronously) into pinned host memory
//   ["eval"]        every train.eval_every steps: validation loss (+ accuracy; on MQAR the
//                   recall accuracy) over train.eval_batches fresh validation batches
//   ["checkpoint"]  every train.checkpoint_every steps and at the end
//
// Synchronisation. The host does not wait for the device inside a step: it reads a step's
// scalars (its "result": loss, grad norm, skip code) one step late, in the next step after
// that step's forward and backward are enqueued and before its AdamW is, so the device
// always has a step's work queued while the host waits. That is where the skip counters,
// the count of applied updates (AdamW's t), the spike window, the skip warning, the progress
// line and the metrics.jsonl record of a step are updated. The spike test of step s uses
// the window as of step s - 1, exactly as if the host had read every step at once: the mean
// and the standard deviation go to the device with the z-score threshold, and the test
// (loss - mean) / sd > z runs there in f64. So the decisions, the counters and every
// checkpoint are the same as with a read per step, and resume on the CPU stays exact.
// The host waits for the current step's result (a sync) only where it needs it: before an
// evaluation, a sample, a checkpoint, at the end of the run, after SIGINT / SIGTERM, and at
// the start of a step when the skips in a row known so far are one short of
// train.max_consecutive_skips (so the run stops right after the step that reaches the limit,
// with no step begun after it; skips are rare, so this costs nothing otherwise).
// Skips in a row reaching train.max_consecutive_skips stop the run (RunResult::
// too_many_skips), leaving the last good checkpoint as it was (no periodic checkpoint is
// written while a run of skips is going on).
// Fault injection: LINTRAIN_INJECT_NONFINITE="3,7,10..12" (read once per process) sets the
// loss of those steps to NaN on the device after their backward, so the update is skipped
// through the device-side gate exactly as for a real NaN; a warning at the start says so.
// A bad list is a ConfigError naming the variable.
// SIGINT / SIGTERM: the current step finishes, a checkpoint is written, the run returns
// `interrupted` (exit 0) after saying how to resume.
// Output folder: config.json (the effective config), metrics.jsonl (one JSON object per
// logged step, {"type":"eval",...} for evaluations), step-NNNNNNNN/ checkpoints.
// Resume on the CPU is exact: the trajectory after `--resume auto` is bit-identical to the
// uninterrupted run's (weights, moments, counters, the data position and the spike window
// are all in the checkpoint; the schedule is a pure function of the step).
// Data parallel (RunOptions::job, engine/parallel): train.batch_size is the global batch; rank r
// of N takes rows [r B/N, (r+1) B/N) of every batch (the loader draws the whole batch, so the
// batches, the data position and hence the loss trajectory do not depend on N up to the
// reduction order); every rank's loss is divided by the valid targets of the global batch, the
// gradients are summed over the ranks by dist::GradSync (buckets reduced under the backward),
// the loss and the stop flag too, so the norm, the skip decisions and every counter are the
// same on every rank. Rank 0 alone writes (config.json, metrics.jsonl, checkpoints), evaluates
// and samples; the others log warnings only. The parameters start from rank 0's (a broadcast).
// A SIGINT / SIGTERM on any rank reaches all of them through the step's all-reduced stop flag,
// which the host reads one step late: every rank stops after the same step (one after the
// signal) and checkpoints. Checkpoints have the single-process layout (under dist.zero1 the
// moments are gathered for them), so a run resumes with any number of ranks.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/loader.h"
#include "engine/device.h"
#include "engine/mixers/segments.h"
#include "engine/model/model.h"
#include "engine/parallel/job.h"
#include "engine/train/checkpoint.h"
#include "engine/train/config.h"

namespace lt::train {

// What one step did, handed to the step listener.
struct StepStats {
  int64_t step = 0;  // 1-based number of the step
  double lr = 0.0;
  double ms = 0.0;     // host wall time of the step, from its start to its work enqueued
                       // (it includes the wait for the previous step's result, so in a
                       // steady run it is the step's period)
  int64_t tokens = 0;  // tokens processed (B * T * grad_accum)
  // The step's result, read from the device one step late (see the header comment):
  // filled when has_result; in after_step it is not (NaN, NaN, false, "").
  bool has_result = false;
  double loss = 0.0;       // mean token loss of the step
  double grad_norm = 0.0;  // before clipping
  bool skipped = false;
  std::string skip_reason;  // "non-finite loss", "loss spike (z = 7.1)", ...
  // Data parallel on CUDA, with the result: the time the communication stream spent in the
  // step's reductions, and the part of it the compute stream waited for (the rest ran under
  // the backward); dist::CommTiming. 0 otherwise.
  double comm_ms = 0.0, comm_exposed_ms = 0.0;
};

// Hooks around every step, for the per-stage timers (and anything else that must see step
// boundaries). Called on the training thread, in step order:
//   before_step(s)  the step is about to run;
//   after_step(st)  all of step s's work is enqueued (its stages are closed); the device may
//                   still be running it; st.has_result is false;
//   step_result(st) step s's result has been read (st.has_result): at the latest in step
//                   s + 1 (before its AdamW), earlier at a sync point; every step whose
//                   after_step was called gets its step_result before the run returns.
struct StepListener {
  virtual ~StepListener() = default;
  virtual void before_step(int64_t step) { (void)step; }  // step: 1-based, about to run
  virtual void after_step(const StepStats& stats) { (void)stats; }
  virtual void step_result(const StepStats& stats) { (void)stats; }
};

// The step now running (1-based; 0 outside training). Readable from any thread (the
// allocator trace tags events with it).
int64_t current_train_step();

enum class RunResult : uint8_t { finished, interrupted, too_many_skips };

struct RunOptions {
  std::string resume = "auto";  // auto | none | a checkpoint folder
  std::string config_path;      // shown in the resume hint
  StepListener* listener = nullptr;
  bool handle_signals = true;  // install the SIGINT / SIGTERM handlers
  bool measure_only = false;   // the bench arm: no evaluation, no checkpoints, no resume
  // Data parallel: this process's rank of the job (engine/parallel/job.h); nullptr: one process.
  dist::Job* job = nullptr;
  // --dump-trajectory: a folder for the run's trajectory (engine/train/trajectory.h); "": none.
  std::string dump_trajectory;
};

// Runs (or resumes) the training described by rc. Throws ConfigError for bad input found
// before anything is written (data files, a checkpoint that does not fit the config, an
// output folder that cannot be written); std::runtime_error for failures during the run.
RunResult train_run(const RunConfig& rc, const RunOptions& options);

// "auto" -> cuda:0 when CUDA works, else cpu; "cpu"; "cuda" / "cuda:N" (ConfigError naming
// the key when CUDA is not usable).
Device resolve_device(const std::string& spec);
// The device of a run: resolve_device(rc.device), except that the fp64 precision mode runs on
// the CPU (auto picks it; an explicit CUDA device is a ConfigError naming both keys).
Device resolve_run_device(const RunConfig& rc);

// A model built from a checkpoint folder's config and weights, on `device`. need_data:
// the run's data files must exist (eval); otherwise a missing data.path is tolerated.
struct LoadedModel {
  RunConfig config;
  std::unique_ptr<model::Model> model;
  Checkpoint checkpoint;
};
LoadedModel load_model_from_checkpoint(const std::string& dir, const std::string& device_spec, bool need_data);

struct EvalResult {
  double loss = 0.0;      // mean token loss over the batches
  double accuracy = 0.0;  // argmax == target over the scored targets
  int64_t targets = 0;    // scored targets
};
// Validation loss and accuracy over `batches` fresh validation batches (the same batches
// every call: the validation loader restarts from the seed).
EvalResult evaluate(model::Model& m, const RunConfig& rc, int64_t batches);

// Packed documents of a host batch: the rows' document starts (tokens equal to
// data.reset_token(): the end-of-text token that opens each document) when the run restarts
// the state there and some row holds a start past t = 0; nullopt otherwise. Build it before
// data::upload (which returns a staged batch's slot).
std::optional<mixers::Segments> batch_segments(const data::Batch& batch, const data::DataConfig& dc, Device device);

// Sampling: engine/model/sampling.h; prompts and printed samples: engine/train/prompt.h.

}  // namespace lt::train
