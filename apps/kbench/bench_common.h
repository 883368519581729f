// Timing utilities shared by the kbench mixer benchmarks (kda, rwkv6, ...).
//
//   lt::kbench::Timing t = time_device([&](int i) { run(sets[i % nsets]); }, opt, stream);
//     CUDA events around each call after `warmup` calls; median / p10 / p90 / mean in ms.
//     The callable gets the iteration index so it can rotate among input sets (defeats L2).
//     Without CUDA (or with stream == cpu) it times with the host clock.
//   StageTimes st = time_stages([&] { ...one fwd+bwd under StageScopes... }, reps, stream);
//     the launch atlas (lt::launch_atlas()) of one call: per stage its launches per call and
//     its median ms from CUDA events recorded on stage entry/exit (engine-independent: it
//     installs a lt::set_stage_listener hook for the duration).
//   PeakMeter m(allocator); ...work...; m.extra_peak_bytes()
//     extra peak = allocator's allocated_bytes peak during the region minus the in-use
//     bytes at its start (peak stats reset at the start; the device synchronised on both ends).
//   DType dt = parse_bench_dtype("rwkv6", "bf16");
//     --dtype values: bf16 | bfloat16, fp32 | f32 | float32, fp64 | f64; an error names the
//     command and the value.
//   Floors f{bytes, flops}; f.floor_ms(bw, rate)
//     the larger of bytes / copy bandwidth and flops / arithmetic rate; achieved fraction =
//     floor / measured.
//   MixerBench b("kda", opts);  (the set-up every mixer bench shares)
//     the common flags (B, T, H, D, dtype, chunk, path, iters, warmup, sets, json), their
//     checks, the figures' JSON head, the no-device skip, the iteration counts, the input
//     stream, the floors' line and JSON.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/tensor.h"
#include "kernels/dtype.h"

namespace lt::alloc {
class CachingAllocator;
}

namespace lt::kbench {

struct TimingOptions {
  int warmup = 20;
  int iters = 200;
};

struct Timing {
  double median_ms = 0, p10_ms = 0, p90_ms = 0, mean_ms = 0, min_ms = 0;
  int iters = 0;
  nlohmann::json json() const;
};
Timing summarize(std::vector<double> ms);

// Several regions timed per iteration: fn(i, mark) calls mark(k) after region k-1 has been
// enqueued (mark(0) before the first region, mark(n) after the last); times[k] holds the
// per-iteration times of region k (between mark(k) and mark(k+1)).
struct MultiTiming {
  std::vector<Timing> regions;  // regions.size() == number of marks - 1
  Timing total;                 // mark(0) .. last mark
};
using MarkFn = std::function<void(int)>;
MultiTiming time_regions(const std::function<void(int iter, const MarkFn& mark)>& fn, int nmarks,
                         const TimingOptions& opt, void* stream, bool device);

struct StageRow {
  std::string stage;
  double launches_per_call = 0;
  double median_ms = 0;
};
// Runs fn() reps times with events recorded on every stage entry / exit on `stream`
// (stages nest: the row of a parent includes its children). Rows sorted by stage name.
std::vector<StageRow> time_stages(const std::function<void()>& fn, int reps, void* stream, bool device);
std::string stage_table(const std::vector<StageRow>& rows);
nlohmann::json stage_json(const std::vector<StageRow>& rows);

class PeakMeter {
 public:
  PeakMeter(alloc::CachingAllocator& allocator, bool device);  // synchronises, resets peaks
  int64_t extra_peak_bytes() const;                            // synchronises; allocated peak - allocated at start
  int64_t extra_reserved_bytes() const;                        // reserved peak - reserved at start
  int64_t start_allocated() const { return start_allocated_; }

 private:
  alloc::CachingAllocator& a_;
  bool device_;
  int64_t start_allocated_ = 0;
  int64_t start_reserved_ = 0;
};

// One forward + backward benchmark, as the mixer benches run it: call(i, mark) enqueues the
// forward between mark(0) and mark(1) and the backward between mark(1) and mark(2), under
// StageScopes "fwd/..." and "bwd/..." (i rotates among input sets). measure_fwd_bwd makes
// one warm call, measures the extra peak memory of one more (PeakMeter on the device's or
// the host's caching allocator), times `opt.iters` calls after `opt.warmup`, and records the
// launch atlas (20 repetitions on a device); launches are summed over the fwd/ and bwd/ rows.
struct FwdBwdFigures {
  MultiTiming t;  // regions[0] forward, regions[1] backward, total
  std::vector<StageRow> atlas;
  double launches_fwd = 0, launches_bwd = 0;
  int64_t extra_peak = 0, extra_reserved = 0;
  // timing rows, launches, the atlas and the extra peak, as kbench prints them
  void print(int iters, int warmup, size_t nsets) const;
  // forward / backward / total / launches / atlas / extra_peak_bytes / extra_reserved_bytes
  void add_json(nlohmann::json& j) const;
};
FwdBwdFigures measure_fwd_bwd(const std::function<void(int iter, const MarkFn& mark)>& call, const TimingOptions& opt,
                              void* stream, bool device);

struct Floors {
  double bytes = 0;  // must move through device memory (inputs once, outputs once)
  double flops = 0;  // must be computed
  double traffic_ms(double bytes_per_s) const { return bytes / bytes_per_s * 1e3; }
  double flop_ms(double flops_per_s) const { return flops / flops_per_s * 1e3; }
  double floor_ms(double bytes_per_s, double flops_per_s) const;
};
// Ceilings measured on the H200 (docs/BENCHMARKS.md): copy bandwidth, bf16 GEMM rate;
// fp32 SIMT rate is the datasheet figure (a lead, not measured here).
inline constexpr double kH200CopyBytesPerS = 4.3e12;
inline constexpr double kH200Bf16FlopsPerS = 790e12;
inline constexpr double kH200Fp32FlopsPerS = 67e12;

// The --dtype flag of the mixer benches; throws std::invalid_argument naming `command` and s.
DType parse_bench_dtype(const std::string& command, const std::string& s);

// The flags every mixer bench (kbench kda, kbench rwkv6) takes.
struct MixerBenchOptions {
  int64_t B = 8, T = 512, H = 12;
  int D = 64;
  int chunk = 64;
  std::string dtype = "bf16";
  std::string path = "fused";
  int iters = 200;
  int warmup = 20;
  int sets = 4;
  std::string json_path;
};
// Adds --B --T --H --D --dtype --chunk --path --iters --warmup --sets --json to `sub`; the
// help texts of --D, --chunk and --path name the bench's own values.
void add_mixer_bench_options(CLI::App& sub, MixerBenchOptions& o, const std::string& d_help,
                             const std::string& chunk_help, const std::string& path_help);

// The set-up of one mixer bench run, in the order a run uses it:
//   MixerBench b("rwkv6", o);          checks --chunk (16, 32 or 64) and --dtype (b.dtype)
//                                      without touching a device (a bad flag: exit 2 anywhere)
//   b.start();                         b.device: a CUDA device is there; b.dev, b.stream
//   nlohmann::json j = b.json_head();  bench, B, T, H, D, dtype, chunk, path, date, device
//   if (b.skip_without_device(j, gpu_only)) return 0;
//                                      without a device, a GPU-only path measures nothing:
//                                      says so, writes {..., skipped} to --json
//   TimingOptions t = b.timing();      --iters / --warmup; on the host at most 3 / 1
//   Tensor x = b.randn(shape, dtype);  N(0, 1) on the bench's device from one Philox stream
//                                      (seed 20261129): consecutive tensors, consecutive offsets
//   b.print_floors(fl, rate, total_ms, extra) and b.floors_json(fl, rate, total_ms)
//                                      the floors at the H200 copy bandwidth and `rate`
struct MixerBench {
  MixerBench(std::string command, const MixerBenchOptions& o);
  void start();
  nlohmann::json json_head() const;
  bool skip_without_device(nlohmann::json& j, bool gpu_only) const;
  TimingOptions timing() const;
  Tensor randn(const Shape& shape, DType dt);
  void print_floors(const Floors& fl, double rate, double total_ms, const std::string& extra = "") const;
  nlohmann::json floors_json(const Floors& fl, double rate, double total_ms) const;

  std::string command;
  const MixerBenchOptions& opts;
  DType dtype;
  bool device = false;
  Device dev = Device::cpu();
  void* stream = nullptr;  // the device's current stream (nullptr on the host)

 private:
  uint64_t offset_ = 0;
};

std::string device_description(bool device);
std::string today_utc();  // YYYY-MM-DD
std::string fmt_bytes(double b);
void write_json(const std::string& path, const nlohmann::json& j);  // no-op for empty path

}  // namespace lt::kbench
