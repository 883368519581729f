// kbench rwkv6: the RWKV6 token mixer, forward + backward, through engine/mixers/rwkv6.h.
//
//   kbench rwkv6 --B 8 --T 512 --H 12 --D 64 --dtype bf16 [--chunk 64]
//                [--path fused|ops] [--backward fused|fallback | --pick-backward] [--scale S]
//                [--iters 200] [--warmup 20] [--sets 4] [--json FILE]
//
// --pick-backward measures the fused path twice, with each backward implementation
// (Rwkv6Config::backward = fused, then fallback), prints both and the winner by backward
// median: the value a config names for this shape (the mixer never times anything itself).
//
// Prints forward, backward and total medians (CUDA events, --iters iterations after
// --warmup, rotating among --sets input sets so the inputs do not sit in L2), p10 / p90,
// the launch atlas of one call (stage, launches, ms), the extra peak memory of one
// forward + backward from the CUDA caching allocator (peak allocated during the call minus
// allocated before it: outputs, states, scratch and gradients count; inputs and dO do not),
// and the floors:
//   bytes = dtype bytes x (read r, k, v, w, dO once + write o, dr, dk, dv, dw once)
//   FLOPs = 6 x (2 D^2 + C D) per token and head: forward MACs of the chunk algorithm
//           (state update K'^T V and inter output (Q e^Ge) S: D^2 each; A and A V: C D / 2
//           each), backward counted as 2x forward; over the bf16 tensor rate (bf16) or the
//           fp32 SIMT rate (fp32); the fp32 SIMT floor is printed too (the fp32 path and bf16
//           at chunk 16 run SIMT kernels; bf16 at chunk 32 / 64 the tensor-core kernels)
// and the achieved fraction floor / measured. LINTRAIN_RWKV6_KERNELS=simt forces the SIMT
// kernels (kernels/rwkv6.h).
// The fused path's forward keeps the chunk states for the backward (engine/mixers/rwkv6.h):
// the backward's scan launch runs the reverse scan only.
// Inputs as fla's tests draw them: r, k, v, dO ~ N(0, 1), w = logsigmoid(N(0, 1)),
// u ~ N(0, 1) (fp32), no initial state; scale 1 as in the fla model (--scale to change).
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "allocator/caching_allocator.h"
#include "apps/kbench/bench_common.h"
#include "apps/kbench/kbench.h"
#include "engine/device.h"
#include "engine/mixers/rwkv6.h"
#include "engine/ops.h"
#include "kernels/launch.h"
#include "kernels/rwkv6.h"

namespace lt::kbench {
namespace {

struct Rwkv6BenchOptions {
  int64_t B = 8, T = 512, H = 12;
  int D = 64;
  int chunk = 64;
  std::string dtype = "bf16";
  std::string path = "fused";
  std::string backward = "fused";
  bool pick_backward = false;
  double scale = 1.0;
  int iters = 200;
  int warmup = 20;
  int sets = 4;
  std::string json_path;
};

struct InputSet {
  Tensor r, k, v, w, dO;
};

int run_rwkv6_bench(const Rwkv6BenchOptions& o) {
  // Validate before touching a device, so a bad flag is exit 2 on any machine.
  if (!(o.D == 64 || o.D == 128 || o.D == 256))
    throw std::invalid_argument("kbench rwkv6: --D must be 64, 128 or 256, got " + std::to_string(o.D));
  if (o.chunk != 16 && o.chunk != 32 && o.chunk != 64)
    throw std::invalid_argument("kbench rwkv6: --chunk must be 16, 32 or 64, got " + std::to_string(o.chunk));
  const DType dt = parse_bench_dtype("rwkv6", o.dtype);
  mixers::Rwkv6Config cfg;
  cfg.chunk = o.chunk;
  cfg.path = mixers::parse_rwkv6_path(o.path);
  cfg.scale = o.scale;
  cfg.backward = rwkv6::parse_bwd_impl(o.backward);
  if (cfg.path == mixers::Rwkv6Path::naive)
    throw std::invalid_argument("kbench rwkv6: --path must be fused or ops (naive is the tests' reference)");
  if (dt == DType::f64 && cfg.path != mixers::Rwkv6Path::ops)
    throw std::invalid_argument("kbench rwkv6: --dtype fp64 runs on the ops path only (--path ops)");
  if (o.pick_backward && cfg.path != mixers::Rwkv6Path::fused)
    throw std::invalid_argument("kbench rwkv6: --pick-backward times the fused path's backwards (--path fused)");
  const bool device = cuda_available();
  const Device dev = device ? Device::cuda(0) : Device::cpu();
  nlohmann::json j = {{"bench", "rwkv6"},
                      {"B", o.B},
                      {"T", o.T},
                      {"H", o.H},
                      {"D", o.D},
                      {"dtype", dtype_name(dt)},
                      {"chunk", o.chunk},
                      {"path", o.path},
                      {"backward", o.pick_backward ? std::string("pick") : o.backward},
                      {"scale", o.scale},
                      {"date", today_utc()},
                      {"device", device_description(device)}};
  if (!device && cfg.path != mixers::Rwkv6Path::ops) {
    std::printf(
        "kbench rwkv6: no CUDA device; the %s path runs on the GPU in a benchmark "
        "(its CPU twins are for tests). Nothing measured.\n",
        o.path.c_str());
    j["skipped"] = "no CUDA device";
    write_json(o.json_path, j);
    return 0;
  }
  const int iters = device ? o.iters : std::min(o.iters, 3);
  const int warmup = device ? o.warmup : std::min(o.warmup, 1);

  const Shape s4{o.B, o.T, o.H, o.D};
  const int64_t n4 = shape_numel(s4);
  uint64_t off = 0;
  auto randn = [&](const Shape& s, DType t) {
    Tensor x = ops::randn(s, 20261129, off, t, dev);
    off += static_cast<uint64_t>(shape_numel(s));
    return x;
  };
  std::vector<InputSet> sets;
  for (int i = 0; i < std::max(1, o.sets); ++i) {
    InputSet s;
    s.r = randn(s4, dt), s.k = randn(s4, dt), s.v = randn(s4, dt);
    s.w = ops::neg(ops::softplus(ops::neg(randn(s4, DType::f32)))).to(dt);  // logsigmoid
    s.dO = randn(s4, dt);
    sets.push_back(s);
  }
  const Tensor u = randn({o.H, o.D}, DType::f32);
  void* stream = device ? current_stream(dev).handle() : nullptr;

  auto measure = [&](const mixers::Rwkv6Config& c) {
    auto call = [&](int i, const MarkFn& mark) {
      const InputSet& s = sets[static_cast<size_t>(i) % sets.size()];
      mark(0);
      mixers::Rwkv6Output out;
      {
        StageScope st("fwd/rwkv6");
        out = mixers::rwkv6_forward({s.r, s.k, s.v, s.w, u, Tensor()}, c);
      }
      mark(1);
      {
        StageScope st("bwd/rwkv6");
        mixers::Rwkv6Grads g = mixers::rwkv6_backward(std::move(out.saved), s.dO);
      }
      mark(2);
    };
    TimingOptions topt;
    topt.iters = iters;
    topt.warmup = warmup;
    return measure_fwd_bwd(call, topt, stream, device);
  };

  if (o.pick_backward) {
    mixers::Rwkv6Config cf = cfg, cb = cfg;
    cf.backward = rwkv6::BwdImpl::fused;
    cb.backward = rwkv6::BwdImpl::fallback;
    const FwdBwdFigures ff = measure(cf), fb = measure(cb);
    std::printf("kbench rwkv6 --pick-backward  B %lld T %lld H %lld D %d  %s  chunk %d  (%s, %s)\n", (long long)o.B,
                (long long)o.T, (long long)o.H, o.D, dtype_name(dt), o.chunk, device_description(device).c_str(),
                today_utc().c_str());
    std::printf("  backward fused:\n");
    ff.print(iters, warmup, sets.size());
    std::printf("  backward fallback:\n");
    fb.print(iters, warmup, sets.size());
    const double mf = ff.t.regions[1].median_ms, mb = fb.t.regions[1].median_ms;
    const rwkv6::BwdImpl win = mb < mf ? rwkv6::BwdImpl::fallback : rwkv6::BwdImpl::fused;
    std::printf(
        "  backward medians: fused %.4f ms, fallback %.4f ms -> winner: %s "
        "(Rwkv6Config::backward = %s; kbench rwkv6 --backward %s)\n",
        mf, mb, rwkv6::bwd_impl_name(win), rwkv6::bwd_impl_name(win), rwkv6::bwd_impl_name(win));
    nlohmann::json jf, jb;
    ff.add_json(jf);
    fb.add_json(jb);
    j["fused"] = jf;
    j["fallback"] = jb;
    j["winner"] = rwkv6::bwd_impl_name(win);
    write_json(o.json_path, j);
    return 0;
  }
  const FwdBwdFigures fig = measure(cfg);
  const MultiTiming& t = fig.t;
  const double es = static_cast<double>(dtype_size(dt));
  const double tokens = static_cast<double>(o.B * o.T * o.H);
  Floors fl;
  fl.bytes = es * 10.0 * static_cast<double>(n4);
  const double D = o.D, C = o.chunk;
  fl.flops = 6.0 * tokens * (2.0 * D * D + C * D);
  const double rate = dt == DType::bf16 ? kH200Bf16FlopsPerS : kH200Fp32FlopsPerS;
  const double floor_ms = fl.floor_ms(kH200CopyBytesPerS, rate);
  const double simt_floor_ms = fl.floor_ms(kH200CopyBytesPerS, kH200Fp32FlopsPerS);

#if LINTRAIN_WITH_CUDA
  const bool tc = device && rwkv6::cuda_uses_tensor_cores(rwkv6::Dims{o.B, o.T, o.H, o.D, o.chunk}, dt);
#else
  const bool tc = false;
#endif
  const char* kernels = cfg.path == mixers::Rwkv6Path::ops ? "engine ops" : tc ? "tensor-core" : "SIMT";
  j["kernels"] = kernels;
  std::printf(
      "kbench rwkv6  B %lld T %lld H %lld D %d  %s  chunk %d  path %s  backward %s  %s kernels  scale %g  "
      "(%s, %s)\n",
      (long long)o.B, (long long)o.T, (long long)o.H, o.D, dtype_name(dt), o.chunk, o.path.c_str(), o.backward.c_str(),
      kernels, o.scale, device_description(device).c_str(), today_utc().c_str());
  fig.print(iters, warmup, sets.size());
  std::printf(
      "  floors: traffic %s -> %.4f ms at %.1f TB/s; %.2f GFLOP -> %.4f ms at %.0f TFLOP/s; "
      "floor %.4f ms; achieved %.1f%% of the floor (fp32 SIMT floor %.4f ms: %.1f%%)\n",
      fmt_bytes(fl.bytes).c_str(), fl.traffic_ms(kH200CopyBytesPerS), kH200CopyBytesPerS / 1e12, fl.flops / 1e9,
      fl.flop_ms(rate), rate / 1e12, floor_ms, 100.0 * floor_ms / t.total.median_ms, simt_floor_ms,
      100.0 * simt_floor_ms / t.total.median_ms);

  fig.add_json(j);
  j["floors"] = {{"bytes", fl.bytes},
                 {"flops", fl.flops},
                 {"traffic_ms", fl.traffic_ms(kH200CopyBytesPerS)},
                 {"flop_ms", fl.flop_ms(rate)},
                 {"floor_ms", floor_ms},
                 {"achieved_fraction", floor_ms / t.total.median_ms},
                 {"simt_floor_ms", simt_floor_ms}};
  write_json(o.json_path, j);
  return 0;
}

void setup_rwkv6(CLI::App& sub, std::function<int()>& run) {
  auto o = std::make_shared<Rwkv6BenchOptions>();
  sub.add_option("--B", o->B, "batch")->check(CLI::PositiveNumber);
  sub.add_option("--T", o->T, "sequence length")->check(CLI::PositiveNumber);
  sub.add_option("--H", o->H, "heads")->check(CLI::PositiveNumber);
  sub.add_option("--D", o->D, "head dim (K = V = D; fused/fallback: a multiple of 64)")->check(CLI::PositiveNumber);
  sub.add_option("--dtype", o->dtype, "bf16 | fp32");
  sub.add_option("--chunk", o->chunk, "chunk length: 16, 32, 64")->check(CLI::PositiveNumber);
  sub.add_option("--path", o->path, "fused | ops");
  auto* bwd = sub.add_option("--backward", o->backward, "fused path's backward: fused | fallback");
  sub.add_flag("--pick-backward", o->pick_backward,
               "time both backward implementations and print the winner a config can name")
      ->excludes(bwd);
  sub.add_option("--scale", o->scale, "output scale (fla model: 1)")->check(CLI::PositiveNumber);
  sub.add_option("--iters", o->iters, "timed iterations")->check(CLI::PositiveNumber);
  sub.add_option("--warmup", o->warmup, "warm-up iterations");
  sub.add_option("--sets", o->sets, "input sets rotated through (L2 defeat)")->check(CLI::PositiveNumber);
  sub.add_option("--json", o->json_path, "write the figures as JSON to FILE");
  run = [o] { return run_rwkv6_bench(*o); };
}

}  // namespace
}  // namespace lt::kbench

LT_KBENCH_COMMAND(rwkv6, "RWKV6 token mixer fwd+bwd: medians, launch atlas, extra peak memory, floors",
                  lt::kbench::setup_rwkv6);
