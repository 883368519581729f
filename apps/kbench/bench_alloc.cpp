// kbench alloc: the caching allocator's costs.
//   1. Hit path: median ns of one allocate+free pair served from the cache, at sizes
//      256 B .. 256 MiB (powers of 4), next to raw malloc/free (CPU) and cudaMalloc/cudaFree
//      (GPU, when a device exists; the CUDA caching allocator's hit path does not touch
//      the device, so its figure is host time too).
//   2. Training replay: the allocation pattern of a depth-2 LM step (B 8, T 512, d 768,
//      H 12 x 64, vocab 32000, fp32 activations): forward allocations kept for backward,
//      backward frees in reverse with transient gradients, scratch buffers of varying
//      sizes, repeated for --steps steps. Reports raw (backend) mallocs after the first
//      step (target 0), peak reserved / peak in-use (target <= 1.10) and host time per step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/stage_tag.h"
#include "apps/kbench/kbench.h"

#if LINTRAIN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace lt::kbench {
namespace {

using alloc::CachingAllocator;
using Clock = std::chrono::steady_clock;

struct Options {
  int batches = 101;  // timing batches per size (median over batches)
  int pairs = 2000;   // alloc+free pairs per batch (hit path)
  int raw_reps = 41;  // raw malloc / cudaMalloc pairs per size (median)
  int steps = 20;     // training replay steps
  bool gpu = true;
  std::string json_path;
  std::string trace_prefix;  // dump the host replay's trace: PREFIX.snapshot.{json,pickle}, PREFIX.chrome.json
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double ns_since(Clock::time_point t0) { return std::chrono::duration<double, std::nano>(Clock::now() - t0).count(); }

std::string size_label(size_t b) {
  char buf[32];
  if (b >= (1u << 20)) std::snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
  else std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

// Median ns per allocate+free pair on the hit path (the segment exists after warm-up).
double hit_path_ns(CachingAllocator& a, size_t bytes, const Options& o) {
  for (int i = 0; i < 100; ++i) a.free(a.allocate(bytes));
  std::vector<double> per_pair;
  per_pair.reserve(size_t(o.batches));
  for (int b = 0; b < o.batches; ++b) {
    auto t0 = Clock::now();
    for (int i = 0; i < o.pairs; ++i) {
      void* p = a.allocate(bytes);
      asm volatile("" : : "r"(p) : "memory");
      a.free(p);
    }
    per_pair.push_back(ns_since(t0) / o.pairs);
  }
  return median(per_pair);
}

double malloc_ns(size_t bytes, const Options& o) {
  const int pairs = bytes >= (1u << 20) ? 20 : 500;
  std::vector<double> v;
  for (int r = 0; r < o.raw_reps; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < pairs; ++i) {
      void* p = std::malloc(bytes);
      asm volatile("" : : "r"(p) : "memory");
      std::free(p);
    }
    v.push_back(ns_since(t0) / pairs);
  }
  return median(v);
}

#if LINTRAIN_WITH_CUDA
double cuda_malloc_ns(size_t bytes, const Options& o) {
  std::vector<double> v;
  for (int r = 0; r < o.raw_reps + 3; ++r) {
    auto t0 = Clock::now();
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed in kbench alloc");
    if (cudaFree(p) != cudaSuccess) throw std::runtime_error("cudaFree failed in kbench alloc");
    if (r >= 3) v.push_back(ns_since(t0));  // first 3: warm-up
  }
  return median(v);
}
#endif

// ---------------------------------------------------------------------------------------
// Training-like replay
// ---------------------------------------------------------------------------------------

struct ReplayResult {
  int64_t allocs_per_step = 0;
  int64_t raw_mallocs_first_step = 0;
  int64_t raw_mallocs_after_first = 0;
  int64_t peak_in_use = 0;
  int64_t peak_reserved = 0;
  int64_t peak_requested = 0;
  double ratio = 0.0;
  double step_us_median = 0.0;  // host time of the allocator calls of one step
};

ReplayResult replay_training(CachingAllocator& a, int steps, const std::string& trace_prefix) {
  constexpr size_t B = 8, T = 512, d = 768, H = 12, D = 64, V = 32000, C = 64, NT = T / C, L = 2;
  constexpr size_t f32 = 4;
  const size_t btd = B * T * d * f32;              // [B,T,d]
  const size_t bthd = B * T * H * D * f32;         // [B,T,H,D]
  const size_t bth = B * T * H * f32;              // [B,T,H]
  const size_t bt = B * T * f32;                   // [B,T]
  const size_t states = B * H * NT * D * D * f32;  // [B,H,NT,D,D] chunk states
  const size_t attn = B * H * NT * C * C * f32;    // [B,H,NT,C,C] intra-chunk scratch
  const size_t mlp = B * T * 4 * d * f32;          // [B,T,4d]
  const size_t logits = B * T * V * f32;           // [B,T,V]
  // Scratch of varying sizes (split/KV workspaces, reductions), different per stage.
  const size_t fwd_scratch[] = {256 * 1024, 3 * 1024 * 1024 + 4096, 7 * 1024 * 1024 + 512};
  const size_t bwd_scratch[] = {512 * 1024 + 64, 5 * 1024 * 1024, 9 * 1024 * 1024 + 1536, 96 * 1024};

  std::vector<void*> param_grads;  // persistent across steps (allocated in step 0)
  const size_t param_grad_sizes[] = {d * d * f32,     d * d * f32,     d * d * f32, d * d * f32,
                                     d * 4 * d * f32, 4 * d * d * f32, d * f32,     d * f32};
  a.reset_peak_stats();
  if (!trace_prefix.empty()) a.set_trace(true);
  std::vector<double> step_us;
  int64_t raw_before = a.stats().num_device_alloc;
  ReplayResult r;
  for (int step = 0; step < steps; ++step) {
    a.set_step(step);
    auto t0 = Clock::now();
    int64_t allocs0 = a.stats().allocation.allocated;
    std::vector<std::pair<void*, size_t>> saved;  // forward activations kept for backward
    auto keep = [&](size_t bytes) { saved.push_back({a.allocate(bytes), bytes}); };
    auto scratch = [&](const size_t* sizes, size_t n) {
      std::vector<void*> s;
      for (size_t i = 0; i < n; ++i) s.push_back(a.allocate(sizes[i]));
      for (size_t i = n; i-- > 0;) a.free(s[i]);
    };
    // Forward.
    static const char* const kFwd[L] = {"fwd/L0", "fwd/L1"};
    static const char* const kBwd = "bwd";
    alloc::set_stage_tag("fwd/embed");
    keep(B * T * 4);  // tokens (int32)
    keep(btd);        // embedding out
    for (size_t l = 0; l < L; ++l) {
      alloc::set_stage_tag(kFwd[l]);
      keep(btd);
      keep(bt);  // norm1 out, rstd
      keep(bthd);
      keep(bthd);
      keep(bthd);
      keep(bthd);    // q k v g
      keep(bth);     // beta
      keep(states);  // chunk states (saved for backward)
      {
        void* s = a.allocate(attn);
        scratch(fwd_scratch, 3);
        a.free(s);
      }
      keep(bthd);  // o
      keep(btd);
      keep(btd);  // out proj, residual
      keep(btd);
      keep(bt);  // norm2 out, rstd
      keep(mlp);
      keep(mlp);  // up, activation
      keep(btd);
      keep(btd);  // down, residual
    }
    keep(btd);
    keep(bt);  // final norm
    // Loss: logits and their gradient, then the logits are dropped.
    alloc::set_stage_tag("loss");
    void* lg = a.allocate(logits);
    void* dlg = a.allocate(logits);
    a.free(lg);
    // Backward: reverse order; each saved activation gets a transient gradient of its size.
    alloc::set_stage_tag(kBwd);
    void* upstream = a.allocate(btd);
    a.free(dlg);
    if (step == 0)
      for (size_t l = 0; l < L; ++l)
        for (size_t g : param_grad_sizes) param_grads.push_back(a.allocate(g));
    for (size_t i = saved.size(); i-- > 0;) {
      void* grad = a.allocate(saved[i].second);
      if (i % 9 == 0) scratch(bwd_scratch, 4);
      a.free(upstream);
      upstream = grad;
      a.free(saved[i].first);
    }
    a.free(upstream);
    // Optimizer: grad-norm partial sums.
    alloc::set_stage_tag("optimizer");
    {
      void* s = a.allocate(4096);
      a.free(s);
    }
    alloc::set_stage_tag("");
    step_us.push_back(ns_since(t0) / 1000.0);
    int64_t allocs = a.stats().allocation.allocated - allocs0;
    r.allocs_per_step = allocs;
    if (step == 0) r.raw_mallocs_first_step = a.stats().num_device_alloc - raw_before;
  }
  alloc::Stats st = a.stats();
  r.raw_mallocs_after_first = st.num_device_alloc - raw_before - r.raw_mallocs_first_step;
  r.peak_in_use = st.allocated_bytes.peak;
  r.peak_reserved = st.reserved_bytes.peak;
  r.peak_requested = st.requested_bytes.peak;
  r.ratio = double(r.peak_reserved) / double(r.peak_in_use);
  std::sort(step_us.begin(), step_us.end());
  r.step_us_median = step_us[step_us.size() / 2];
  if (!trace_prefix.empty()) {
    // State at the end of the last step (parameter gradients still live), plus its history.
    a.dump_snapshot_json(trace_prefix + ".snapshot.json");
    a.dump_snapshot_pickle(trace_prefix + ".snapshot.pickle");
    a.dump_chrome_trace(trace_prefix + ".chrome.json");
    a.set_trace(false);
  }
  for (void* p : param_grads) a.free(p);
  return r;
}

void print_replay(const char* name, const ReplayResult& r, int steps) {
  std::printf("  %-6s steps %d, %lld allocations/step: raw mallocs step 0 = %lld, steps 1..%d = %lld (target 0)\n",
              name, steps, (long long)r.allocs_per_step, (long long)r.raw_mallocs_first_step, steps - 1,
              (long long)r.raw_mallocs_after_first);
  std::printf(
      "  %-6s peak in-use %.1f MiB, peak reserved %.1f MiB, ratio %.3f (target <= 1.10); "
      "allocator host time %.1f us/step (median)\n",
      name, r.peak_in_use / 1048576.0, r.peak_reserved / 1048576.0, r.ratio, r.step_us_median);
}

nlohmann::json replay_json(const ReplayResult& r) {
  return {{"allocs_per_step", r.allocs_per_step},
          {"raw_mallocs_first_step", r.raw_mallocs_first_step},
          {"raw_mallocs_after_first_step", r.raw_mallocs_after_first},
          {"peak_in_use_bytes", r.peak_in_use},
          {"peak_reserved_bytes", r.peak_reserved},
          {"peak_requested_bytes", r.peak_requested},
          {"reserved_over_in_use", r.ratio},
          {"allocator_host_us_per_step_median", r.step_us_median}};
}

int run_alloc(const Options& o) {
  nlohmann::json out;
  out["benchmark"] = "alloc";
  out["batches"] = o.batches;
  out["pairs_per_batch"] = o.pairs;
  const std::vector<size_t> sizes = {256,      1024,     4096,      16384,     65536,     262144,
                                     1u << 20, 4u << 20, 16u << 20, 64u << 20, 256u << 20};
  bool gpu = false;
#if LINTRAIN_WITH_CUDA
  if (o.gpu && alloc::cuda_available()) gpu = true;
#endif
  std::printf("kbench alloc: allocate+free pair, hit path (median over %d batches of %d pairs; ns per pair)\n",
              o.batches, o.pairs);
  std::printf("  %-9s %12s %14s %14s %16s\n", "size", "host cache", "malloc/free", "cuda cache", "cudaMalloc/Free");
  CachingAllocator host(std::make_unique<alloc::HostBackend>());
  host.set_poison(false);
  std::unique_ptr<CachingAllocator> dev;
#if LINTRAIN_WITH_CUDA
  if (gpu) {
    dev = std::make_unique<CachingAllocator>(alloc::make_cuda_backend(0));
    dev->set_poison(false);
    cudaFree(nullptr);  // create the context before timing
  }
#endif
  nlohmann::json rows = nlohmann::json::array();
  double worst_hit = 0.0;
  for (size_t b : sizes) {
    nlohmann::json row = {{"bytes", b}};
    double h = hit_path_ns(host, b, o);
    double m = malloc_ns(b, o);
    row["host_cache_ns"] = h;
    row["malloc_free_ns"] = m;
    worst_hit = std::max(worst_hit, h);
    char dc[32] = "-", dm[32] = "-";
#if LINTRAIN_WITH_CUDA
    if (gpu) {
      double dh = hit_path_ns(*dev, b, o);
      double cm = cuda_malloc_ns(b, o);
      row["cuda_cache_ns"] = dh;
      row["cudamalloc_free_ns"] = cm;
      worst_hit = std::max(worst_hit, dh);
      std::snprintf(dc, sizeof dc, "%.1f", dh);
      std::snprintf(dm, sizeof dm, "%.0f", cm);
    }
#endif
    std::printf("  %-9s %12.1f %14.1f %14s %16s\n", size_label(b).c_str(), h, m, dc, dm);
    rows.push_back(row);
    host.empty_cache();
    if (dev) dev->empty_cache();
  }
  out["hit_path"] = rows;
  out["hit_path_worst_median_ns"] = worst_hit;
  std::printf("  worst hit-path median: %.1f ns (target <= 100 ns)\n", worst_hit);

  std::printf("training replay (depth-2 LM step, B8 T512 d768 H12x64 V32000, fp32 activations):\n");
  ReplayResult hr = replay_training(host, o.steps, o.trace_prefix);
  print_replay("host", hr, o.steps);
  out["replay_host"] = replay_json(hr);
  if (dev) {
    ReplayResult dr = replay_training(*dev, o.steps, "");
    print_replay("cuda", dr, o.steps);
    out["replay_cuda"] = replay_json(dr);
  }
  out["gpu"] = gpu;
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    if (!f) {
      std::fprintf(stderr, "kbench alloc: cannot write %s\n", o.json_path.c_str());
      return 1;
    }
    f << out.dump(2) << "\n";
  }
  return 0;
}

void setup_alloc(CLI::App& sub, std::function<int()>& run) {
  auto o = std::make_shared<Options>();
  sub.add_option("--batches", o->batches, "timing batches per size (median over them)")->check(CLI::Range(3, 100000));
  sub.add_option("--pairs", o->pairs, "alloc+free pairs per timing batch")->check(CLI::Range(1, 10000000));
  sub.add_option("--raw-reps", o->raw_reps, "repetitions of raw malloc / cudaMalloc timings")
      ->check(CLI::Range(1, 100000));
  sub.add_option("--steps", o->steps, "training replay steps")->check(CLI::Range(2, 100000));
  sub.add_flag("--no-gpu{false}", o->gpu, "skip the CUDA columns even when a device exists");
  sub.add_option("--json", o->json_path, "also write the results as JSON to this file");
  sub.add_option(
      "--trace-out", o->trace_prefix,
      "trace the host replay and write PREFIX.snapshot.json/.pickle (torch memory_viz) and PREFIX.chrome.json");
  run = [o] { return run_alloc(*o); };
}

}  // namespace

LT_KBENCH_COMMAND(alloc, "caching allocator: hit path vs raw malloc/cudaMalloc, training replay", setup_alloc);

}  // namespace lt::kbench
