#include "engine/train/instrument.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "allocator/caching_allocator.h"
#include "engine/train/bench.h"
#include "engine/train/kernel_trace.h"
#include "kernels/launch.h"

#if LINTRAIN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace lt::train {
namespace {

std::string with_suffix(const std::string& path, const std::string& suffix) {
  std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + suffix)).string();
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw std::runtime_error("cannot write '" + path + "'");
    f << j.dump(2) << "\n";
    if (!f) throw std::runtime_error("writing '" + path + "' failed");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

struct Instrumentation::Impl {
  InstrumentOptions opt;
  Device device;
  double tokens_per_step = 0;
  alloc::CachingAllocator& A;
  StageTimer timer;
  std::unique_ptr<KernelRecorder> kernels;
  BenchRecorder bench;
  int64_t first_step = -1;  // the run's first step (1-based; > 1 after a resume)
  int64_t mallocs_at_first = -1;
  bool tracing = false;
  bool bench_timing = false;
  int64_t bench_index = -1;    // the measured step now open (0-based)
  int64_t bench_recorded = 0;  // measured steps whose boundary events were recorded
  int64_t launches_before = 0;
  int64_t bench_launches = 0;
  nlohmann::json card_before;
  std::vector<double> comm_ms, comm_exposed_ms;  // measured data-parallel steps
  std::chrono::steady_clock::time_point host_start;
#if LINTRAIN_WITH_CUDA
  // The measured steps' boundaries: events 2k and 2k + 1 open and close measured step k.
  // They are recorded without waiting and read once, in finish(), so measuring a step does
  // not empty the stream's queue (the host keeps running ahead of the GPU as in an
  // unmeasured run).
  std::vector<cudaEvent_t> bench_events;
#endif

  Impl(const InstrumentOptions& o, Device d, double tps)
      : opt(o), device(d), tokens_per_step(tps),
        A(d.is_cuda() ? alloc::cuda_allocator(d.index) : alloc::host_allocator()), timer(d, !o.timers_trace.empty()) {
    if (!opt.kernel_trace.empty()) {
      kernels = std::make_unique<KernelRecorder>(device);
      timer.record_kernels(kernels.get());
      std::ofstream f(opt.kernel_trace, std::ios::trunc);
      if (!f) throw std::runtime_error("--kernel-trace '" + opt.kernel_trace + "': cannot write the file");
      spdlog::info("kernel trace: CUPTI from {}; timed steps' kernels go to {}", kernels->library(), opt.kernel_trace);
    }
#if LINTRAIN_WITH_CUDA
    if (device.is_cuda() && opt.bench_steps > 0) {
      set_device(device);
      bench_events.resize(static_cast<size_t>(2 * opt.bench_steps), nullptr);
      for (cudaEvent_t& e : bench_events) cudaEventCreate(&e);
    }
#endif
    if (opt.bench_steps > 0) card_before = card_state(device);
  }
  ~Impl() {
#if LINTRAIN_WITH_CUDA
    for (cudaEvent_t e : bench_events)
      if (e) cudaEventDestroy(e);
#endif
  }

  int64_t warmup() const { return opt.bench_steps > 0 ? opt.bench_warmup : 0; }
  // 0-based index of `step` among the measured steps (negative during warm-up).
  int64_t measured_index(int64_t step) const { return step - first_step - warmup(); }

  void dump_alloc_trace() {
    A.dump_snapshot_json(opt.alloc_trace);
    A.dump_snapshot_pickle(with_suffix(opt.alloc_trace, ".pickle"));
    A.dump_chrome_trace(with_suffix(opt.alloc_trace, ".trace.json"));
    spdlog::info("allocator trace of steps {}..{} written: {} (+ .pickle, .trace.json)", first_step,
                 first_step + opt.alloc_trace_steps - 1, opt.alloc_trace);
  }
};

Instrumentation::Instrumentation(const InstrumentOptions& options, Device device, double tokens_per_step)
    : impl_(std::make_unique<Impl>(options, device, tokens_per_step)) {}

Instrumentation::~Instrumentation() = default;

void Instrumentation::before_step(int64_t step) {
  Impl& I = *impl_;
  if (I.first_step < 0) {
    I.first_step = step;
    if (!I.opt.alloc_trace.empty()) {
      I.A.set_oom_trace_path(I.opt.alloc_trace);
      I.A.set_trace(true);
      I.tracing = true;
    }
  }
  I.A.set_step(step);
  const int64_t k = I.measured_index(step);
  if (I.opt.bench_steps > 0 && k >= 0 && k < I.opt.bench_steps) {
    I.bench_timing = true;
    I.bench_index = k;
    I.launches_before = total_launches();
#if LINTRAIN_WITH_CUDA
    if (I.device.is_cuda())
      cudaEventRecord(I.bench_events[static_cast<size_t>(2 * k)],
                      static_cast<cudaStream_t>(current_stream(I.device).handle()));
#endif
    I.host_start = std::chrono::steady_clock::now();
  }
  if (I.opt.timers.timed(k)) I.timer.begin_step(k);
}

void Instrumentation::step_result(const StepStats& stats) {
  Impl& I = *impl_;
  const int64_t k = I.measured_index(stats.step);
  if (I.opt.bench_steps > 0 && k >= 0 && k < I.opt.bench_steps && stats.comm_ms > 0) {
    I.comm_ms.push_back(stats.comm_ms);
    I.comm_exposed_ms.push_back(stats.comm_exposed_ms);
  }
}

void Instrumentation::after_step(const StepStats& stats) {
  Impl& I = *impl_;
  // The bench's end of step first: the timer's table below is host work between steps.
  const bool measured = I.bench_timing;
  if (measured) {
#if LINTRAIN_WITH_CUDA
    if (I.device.is_cuda()) {
      cudaEventRecord(I.bench_events[static_cast<size_t>(2 * I.bench_index + 1)],
                      static_cast<cudaStream_t>(current_stream(I.device).handle()));
      I.bench_recorded = I.bench_index + 1;
    }
#endif
    if (!I.device.is_cuda())
      I.bench.add_step(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - I.host_start).count());
    I.bench_launches = total_launches() - I.launches_before;
    I.bench_timing = false;
  }
  if (I.timer.active()) {
    const StepTiming t = I.timer.end_step();
    spdlog::info("step {}:\n{}", stats.step, t.table());
    if (!I.opt.metrics_path.empty()) {
      nlohmann::json j = t.to_json();
      j.erase("kind");
      j["type"] = "timers";
      j["train_step"] = stats.step;
      std::ofstream(I.opt.metrics_path, std::ios::app) << j.dump() << "\n";
    }
    if (measured) I.bench.add_timed(t);
    if (I.kernels) {
      std::ofstream f(I.opt.kernel_trace, std::ios::app);
      f << kernel_trace_line(t.step, stats.step, I.timer.step_kernels(), I.kernels->dropped(), I.kernels->copies())
               .dump()
        << "\n";
      if (!f) throw std::runtime_error("--kernel-trace '" + I.opt.kernel_trace + "': writing failed");
    }
  }
  if (stats.step == I.first_step) {
    synchronize(I.device);
    I.mallocs_at_first = I.A.stats().num_device_alloc;
  }
  if (I.tracing && stats.step >= I.first_step + I.opt.alloc_trace_steps - 1) {
    I.dump_alloc_trace();
    I.A.set_trace(false);
    I.tracing = false;
  }
  if (I.opt.alloc_snapshot_at > 0 && stats.step == I.opt.alloc_snapshot_at) {
    // Beside the --alloc-trace file when there is one, else in the run's folder.
    const std::string base =
        !I.opt.alloc_trace.empty() ? I.opt.alloc_trace
        : !I.opt.metrics_path.empty()
            ? (std::filesystem::path(I.opt.metrics_path).parent_path() / "alloc_snapshot.json").string()
            : std::string("alloc_snapshot.json");
    const std::string path = with_suffix(base, "_step" + std::to_string(stats.step) + ".json");
    I.A.dump_snapshot_json(path);
    spdlog::info("allocator snapshot at step {} written: {}", stats.step, path);
  }
}

nlohmann::json Instrumentation::finish() {
  Impl& I = *impl_;
  synchronize(I.device);
#if LINTRAIN_WITH_CUDA
  for (int64_t k = 0; k < I.bench_recorded; ++k) {
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, I.bench_events[static_cast<size_t>(2 * k)],
                         I.bench_events[static_cast<size_t>(2 * k + 1)]);
    I.bench.add_step(ms);
  }
  I.bench_recorded = 0;
#endif
  if (I.tracing) {
    I.dump_alloc_trace();
    I.A.set_trace(false);
    I.tracing = false;
  }
  if (!I.opt.timers_trace.empty()) {
    I.timer.write_chrome_trace(I.opt.timers_trace);
    spdlog::info("timers trace written: {}", I.opt.timers_trace);
  }
  const alloc::Stats st = I.A.stats();
  size_t largest_free = 0;
  for (const alloc::SegmentInfo& s : I.A.snapshot())
    for (const alloc::BlockInfo& b : s.blocks)
      if (!b.allocated && !b.active) largest_free = std::max(largest_free, b.size);
  nlohmann::json summary = {
      {"allocations", st.allocation.allocated},
      {"cache_hits", st.num_cache_hits},
      {"device_mallocs", st.num_device_alloc},
      {"device_mallocs_after_step1", I.mallocs_at_first < 0 ? 0 : st.num_device_alloc - I.mallocs_at_first},
      {"peak_in_use", st.allocated_bytes.peak},
      {"peak_reserved", st.reserved_bytes.peak},
      {"reserved_over_in_use", st.allocated_bytes.peak > 0 ? static_cast<double>(st.reserved_bytes.peak) /
                                                                 static_cast<double>(st.allocated_bytes.peak)
                                                           : 0.0},
      {"largest_free_block", largest_free}};
  if (I.opt.bench_steps > 0) {
    nlohmann::json r = I.bench.summary(I.tokens_per_step, I.bench_launches);
    r["warmup_steps"] = I.opt.bench_warmup;
    r["timers"] = I.opt.timers.str();
    r["memory"] = summary;
    r["device"] = I.device.str();
    r["card_before"] = I.card_before;
    r["card_after"] = card_state(I.device);
    r["ranks"] = I.opt.ranks;
    if (!I.comm_ms.empty()) {
      // Per step: the reduction on the communication stream and the part the compute stream
      // waited for; hidden = the rest, which ran under the backward.
      const Spread c = spread_of(I.comm_ms), e = spread_of(I.comm_exposed_ms);
      r["dist"] = {{"comm_ms", spread_json(c)},
                   {"comm_exposed_ms", spread_json(e)},
                   {"hidden_fraction", c.median > 0 ? 1.0 - e.median / c.median : 0.0}};
    }
    const std::vector<std::string> warnings = card_warnings(I.card_before, r["card_after"], ::getpid());
    r["warnings"] = warnings;
    for (const auto& w : warnings) spdlog::warn("bench: {}", w);
    const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    r["date_utc"] = date;
#ifdef LINTRAIN_GIT_COMMIT
    r["commit"] = LINTRAIN_GIT_COMMIT;
#endif
    if (!I.opt.bench_out.empty()) {
      write_json_file(I.opt.bench_out, r);
      spdlog::info("bench result written: {}", I.opt.bench_out);
    }
    const auto& ms = r["ms_per_step"];
    if (ms.is_object())
      spdlog::info("bench: {} steps, {:.3f} ms/step median (p10 {:.3f}, p90 {:.3f}), {:.0f} tokens/s",
                   r["steps"].get<int64_t>(), ms["median"].get<double>(), ms["p10"].get<double>(),
                   ms["p90"].get<double>(), r["tokens_per_s"].get<double>());
  }
  return summary;
}

std::string Instrumentation::summary_line(const nlohmann::json& s) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "allocator: %lld allocations, %lld cache hits, %lld device mallocs (%lld after step 1), peak in use "
                "%.1f MB, peak reserved %.1f MB (ratio %.3f), largest free block %.1f MB",
                static_cast<long long>(s["allocations"].get<int64_t>()),
                static_cast<long long>(s["cache_hits"].get<int64_t>()),
                static_cast<long long>(s["device_mallocs"].get<int64_t>()),
                static_cast<long long>(s["device_mallocs_after_step1"].get<int64_t>()),
                s["peak_in_use"].get<double>() / 1e6, s["peak_reserved"].get<double>() / 1e6,
                s["reserved_over_in_use"].get<double>(), s["largest_free_block"].get<double>() / 1e6);
  return buf;
}

}  // namespace lt::train
