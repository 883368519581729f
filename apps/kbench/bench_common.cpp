// Timing utilities shared by the kbench mixer benchmarks; see bench_common.h.
#include "apps/kbench/bench_common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <stdexcept>

#include "allocator/caching_allocator.h"
#include "engine/ops.h"
#include "kernels/launch.h"

#if LINTRAIN_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#endif

namespace lt::kbench {

namespace {

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const double pos = p * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

void device_sync(bool device) {
#if LINTRAIN_WITH_CUDA
  if (device) LT_CUDA_CHECK(cudaDeviceSynchronize());
#else
  (void)device;
#endif
}

}  // namespace

nlohmann::json Timing::json() const {
  return {{"median_ms", median_ms}, {"p10_ms", p10_ms}, {"p90_ms", p90_ms},
          {"mean_ms", mean_ms},     {"min_ms", min_ms}, {"iters", iters}};
}

Timing summarize(std::vector<double> ms) {
  Timing t;
  std::sort(ms.begin(), ms.end());
  t.iters = static_cast<int>(ms.size());
  if (ms.empty()) return t;
  t.median_ms = percentile(ms, 0.5);
  t.p10_ms = percentile(ms, 0.1);
  t.p90_ms = percentile(ms, 0.9);
  t.min_ms = ms.front();
  double s = 0;
  for (double x : ms) s += x;
  t.mean_ms = s / static_cast<double>(ms.size());
  return t;
}

MultiTiming time_regions(const std::function<void(int, const MarkFn&)>& fn, int nmarks, const TimingOptions& opt,
                         void* stream, bool device) {
  if (nmarks < 2) throw std::invalid_argument("time_regions: need at least two marks");
  (void)stream;  // used only with CUDA
  std::vector<std::vector<double>> per(static_cast<size_t>(nmarks - 1));
  std::vector<double> total;
#if LINTRAIN_WITH_CUDA
  std::vector<cudaEvent_t> ev;
  if (device) {
    // One event set per timed iteration: no host synchronisation inside the timed loop.
    ev.resize(static_cast<size_t>(nmarks) * opt.iters);
    for (auto& e : ev) LT_CUDA_CHECK(cudaEventCreate(&e));
  }
#endif
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> host_marks(static_cast<size_t>(nmarks));
  for (int i = 0; i < opt.warmup; ++i) fn(i, [](int) {});
  device_sync(device);
  for (int it = 0; it < opt.iters; ++it) {
    MarkFn mark = [&](int k) {
#if LINTRAIN_WITH_CUDA
      if (device) {
        LT_CUDA_CHECK(cudaEventRecord(ev[static_cast<size_t>(it) * nmarks + k], static_cast<cudaStream_t>(stream)));
        return;
      }
#endif
      host_marks[static_cast<size_t>(k)] = Clock::now();
    };
    fn(opt.warmup + it, mark);
    if (!device) {
      for (int k = 0; k + 1 < nmarks; ++k)
        per[k].push_back(std::chrono::duration<double, std::milli>(host_marks[k + 1] - host_marks[k]).count());
      total.push_back(std::chrono::duration<double, std::milli>(host_marks[nmarks - 1] - host_marks[0]).count());
    }
  }
#if LINTRAIN_WITH_CUDA
  if (device) {
    LT_CUDA_CHECK(cudaDeviceSynchronize());
    for (int it = 0; it < opt.iters; ++it) {
      cudaEvent_t* e = &ev[static_cast<size_t>(it) * nmarks];
      float ms = 0;
      for (int k = 0; k + 1 < nmarks; ++k) {
        LT_CUDA_CHECK(cudaEventElapsedTime(&ms, e[k], e[k + 1]));
        per[k].push_back(ms);
      }
      LT_CUDA_CHECK(cudaEventElapsedTime(&ms, e[0], e[nmarks - 1]));
      total.push_back(ms);
    }
    for (auto& x : ev) LT_CUDA_CHECK(cudaEventDestroy(x));
  }
#endif
  MultiTiming r;
  for (auto& v : per) r.regions.push_back(summarize(v));
  r.total = summarize(total);
  return r;
}

std::vector<StageRow> time_stages(const std::function<void()>& fn, int reps, void* stream, bool device) {
  (void)stream;  // used only with CUDA
  struct Rec {
    std::string stage;
#if LINTRAIN_WITH_CUDA
    cudaEvent_t start = nullptr, stop = nullptr;
#endif
    std::chrono::steady_clock::time_point hstart, hstop;
  };
  std::vector<Rec> recs;
  std::map<std::string, std::vector<size_t>> open;  // stage -> indices of open records
#if LINTRAIN_WITH_CUDA
  // Events come from a pool made before the timed calls, so no event creation sits between
  // a stage's start event and its first launch.
  std::vector<cudaEvent_t> pool;
  size_t pool_next = 0;
  if (device) {
    pool.resize(512);
    for (auto& e : pool) LT_CUDA_CHECK(cudaEventCreate(&e));
  }
  auto take_event = [&] {
    if (pool_next == pool.size()) {
      pool.push_back(nullptr);
      LT_CUDA_CHECK(cudaEventCreate(&pool.back()));
    }
    return pool[pool_next++];
  };
#endif
  set_stage_listener([&](const std::string& stage, bool entering) {
    if (entering) {
      Rec r;
      r.stage = stage;
#if LINTRAIN_WITH_CUDA
      if (device) {
        r.start = take_event();
        r.stop = take_event();
        LT_CUDA_CHECK(cudaEventRecord(r.start, static_cast<cudaStream_t>(stream)));
      }
#endif
      r.hstart = std::chrono::steady_clock::now();
      recs.push_back(r);
      open[stage].push_back(recs.size() - 1);
    } else {
      auto& v = open[stage];
      if (v.empty()) return;
      Rec& r = recs[v.back()];
      v.pop_back();
#if LINTRAIN_WITH_CUDA
      if (device) LT_CUDA_CHECK(cudaEventRecord(r.stop, static_cast<cudaStream_t>(stream)));
#endif
      r.hstop = std::chrono::steady_clock::now();
    }
  });
  reset_launch_atlas();
  try {
    for (int i = 0; i < reps; ++i) fn();
  } catch (...) {
    set_stage_listener(nullptr);
    throw;
  }
  set_stage_listener(nullptr);
  device_sync(device);
  std::map<std::string, std::vector<double>> ms;
  for (auto& r : recs) {
    double t = 0;
#if LINTRAIN_WITH_CUDA
    if (device) {
      float f = 0;
      LT_CUDA_CHECK(cudaEventElapsedTime(&f, r.start, r.stop));
      t = f;
    }
#endif
    if (!device) t = std::chrono::duration<double, std::milli>(r.hstop - r.hstart).count();
    ms[r.stage].push_back(t);
  }
#if LINTRAIN_WITH_CUDA
  for (auto& e : pool) LT_CUDA_CHECK(cudaEventDestroy(e));
#endif
  std::map<std::string, int64_t> launches;
  for (auto& s : launch_atlas()) launches[s.stage] = s.launches;
  std::vector<StageRow> rows;
  for (auto& [stage, v] : ms) {
    StageRow row;
    row.stage = stage;
    row.median_ms = summarize(v).median_ms;
    // launches counted on the stage itself (not its children) per call
    row.launches_per_call = static_cast<double>(launches.count(stage) ? launches[stage] : 0) / reps;
    rows.push_back(row);
  }
  if (launches.count("(none)")) rows.push_back({"(none)", static_cast<double>(launches["(none)"]) / reps, 0.0});
  return rows;
}

std::string stage_table(const std::vector<StageRow>& rows) {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-36s %9s %10s\n", "stage", "launches", "ms");
  s += buf;
  for (auto& r : rows) {
    std::snprintf(buf, sizeof buf, "  %-36s %9.1f %10.4f\n", r.stage.c_str(), r.launches_per_call, r.median_ms);
    s += buf;
  }
  return s;
}

nlohmann::json stage_json(const std::vector<StageRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (auto& r : rows) a.push_back({{"stage", r.stage}, {"launches", r.launches_per_call}, {"ms", r.median_ms}});
  return a;
}

PeakMeter::PeakMeter(alloc::CachingAllocator& allocator, bool device) : a_(allocator), device_(device) {
  device_sync(device_);
  a_.reset_peak_stats();
  const alloc::Stats s = a_.stats();
  start_allocated_ = s.allocated_bytes.current;
  start_reserved_ = s.reserved_bytes.current;
}

int64_t PeakMeter::extra_peak_bytes() const {
  device_sync(device_);
  return a_.stats().allocated_bytes.peak - start_allocated_;
}

int64_t PeakMeter::extra_reserved_bytes() const {
  device_sync(device_);
  return a_.stats().reserved_bytes.peak - start_reserved_;
}

double Floors::floor_ms(double bytes_per_s, double flops_per_s) const {
  return std::max(traffic_ms(bytes_per_s), flop_ms(flops_per_s));
}

std::string device_description(bool device) {
#if LINTRAIN_WITH_CUDA
  if (device) {
    int dev = 0;
    cudaDeviceProp p{};
    LT_CUDA_CHECK(cudaGetDevice(&dev));
    LT_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    char buf[768];
    std::snprintf(buf, sizeof buf, "%s (cuda:%d, %d SMs, %.0f GiB)", p.name, dev, p.multiProcessorCount,
                  static_cast<double>(p.totalGlobalMem) / (1u << 30));
    return buf;
  }
#endif
  (void)device;
  return "CPU";
}

DType parse_bench_dtype(const std::string& command, const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp32" || s == "f32" || s == "float32") return DType::f32;
  if (s == "fp64" || s == "f64") return DType::f64;
  throw std::invalid_argument("kbench " + command + ": --dtype must be bf16, fp32 or fp64, got '" + s + "'");
}

std::string today_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

std::string fmt_bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.1f KB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << j.dump(2) << "\n";
}

FwdBwdFigures measure_fwd_bwd(const std::function<void(int iter, const MarkFn& mark)>& call, const TimingOptions& opt,
                              void* stream, bool device) {
  FwdBwdFigures f;
  call(0, [](int) {});  // warm: the allocator's cache and any first-use work
  alloc::CachingAllocator& A = device ? alloc::cuda_allocator(0) : alloc::host_allocator();
  {
    PeakMeter m(A, device);
    call(1, [](int) {});
    f.extra_peak = m.extra_peak_bytes();
    f.extra_reserved = m.extra_reserved_bytes();
  }
  f.t = time_regions(call, 3, opt, stream, device);
  f.atlas = time_stages([&] { call(0, [](int) {}); }, device ? 20 : 1, stream, device);
  for (auto& r : f.atlas) {  // launches count against the innermost stage only: sum every row
    if (r.stage.rfind("fwd/", 0) == 0) f.launches_fwd += r.launches_per_call;
    if (r.stage.rfind("bwd/", 0) == 0) f.launches_bwd += r.launches_per_call;
  }
  return f;
}

void FwdBwdFigures::print(int iters, int warmup, size_t nsets) const {
  std::printf("  %-9s %10s %10s %10s   (%d iterations after %d warm-up, %zu input sets)\n", "", "median ms", "p10",
              "p90", iters, warmup, nsets);
  auto row = [](const char* name, const Timing& x) {
    std::printf("  %-9s %10.4f %10.4f %10.4f\n", name, x.median_ms, x.p10_ms, x.p90_ms);
  };
  row("forward", t.regions[0]);
  row("backward", t.regions[1]);
  row("total", t.total);
  std::printf("  launches: forward %.0f, backward %.0f, total %.0f\n", launches_fwd, launches_bwd,
              launches_fwd + launches_bwd);
  std::printf("%s", stage_table(atlas).c_str());
  std::printf("  extra peak memory: %s allocated, %s reserved\n", fmt_bytes(static_cast<double>(extra_peak)).c_str(),
              fmt_bytes(static_cast<double>(extra_reserved)).c_str());
}

void FwdBwdFigures::add_json(nlohmann::json& j) const {
  j["forward"] = t.regions[0].json();
  j["backward"] = t.regions[1].json();
  j["total"] = t.total.json();
  j["launches"] = {{"forward", launches_fwd}, {"backward", launches_bwd}, {"total", launches_fwd + launches_bwd}};
  j["atlas"] = stage_json(atlas);
  j["extra_peak_bytes"] = extra_peak;
  j["extra_reserved_bytes"] = extra_reserved;
}

void add_mixer_bench_options(CLI::App& sub, MixerBenchOptions& o, const std::string& d_help,
                             const std::string& chunk_help, const std::string& path_help) {
  sub.add_option("--B", o.B, "batch")->check(CLI::PositiveNumber);
  sub.add_option("--T", o.T, "sequence length")->check(CLI::PositiveNumber);
  sub.add_option("--H", o.H, "heads")->check(CLI::PositiveNumber);
  sub.add_option("--D", o.D, d_help)->check(CLI::PositiveNumber);
  sub.add_option("--dtype", o.dtype, "bf16 | fp32");
  sub.add_option("--chunk", o.chunk, chunk_help)->check(CLI::PositiveNumber);
  sub.add_option("--path", o.path, path_help);
  sub.add_option("--iters", o.iters, "timed iterations")->check(CLI::PositiveNumber);
  sub.add_option("--warmup", o.warmup, "warm-up iterations");
  sub.add_option("--sets", o.sets, "input sets rotated through (L2 defeat)")->check(CLI::PositiveNumber);
  sub.add_option("--json", o.json_path, "write the figures as JSON to FILE");
}

MixerBench::MixerBench(std::string command_, const MixerBenchOptions& o)
    : command(std::move(command_)), opts(o), dtype(parse_bench_dtype(command, o.dtype)) {
  if (o.chunk != 16 && o.chunk != 32 && o.chunk != 64)
    throw std::invalid_argument("kbench " + command + ": --chunk must be 16, 32 or 64, got " + std::to_string(o.chunk));
}

void MixerBench::start() {
  device = cuda_available();
  dev = device ? Device::cuda(0) : Device::cpu();
  stream = device ? current_stream(dev).handle() : nullptr;
}

nlohmann::json MixerBench::json_head() const {
  return {{"bench", command},    {"B", opts.B},
          {"T", opts.T},         {"H", opts.H},
          {"D", opts.D},         {"dtype", dtype_name(dtype)},
          {"chunk", opts.chunk}, {"path", opts.path},
          {"date", today_utc()}, {"device", device_description(device)}};
}

bool MixerBench::skip_without_device(nlohmann::json& j, bool gpu_only) const {
  if (device || !gpu_only) return false;
  std::printf(
      "kbench %s: no CUDA device; the %s path runs on the GPU only in a benchmark "
      "(its CPU twins are for tests). Nothing measured.\n",
      command.c_str(), opts.path.c_str());
  j["skipped"] = "no CUDA device";
  write_json(opts.json_path, j);
  return true;
}

TimingOptions MixerBench::timing() const {
  TimingOptions t;
  t.iters = device ? opts.iters : std::min(opts.iters, 3);
  t.warmup = device ? opts.warmup : std::min(opts.warmup, 1);
  return t;
}

Tensor MixerBench::randn(const Shape& shape, DType dt) {
  Tensor t = ops::randn(shape, 20261129, offset_, dt, dev);
  offset_ += static_cast<uint64_t>(shape_numel(shape));
  return t;
}

void MixerBench::print_floors(const Floors& fl, double rate, double total_ms, const std::string& extra) const {
  const double floor_ms = fl.floor_ms(kH200CopyBytesPerS, rate);
  std::printf(
      "  floors: traffic %s -> %.4f ms at %.1f TB/s; %.2f GFLOP -> %.4f ms at %.0f TFLOP/s; "
      "floor %.4f ms; achieved %.1f%% of the floor%s\n",
      fmt_bytes(fl.bytes).c_str(), fl.traffic_ms(kH200CopyBytesPerS), kH200CopyBytesPerS / 1e12, fl.flops / 1e9,
      fl.flop_ms(rate), rate / 1e12, floor_ms, 100.0 * floor_ms / total_ms, extra.c_str());
}

nlohmann::json MixerBench::floors_json(const Floors& fl, double rate, double total_ms) const {
  const double floor_ms = fl.floor_ms(kH200CopyBytesPerS, rate);
  return {{"bytes", fl.bytes},           {"flops", fl.flops},    {"traffic_ms", fl.traffic_ms(kH200CopyBytesPerS)},
          {"flop_ms", fl.flop_ms(rate)}, {"floor_ms", floor_ms}, {"achieved_fraction", floor_ms / total_ms}};
}

}  // namespace lt::kbench
