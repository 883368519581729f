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

struct Rwkv6BenchOptions : MixerBenchOptions {
  std::string backward = "fused";
  bool pick_backward = false;
  double scale = 1.0;
};

struct InputSet {
  Tensor r, k, v, w, dO;
};

int run_rwkv6_bench(const Rwkv6BenchOptions& o) {
  if (!(o.D == 64 || o.D == 128 || o.D == 256))
    throw std::invalid_argument("kbench rwkv6: --D must be 64, 128 or 256, got " + std::to_string(o.D));
  MixerBench b("rwkv6", o);
  const DType dt = b.dtype;
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
  b.start();
  const bool device = b.device;
  nlohmann::json j = b.json_head();
  j["backward"] = o.pick_backward ? std::string("pick") : o.backward;
  j["scale"] = o.scale;
  if (b.skip_without_device(j, cfg.path != mixers::Rwkv6Path::ops)) return 0;
  const TimingOptions topt = b.timing();
  const int iters = topt.iters, warmup = topt.warmup;

  const Shape s4{o.B, o.T, o.H, o.D};
  const int64_t n4 = shape_numel(s4);
  std::vector<InputSet> sets;
  for (int i = 0; i < std::max(1, o.sets); ++i) {
    InputSet s;
    s.r = b.randn(s4, dt), s.k = b.randn(s4, dt), s.v = b.randn(s4, dt);
    s.w = ops::neg(ops::softplus(ops::neg(b.randn(s4, DType::f32)))).to(dt);  // logsigmoid
    s.dO = b.randn(s4, dt);
    sets.push_back(s);
  }
  const Tensor u = b.randn({o.H, o.D}, DType::f32);
  void* stream = b.stream;

  auto measure = [&](const mixers::Rwkv6Config& c) {
    auto call = [&](int i, const MarkFn& mark) {
      const InputSet& s = sets[static_cast<size_t>(i) % sets.size()];
      mark(0);
      mixers::Rwkv6Output out;
      {
        StageScope st("fwd/rwkv6");
        out = mixers::rwkv6_forward({s.r, s.k, s.v, s.w, u, Tensor(), Tensor()}, c);
      }
      mark(1);
      {
        StageScope st("bwd/rwkv6");
        mixers::Rwkv6Grads g = mixers::rwkv6_backward(std::move(out.saved), s.dO);
      }
      mark(2);
    };
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
  char simt[96];
  std::snprintf(simt, sizeof simt, " (fp32 SIMT floor %.4f ms: %.1f%%)", simt_floor_ms,
                100.0 * simt_floor_ms / t.total.median_ms);
  b.print_floors(fl, rate, t.total.median_ms, simt);

  fig.add_json(j);
  j["floors"] = b.floors_json(fl, rate, t.total.median_ms);
  j["floors"]["simt_floor_ms"] = simt_floor_ms;
  write_json(o.json_path, j);
  return 0;
}

void setup_rwkv6(CLI::App& sub, std::function<int()>& run) {
  auto o = std::make_shared<Rwkv6BenchOptions>();
  add_mixer_bench_options(sub, *o, "head dim (K = V = D; fused/fallback: a multiple of 64)", "chunk length: 16, 32, 64",
                          "fused | ops");
  auto* bwd = sub.add_option("--backward", o->backward, "fused path's backward: fused | fallback");
  sub.add_flag("--pick-backward", o->pick_backward,
               "time both backward implementations and print the winner a config can name")
      ->excludes(bwd);
  sub.add_option("--scale", o->scale, "output scale (fla model: 1)")->check(CLI::PositiveNumber);
  run = [o] { return run_rwkv6_bench(*o); };
}

}  // namespace
}  // namespace lt::kbench

LT_KBENCH_COMMAND(rwkv6, "RWKV6 token mixer fwd+bwd: medians, launch atlas, extra peak memory, floors",
                  lt::kbench::setup_rwkv6);
