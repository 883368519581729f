#include "engine/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include <spdlog/spdlog.h>

#include "engine/model/sampling.h"
#include "engine/ops.h"
#include "engine/optim/adamw.h"
#include "engine/optim/schedule.h"
#include "engine/train/fault_injection.h"
#include "engine/train/init_from.h"
#include "engine/train/prompt.h"
#include "engine/train/report.h"
#include "kernels/adamw.h"
#include "kernels/launch.h"

namespace lt::train {
namespace fs = std::filesystem;
namespace {

std::atomic<int64_t> g_step{0};
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  // A second signal ends the process the default way.
  std::signal(sig, SIG_DFL);
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Mean and standard deviation of the loss window.
std::pair<double, double> window_stats(const std::deque<double>& w) {
  double mean = 0.0;
  for (double x : w) mean += x;
  mean /= static_cast<double>(w.size());
  double var = 0.0;
  for (double x : w) var += (x - mean) * (x - mean);
  var /= static_cast<double>(w.size() > 1 ? w.size() - 1 : 1);
  return {mean, std::sqrt(var)};
}

// The reports on their way to the host: [3] f64 (loss, grad norm, skip code), then the summed
// stop flag (f32).
constexpr size_t kStopOffset = 3 * sizeof(double);

}  // namespace

int64_t current_train_step() { return g_step.load(std::memory_order_relaxed); }

struct Trainer::InFlight {
  StepStats st;
  HostStaging::Lease report;  // [3] f64: loss, grad norm, skip code; then the stop flag
  double spike_mean = 0.0, spike_sd = 0.0;
  size_t window_size = 0;
};

Trainer::Trainer(const RunConfig& rc, const RunOptions& options)
    : rc_(rc), tc_(rc.train), options_(options), job_(options.job), rank_(options.job ? options.job->rank() : 0),
      world_(options.job ? options.job->world() : 1), writer_(rank_ == 0),
      dev_(options.job ? options.job->device() : resolve_run_device(rc)), B_(rc.train.batch_size), T_(rc.train.seq_len),
      inject_(inject_nonfinite_steps()) {
  if (B_ % world_ != 0)
    throw ConfigError("config key 'train.batch_size': " + std::to_string(B_) + " rows cannot be split evenly over " +
                      std::to_string(world_) + " data-parallel ranks (use a multiple of " + std::to_string(world_) +
                      ")");
  const data::RowSlice rows{rank_ * (B_ / world_), B_ / world_};
  if (job_ && rc_.model.precision == model::Precision::fp64)
    throw ConfigError("config key 'model.precision': fp64 runs in one process on the CPU, not data parallel");

  // ---- everything that can be bad input is checked before the first write -------------
  resume_from_ = find_resume_checkpoint(options_.resume, rc_.out_dir);
  if (resume_from_) check_resume_fits(*resume_from_, rc_.effective);
  try {
    model_ = std::make_unique<model::Model>(rc_.model, dev_);
  } catch (const std::invalid_argument& e) { throw ConfigError(std::string("model: ") + e.what()); }
  try {
    // Staging slots: the prefetch queue, the step's micro-batches and the copies of up to two
    // steps in flight, plus the one being filled (the ring grows if that is not enough).
    const int slots = rc_.data.prefetch + static_cast<int>(3 * tc_.grad_accum) + 1;
    loader_ = std::make_unique<data::Loader>(rc_.data, data::Split::train, B_, T_, tc_.seed, data::Staging{dev_, slots},
                                             rows);
    data::Loader probe(rc_.data, data::Split::val, B_, T_, tc_.seed);
    if (probe.vocab_size() > rc_.model.vocab_size)
      throw ConfigError("data vocabulary " + std::to_string(probe.vocab_size()) + " exceeds model.vocab_size " +
                        std::to_string(rc_.model.vocab_size));
  } catch (const ConfigError&) { throw; } catch (const std::exception& e) {
    const std::string what = e.what();  // the sources' messages mostly start with "data: " already
    throw ConfigError(what.rfind("data: ", 0) == 0 ? what : "data: " + what);
  }
  // train.init_from: the weights are read (and checked) now, with the other input.
  weights_from_folder_ = !tc_.init_from.empty() && !resume_from_;
  if (weights_from_folder_) init_from_folder(tc_.init_from, *model_);
  if (resume_from_) {
    try {
      loader_->restore(resume_from_->loop_state.at("data"));
    } catch (const std::exception& e) {
      throw ConfigError("checkpoint " + resume_from_->dir + ": its data position does not fit this data: " + e.what());
    }
  }
  if (!options_.dump_trajectory.empty()) {
    if (job_) throw ConfigError("--dump-trajectory records one process's run, not a data-parallel one");
    dump_ = std::make_unique<TrajectoryDump>(options_.dump_trajectory, rc_);
  }
  check_output_folder();
  set_up_state();
}

Trainer::~Trainer() = default;

void Trainer::check_output_folder() {
  if (!writer_) return;
  // The output folder must be writable before anything else happens in it.
  std::error_code ec;
  fs::create_directories(rc_.out_dir, ec);
  const std::string probe = (fs::path(rc_.out_dir) / (".write-test." + std::to_string(::getpid()))).string();
  FILE* f = ec ? nullptr : std::fopen(probe.c_str(), "w");
  if (!f)
    throw ConfigError("config key 'out': folder '" + rc_.out_dir + "' cannot be written" +
                      (ec ? " (" + ec.message() + ")" : ""));
  std::fclose(f);
  fs::remove(probe, ec);
  // Leftovers of checkpoints interrupted while being written.
  for (const auto& e : fs::directory_iterator(rc_.out_dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind(".step-", 0) == 0) fs::remove_all(e.path());
  }
  if (options_.resume == "none") {
    for (const auto& d : checkpoint_list(rc_.out_dir)) {
      spdlog::info("--resume none: removing the old checkpoint {}", d);
      fs::remove_all(d);
    }
  }
  std::ofstream cfg(fs::path(rc_.out_dir) / "config.json", std::ios::trunc);
  cfg << rc_.effective.dump(2) << "\n";
}

void Trainer::set_up_state() {
  if (weights_from_folder_) spdlog::info("initial weights from {} (AdamW starts fresh)", tc_.init_from);
  else model_->init_weights(tc_.seed);
  // Data parallel: the gradient reduction (and, under dist.zero1, the moments' shards).
  if (job_) {
    dist::GradSyncConfig gc;
    gc.bucket_bytes = rc_.dist.bucket_bytes;
    gc.reduce_dtype = rc_.dist.reduce_bf16 ? DType::bf16 : DType::f32;
    gc.overlap = rc_.dist.overlap;
    gc.zero1 = rc_.dist.zero1;
    sync_ = std::make_unique<dist::GradSync>(job_->comm(), *model_, gc);
  }
  metrics_path_ = (fs::path(rc_.out_dir) / "metrics.jsonl").string();
  if (resume_from_) {
    StageScope stage("checkpoint");
    model_->load_params(resume_from_->model);
    model_->refresh_shadow();
    if (sync_) {
      const int64_t P = model_->arenas().params.numel();
      Tensor m_full = Tensor::zeros({P}, model_->arenas().params.dtype(), dev_);
      Tensor v_full = Tensor::zeros({P}, model_->arenas().params.dtype(), dev_);
      load_moments(*model_, resume_from_->state, m_full, v_full);
      sync_->load_moments_full(m_full, v_full);
    } else {
      load_moments(*model_, resume_from_->state, model_->arenas().m, model_->arenas().v);
    }
    state_ = LoopState::from_json(resume_from_->loop_state);
    if (writer_) metrics_truncate(metrics_path_, state_.step);
    spdlog::info("resumed from {} at step {} of {}", resume_from_->dir, state_.step, tc_.steps);
  } else if (writer_) {
    std::ofstream(metrics_path_, std::ios::trunc);
  }
  state_.seed = tc_.seed;
  if (job_) {
    // Every rank starts from rank 0's parameters and at rank 0's step.
    Tensor where = Tensor::full({1}, static_cast<double>(state_.step), DType::f64, dev_);
    job_->comm().broadcast(where, 0, current_stream(dev_));
    const auto root_step = static_cast<int64_t>(where.item());
    if (root_step != state_.step)
      throw std::runtime_error("rank " + std::to_string(rank_) + " resumed at step " + std::to_string(state_.step) +
                               ", rank 0 at step " + std::to_string(root_step) +
                               ": the ranks do not see the same checkpoints in '" + rc_.out_dir + "'");
    job_->comm().broadcast(model_->arenas().params, 0, current_stream(dev_));
    model_->refresh_shadow();
    job_->progress();
  }
  config_text_ = rc_.effective.dump();
  if (dump_) dump_->start(*model_, rc_);
}

std::string Trainer::save_checkpoint() {
  StageScope stage("checkpoint");
  state_.data = loader_->state();
  // Data parallel: the moments as one [P] pair on every rank (gathered under zero1: a
  // collective, so every rank comes here); rank 0 writes.
  auto [m_full, v_full] = sync_ ? sync_->moments_full() : std::pair{model_->arenas().m, model_->arenas().v};
  if (!writer_) return std::string();
  std::string dir =
      checkpoint_write(rc_.out_dir, state_.step, model_->named_params(), moment_tensors(*model_, m_full, v_full),
                       state_.to_json(), config_text_, tc_.keep_checkpoints);
  spdlog::info("checkpoint {}", dir);
  return dir;
}

void Trainer::clear_live() const {
  if (live_) std::fprintf(stderr, "\r\033[K");
}

RunResult Trainer::run() {
  if (state_.step >= tc_.steps) {
    spdlog::info(
        "nothing to do: the run in {} already reached step {} of {} (raise --steps, or --resume none to start over)",
        rc_.out_dir, state_.step, tc_.steps);
    return RunResult::finished;
  }
  if (options_.handle_signals) {
    g_stop_signal = 0;
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
  }
  if (writer_) metrics_.open(metrics_path_, std::ios::app);
  live_ = writer_ && ::isatty(::fileno(stderr)) != 0;
  flops_per_token_ = model_->flops_per_token(T_, B_ / world_);
  peak_ = peak_flops(dev_, rc_.model.precision);
  tokens_per_step_ = B_ * T_ * tc_.grad_accum;
  if (!inject_.empty()) {
    std::string list;
    for (int64_t s : inject_) list += (list.empty() ? "" : ", ") + std::to_string(s);
    spdlog::warn("LINTRAIN_INJECT_NONFINITE: the loss of step(s) {} is made non-finite on the device (fault injection)",
                 list);
  }
  // The step's scalars [2] f32 (f64 in the fp64 mode): the loss (accumulated over the
  // micro-batches) and, data parallel, this rank's stop request; summed over the ranks before
  // the update.
  step_scalars_ = Tensor::zeros({2}, model_->arenas().params.dtype(), dev_);
  loss_accum_ = step_scalars_.narrow(0, 0, 1).view({});
  stop_flag_ = step_scalars_.narrow(0, 1, 1);
  skipped_dev_ = Tensor::zeros({}, DType::i32, dev_);
  inv_count_dev_ = Tensor::zeros({}, DType::f64, dev_);
  report_dev_ = Tensor::zeros({3}, DType::f64, dev_);
  readback_ = std::make_unique<HostStaging>(dev_, kStopOffset + sizeof(double), 4);
  first_step_ = state_.step;
  if (tc_.cuda_graph && dev_.is_cuda() && !sync_) graph_ = std::make_unique<StepGraph>(dev_);

  spdlog::info("training {} ({} parameters) on {}: {} steps of {} tokens, mixer chunk {}{}, out {}",
               model::arch_name(rc_.model.arch), model_->num_params(), dev_.str(), tc_.steps, tokens_per_step_,
               model_->mixer_chunk(B_ / world_, T_), rc_.model.chunk == 0 ? " (auto)" : "", rc_.out_dir);
  if (rc_.data.reset_token() >= 0)
    spdlog::info(
        "packed documents: the state restarts at every token {} (data.eot_token), whose prediction is not "
        "scored (data.reset_state_at_eot)",
        rc_.data.reset_token());
  if (job_)
    spdlog::info("data parallel: {} ranks ({}), {} rows each; {} gradient buckets, {} reduction{}{}", world_,
                 job_->comm().backend(), B_ / world_, sync_->buckets().size(), rc_.dist.reduce_bf16 ? "bf16" : "fp32",
                 rc_.dist.overlap ? ", overlapped with the backward" : "",
                 rc_.dist.zero1 ? ", AdamW state sharded (ZeRO-1)" : "");

  while (state_.step < tc_.steps) {
    // One skip short of the limit: the previous step's result decides whether this step runs.
    if (in_flight_ && state_.consecutive + 1 >= tc_.max_consecutive_skips) {
      retire();
      if (stop_for_skips()) break;
    }
    enqueue_step();
    if (job_) job_->progress();

    // Data parallel, the ranks stop together: after the step whose result showed a request.
    const int64_t step = state_.step;
    const bool stop = sync_ ? agreed_stop_ : g_stop_signal != 0;
    const bool eval_now =
        !options_.measure_only && ((tc_.eval_every > 0 && step % tc_.eval_every == 0) || step == tc_.steps);
    const bool sample_now = !options_.measure_only && tc_.sample_every > 0 && step % tc_.sample_every == 0 &&
                            rc_.data.source != "synthetic";
    const bool checkpoint_due =
        !options_.measure_only &&
        ((tc_.checkpoint_every > 0 && step % tc_.checkpoint_every == 0) || step == tc_.steps || stop);
    if (eval_now || sample_now || checkpoint_due || stop || step == tc_.steps) {
      retire();
      if (stop_for_skips()) break;
    }
    if (eval_now && writer_) evaluate_and_log();
    if (sample_now && writer_) sample_and_log();
    // No periodic checkpoint in the middle of a run of skipped updates: the newest one stays
    // the last good state.
    if (checkpoint_due && (state_.consecutive == 0 || stop)) {
      clear_live();
      save_checkpoint();
    }
    if (job_) job_->progress();
    if (stop) {
      clear_live();
      spdlog::info(
          "{} received: stopped after step {} with a checkpoint. Resume with: trainer --config {} --resume auto{}",
          g_stop_signal == SIGINT    ? "SIGINT"
          : g_stop_signal == SIGTERM ? "SIGTERM"
                                     : "a stop request (another rank)",
          step, options_.config_path.empty() ? "<config>" : options_.config_path, " --out " + rc_.out_dir);
      result_ = RunResult::interrupted;
      break;
    }
  }
  retire();
  if (dump_) dump_->finish();
  if (live_) std::fprintf(stderr, "\n");
  if (options_.handle_signals) {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
  g_step.store(0, std::memory_order_relaxed);
  if (result_ == RunResult::finished)
    spdlog::info("done: {} steps ({} updates skipped); checkpoints in {}", state_.step, state_.skipped, rc_.out_dir);
  return result_;
}

void Trainer::enqueue_step() {
  const int64_t this_step = state_.step + 1;
  g_step.store(this_step, std::memory_order_relaxed);
  if (options_.listener) options_.listener->before_step(this_step);
  const auto t0 = Clock::now();
  auto f = std::make_unique<InFlight>();
  StepStats& st = f->st;
  st.step = this_step;
  st.lr = optim::lr_at(tc_.schedule, state_.step);
  st.tokens = tokens_per_step_;
  st.loss = st.grad_norm = std::numeric_limits<double>::quiet_NaN();

  std::vector<data::Batch> batches;
  int64_t valid = 0;
  {
    StageScope stage("data");
    for (int64_t i = 0; i < tc_.grad_accum; ++i) {
      batches.push_back(loader_->next());
      valid += batches.back().global_valid_targets;  // the whole global batch's
    }
    if (dump_) dump_->add_batches(this_step, batches);
  }
  std::vector<data::DeviceBatch> uploaded(batches.size());
  std::vector<std::optional<mixers::Segments>> segments(batches.size());  // packed documents
  bool packed = false;
  {
    StageScope stage("data/upload");
    for (size_t i = 0; i < batches.size(); ++i) {
      segments[i] = batch_segments(batches[i], rc_.data, dev_);
      uploaded[i] = data::upload(batches[i], dev_);
      packed = packed || segments[i].has_value();
    }
  }
  // The loss scale, read on the device (by eager and replayed steps alike).
  const double inv_count = valid > 0 ? 1.0 / static_cast<double>(valid) : 0.0;
  inv_count_dev_.fill_(inv_count);
  Tensor norm;
  if (graph_ && !packed && !stage_hook_installed() && graph_->use_now()) norm = graph_step(uploaded, inv_count);
  if (!norm.defined()) norm = step_body(uploaded, segments, inv_count);
  if (std::binary_search(inject_.begin(), inject_.end(), this_step))
    loss_accum_.fill_(std::numeric_limits<double>::quiet_NaN());
  // The previous step's result: the device has this step's forward and backward queued.
  {
    StageScope stage("report");
    retire();
  }
  {
    StageScope stage("optim/adamw");
    optim::StepGate gate;
    gate.loss = loss_accum_;
    gate.report = report_dev_;
    if (tc_.spike_zscore > 0 && static_cast<int64_t>(state_.window.size()) >= std::min<int64_t>(tc_.spike_window, 10)) {
      auto [mean, sd] = window_stats(state_.window);
      gate.spike_test = true;
      gate.spike_mean = f->spike_mean = mean;
      gate.spike_sd = f->spike_sd = sd;
      gate.spike_zscore = tc_.spike_zscore;
      f->window_size = state_.window.size();
    }
    optim::adamw_step(sync_ ? sync_->update_arenas() : model_->arenas(), tc_.adamw, st.lr, state_.applied + 1, norm,
                      skipped_dev_, &gate);
    if (sync_) sync_->after_update();
    f->report = readback_->acquire();
    copy_to_host_async(f->report, report_dev_);
    if (sync_) copy_to_host_async(f->report, stop_flag_, kStopOffset);
  }
  state_.step = this_step;
  st.ms = ms_since(t0);
  if (options_.listener) options_.listener->after_step(st);
  in_flight_ = std::move(f);
}

// zero_grad, every micro-batch's forward and backward, the data-parallel reduction, and the
// gradient norm: the step's part that a CUDA graph captures. segments: one per micro-batch, or
// empty (no packed documents). The loss scale is read from inv_count_dev_ (inv_count is its
// host value).
Tensor Trainer::step_body(const std::vector<data::DeviceBatch>& inputs,
                          const std::vector<std::optional<mixers::Segments>>& segments, double inv_count) {
  {
    StageScope stage("zero_grad");
    model_->zero_grad();
    step_scalars_.zero_();
  }
  if (sync_) sync_->begin_step(/*timed=*/dev_.is_cuda());
  for (size_t i = 0; i < inputs.size(); ++i) {
    // The last micro-batch completes the gradients: its backward starts their reduction.
    const bool last = i + 1 == inputs.size();
    const mixers::Segments* seg = i < segments.size() && segments[i] ? &*segments[i] : nullptr;
    model_->forward_backward(inputs[i].tokens, inputs[i].targets, inv_count, loss_accum_,
                             sync_ && last ? &sync_->hook() : nullptr, seg, inv_count_dev_);
  }
  if (sync_) {
    StageScope stage("dist/sync");
    if (g_stop_signal != 0) stop_flag_.fill_(1.0);
    sync_->finish(step_scalars_);
  }
  StageScope stage("optim/clip");
  return sync_ ? sync_->grad_norm() : optim::grad_norm(model_->arenas().grads);
}

// The step from the CUDA graph (engine/train/step_graph.h): the inputs copied into the
// graph's buffers, then its replay (captured first when this is the first such step). Returns
// the gradient norm; undefined when the capture failed (the step then runs eagerly, and so
// does the rest of the run).
Tensor Trainer::graph_step(const std::vector<data::DeviceBatch>& uploaded, double inv_count) {
  {
    StageScope stage("data/upload");
    graph_->stage_inputs(uploaded);
  }
  if (!graph_->captured()) {
    try {
      graph_->capture([&] { return step_body(graph_->inputs(), {}, inv_count); });
    } catch (const std::exception& e) {
      spdlog::warn("train.cuda_graph: the step could not be captured as a CUDA graph ({}); the run goes on without one",
                   e.what());
      graph_.reset();
      return Tensor();
    }
    spdlog::info("train.cuda_graph: step {} captured ({} kernel launches, {} graph nodes); replayed from now on",
                 state_.step + 1, graph_->launches(), graph_->nodes());
  } else {
    // The replay's launches, in the atlas (the capture counted its own against their stages).
    StageScope stage("step_graph");
    count_launch(graph_->launches());
  }
  return graph_->replay(current_stream(dev_));
}

void Trainer::retire() {
  if (!in_flight_) return;
  std::unique_ptr<InFlight> f = std::move(in_flight_);
  f->report.wait();
  double r[3];
  std::memcpy(r, f->report.data(), sizeof r);
  if (sync_) {
    float stop_sum = 0.0f;
    std::memcpy(&stop_sum, static_cast<const char*>(f->report.data()) + kStopOffset, sizeof stop_sum);
    agreed_stop_ |= stop_sum > 0.0f;
  }
  f->report.reset();
  StepStats& st = f->st;
  st.has_result = true;
  // Every data-parallel step on CUDA is timed; the figures come in step order.
  if (sync_)
    if (auto t = sync_->take_timing()) {
      st.comm_ms = t->comm_ms;
      st.comm_exposed_ms = t->exposed_ms;
    }
  st.loss = r[0];
  st.grad_norm = r[1];
  switch (static_cast<kern::SkipCode>(static_cast<int32_t>(r[2]))) {
    case kern::SkipCode::applied: break;
    case kern::SkipCode::nonfinite_loss: st.skip_reason = "non-finite loss"; break;
    case kern::SkipCode::nonfinite_norm: st.skip_reason = "non-finite gradient norm"; break;
    case kern::SkipCode::loss_spike: {
      char buf[96];
      std::snprintf(buf, sizeof buf, "loss spike (%.4g, z = %.1f over the last %zu steps)", st.loss,
                    (st.loss - f->spike_mean) / f->spike_sd, f->window_size);
      st.skip_reason = buf;
      break;
    }
    default: throw std::runtime_error("step " + std::to_string(st.step) + ": bad skip code " + std::to_string(r[2]));
  }
  st.skipped = !st.skip_reason.empty();
  if (!st.skipped) {
    ++state_.applied;
    state_.consecutive = 0;
    state_.window.push_back(st.loss);
    while (static_cast<int64_t>(state_.window.size()) > tc_.spike_window) state_.window.pop_front();
  } else {
    ++state_.skipped;
    ++state_.consecutive;
  }
  ema_ms_ = st.step == first_step_ + 1 ? st.ms : 0.9 * ema_ms_ + 0.1 * st.ms;
  if (options_.listener) options_.listener->step_result(st);
  if (dump_) dump_->add_result(st.step, st.lr, st.loss, st.grad_norm, st.skipped);
  if (st.skipped && writer_) {
    clear_live();
    spdlog::warn("step {}: update skipped: {} ({} in a row, {} in all)", st.step, st.skip_reason, state_.consecutive,
                 state_.skipped);
  }
  report(st);
}

// The metrics record and the plain progress line every log_every steps; on a terminal the
// live line is redrawn every step.
void Trainer::report(const StepStats& st) {
  const bool log_now = writer_ && (st.step % tc_.log_every == 0 || st.step == tc_.steps);
  if (!log_now && !live_) return;
  const double tok_s = static_cast<double>(tokens_per_step_) / (ema_ms_ / 1000.0);  // all ranks'
  const double mfu = peak_ > 0 ? flops_per_token_ * tok_s / (peak_ * world_) : 0.0;
  const MemoryStats mem = memory_stats(dev_);
  if (log_now) {
    nlohmann::ordered_json j;
    j["type"] = "train";
    j["step"] = st.step;
    j["loss"] = st.loss;
    j["lr"] = st.lr;
    j["grad_norm"] = st.grad_norm;
    j["skipped"] = st.skipped;
    j["skipped_total"] = state_.skipped;
    j["tokens_per_s"] = tok_s;
    j["ms_per_step"] = st.ms;
    j["mfu"] = mfu;
    j["mem_in_use"] = mem.in_use;
    j["mem_reserved"] = mem.reserved;
    j["mem_peak"] = mem.peak;
    if (sync_ && dev_.is_cuda()) {
      j["comm_ms"] = st.comm_ms;
      j["comm_exposed_ms"] = st.comm_exposed_ms;
    }
    metrics_ << j.dump() << "\n";
    metrics_.flush();
  }
  const double eta = ema_ms_ / 1000.0 * static_cast<double>(tc_.steps - st.step);
  char mfu_text[16] = "-";
  if (peak_ > 0) std::snprintf(mfu_text, sizeof mfu_text, "%.1f%%", mfu * 100.0);
  char line[320];
  std::snprintf(
      line, sizeof line,
      "step %lld/%lld | loss %.4f | lr %.3g | gnorm %.3f | %.0f tok/s | %.1f ms/step | MFU %s | mem %s/%s | ETA %s",
      static_cast<long long>(st.step), static_cast<long long>(tc_.steps), st.loss, st.lr, st.grad_norm, tok_s, ema_ms_,
      mfu_text, human_bytes(mem.in_use).c_str(), human_bytes(mem.reserved).c_str(), human_duration(eta).c_str());
  if (live_) std::fprintf(stderr, "\r\033[K%s", line), std::fflush(stderr);
  else spdlog::info("{}", line);
}

bool Trainer::stop_for_skips() {
  if (state_.consecutive < tc_.max_consecutive_skips) return false;
  clear_live();
  auto kept = checkpoint_list(rc_.out_dir);
  spdlog::error(
      "stopping: {} updates skipped in a row (train.max_consecutive_skips = {}); the last good checkpoint "
      "is {}. Lower train.lr or raise train.max_grad_norm / train.spike_zscore, then resume.",
      state_.consecutive, tc_.max_consecutive_skips, kept.empty() ? std::string("(none)") : kept.front());
  result_ = RunResult::too_many_skips;
  return true;
}

void Trainer::evaluate_and_log() {
  const EvalResult ev = evaluate(*model_, rc_, tc_.eval_batches);
  const bool mqar = rc_.data.source == "synthetic" && rc_.data.task == "mqar";
  nlohmann::ordered_json j;
  j["type"] = "eval";
  j["step"] = state_.step;
  j["val_loss"] = ev.loss;
  j[mqar ? "mqar_accuracy" : "val_accuracy"] = ev.accuracy;
  j["val_targets"] = ev.targets;
  metrics_ << j.dump() << "\n";
  metrics_.flush();
  clear_live();
  spdlog::info("eval step {}: val loss {:.4f}, {} {:.3f}", state_.step, ev.loss, mqar ? "MQAR accuracy" : "accuracy",
               ev.accuracy);
}

void Trainer::sample_and_log() {
  StageScope stage("sample");
  // Prompt: the start of the first validation window (the same every time).
  data::Loader val(rc_.data, data::Split::val, 1, std::min<int64_t>(T_, 16), tc_.seed);
  const std::vector<int32_t> prompt = val.next().tokens;
  const auto out =
      model::sample_tokens(*model_, prompt, tc_.sample_tokens, 0.8, 40, tc_.seed + static_cast<uint64_t>(state_.step));
  clear_live();
  spdlog::info("sample step {}: [{}] -> {}", state_.step, decode_tokens(rc_, prompt), decode_tokens(rc_, out));
}

RunResult train_run(const RunConfig& rc, const RunOptions& options) {
  Trainer trainer(rc, options);
  return trainer.run();
}

}  // namespace lt::train
