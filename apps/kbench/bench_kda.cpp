// kbench kda: the KDA token mixer, forward + backward, through engine/mixers/kda.h.
//
//   kbench kda --B 8 --T 512 --H 12 --D 64 --dtype bf16 [--chunk 32] [--path fused|ops|naive]
//              [--iters 200] [--warmup 20] [--sets 4] [--lower-bound LB] [--json FILE]
//
// Prints forward, backward and total medians (CUDA events, >= --iters iterations after
// --warmup, rotating among --sets input sets so the inputs do not sit in L2), p10 / p90,
// the launch atlas of one call (stage, launches, ms), the extra peak memory of one
// forward + backward from the CUDA caching allocator (peak allocated during the call minus
// allocated before it; outputs, saved state, scratch and gradients count, inputs and dO
// do not), and the floors:
//   bytes  = dtype bytes x (read q, k, v, f, b, dO once + write o, dq, dk, dv, df, db once)
//   FLOPs  = 6 x (3 D^2 + 2.5 C D + C^2 / 6) per token and head (forward MACs of the chunk
//            algorithm: W S, Q~ S, Kbar^T Delta; A_kk, A_qk, W, U, A_qk Delta; the solve;
//            backward counted as 2x forward), over the bf16 tensor rate (bf16) or the fp32
//            SIMT rate (fp32)
// and the achieved fraction floor / measured.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "apps/kbench/bench_common.h"
#include "apps/kbench/kbench.h"
#include "engine/device.h"
#include "engine/mixers/kda.h"
#include "engine/ops.h"
#include "kernels/kda.h"
#include "kernels/launch.h"

namespace lt::kbench {
namespace {

struct KdaBenchOptions : MixerBenchOptions {
  double lower_bound = 0.0;  // 0: default gate
  bool simt = false;         // fused: fp32 CUDA-core scan kernels instead of tensor cores
};

struct InputSet {
  Tensor q, k, v, f, b, dO;
};

int run_kda_bench(const KdaBenchOptions& opts) {
  if (!(opts.D == 64 || opts.D == 128))
    throw std::invalid_argument("kbench kda: --D must be 64 or 128, got " + std::to_string(opts.D));
  KdaBenchOptions o = opts;
  if (o.chunk == 0)  // no --chunk: the chunk the engine runs the shape at
    o.chunk = kda::fused_chunk(o.B * o.H, o.T, o.D, parse_bench_dtype("kda", o.dtype));
  MixerBench b("kda", o);
  const DType dt = b.dtype;
  mixers::KdaConfig cfg;
  cfg.chunk = o.chunk;
  cfg.path = mixers::parse_kda_path(o.path);
  cfg.tensor_cores = !o.simt;
  if (o.lower_bound != 0.0) {
    cfg.gate.use_lower_bound = true;
    cfg.gate.lower_bound = static_cast<float>(o.lower_bound);
  }
  b.start();
  const bool device = b.device;
  nlohmann::json j = b.json_head();
  j["variant"] = o.simt ? "simt" : "tensor_cores";
  if (b.skip_without_device(j, cfg.path != mixers::KdaPath::ops)) return 0;
  const TimingOptions topt = b.timing();

  // Inputs as fla's tests draw them: q, k, v, f, b, dO ~ N(0, 1); A_log = log U(1, 16);
  // dt_bias = softplus^-1(dt), dt = exp(U(ln 1e-3, ln 0.1)).
  const Shape s4{o.B, o.T, o.H, o.D}, s3{o.B, o.T, o.H};
  const int64_t n4 = shape_numel(s4);
  std::vector<InputSet> sets;
  for (int i = 0; i < std::max(1, o.sets); ++i)
    sets.push_back(
        {b.randn(s4, dt), b.randn(s4, dt), b.randn(s4, dt), b.randn(s4, dt), b.randn(s3, dt), b.randn(s4, dt)});
  const Device dev = b.dev;
  const Tensor A_log = ops::log(ops::add_scalar(ops::mul_scalar(ops::rand({o.H}, 7, 0, DType::f32, dev), 15.0), 1.0));
  const double l1 = std::log(1e-3), l2 = std::log(0.1);
  const Tensor dtv = ops::clamp(
      ops::exp(ops::add_scalar(ops::mul_scalar(ops::rand({o.H, o.D}, 8, 0, DType::f32, dev), l2 - l1), l1)), 1e-4, 1.0);
  const Tensor dt_bias = ops::add(dtv, ops::log(ops::rsub_scalar(ops::exp(ops::neg(dtv)), 1.0)));

  auto call = [&](int i, const MarkFn& mark) {
    const InputSet& s = sets[static_cast<size_t>(i) % sets.size()];
    mark(0);
    mixers::KdaOutput out;
    {
      StageScope st("fwd/kda");
      out = mixers::kda_forward({s.q, s.k, s.v, s.f, s.b, A_log, dt_bias, Tensor(), Tensor()}, cfg);
    }
    mark(1);
    mixers::KdaGrads g;
    {
      StageScope st("bwd/kda");
      g = mixers::kda_backward(std::move(out.saved), s.dO);
    }
    mark(2);
  };

  const FwdBwdFigures fig = measure_fwd_bwd(call, topt, b.stream, device);
  const MultiTiming& t = fig.t;

  const double es = static_cast<double>(dtype_size(dt));
  const double tokens = static_cast<double>(o.B * o.T * o.H);
  Floors fl;
  fl.bytes = es * (10.0 * static_cast<double>(n4) + 2.0 * tokens);
  const double D = o.D, C = o.chunk;
  fl.flops = 6.0 * tokens * (3.0 * D * D + 2.5 * C * D + C * C / 6.0);
  const double rate = dt == DType::bf16 ? kH200Bf16FlopsPerS : kH200Fp32FlopsPerS;

  std::printf("kbench kda  B %lld T %lld H %lld D %d  %s  chunk %d  path %s%s  (%s, %s)\n", (long long)o.B,
              (long long)o.T, (long long)o.H, o.D, dtype_name(dt), o.chunk, o.path.c_str(),
              o.simt ? " (simt scans)" : "", device_description(device).c_str(), today_utc().c_str());
  fig.print(topt.iters, topt.warmup, sets.size());
  b.print_floors(fl, rate, t.total.median_ms);

  fig.add_json(j);
  j["floors"] = b.floors_json(fl, rate, t.total.median_ms);
  write_json(o.json_path, j);
  return 0;
}

void setup_kda(CLI::App& sub, std::function<int()>& run) {
  auto o = std::make_shared<KdaBenchOptions>();
  o->chunk = 0;  // resolved by run_kda_bench
  add_mixer_bench_options(sub, *o, "head dim (K = V = D; fused: 64 or 128)",
                          "chunk length: 16, 32, 64 (default: the chunk the engine picks for the shape and dtype)",
                          "fused | ops | naive");
  sub.add_option("--lower-bound", o->lower_bound, "fla's lower_bound gate (< 0); 0 = default gate");
  sub.add_flag("--simt", o->simt, "fused: fp32 CUDA-core variant of the scan kernels");
  run = [o] { return run_kda_bench(*o); };
}

}  // namespace
}  // namespace lt::kbench

LT_KBENCH_COMMAND(kda, "KDA token mixer fwd+bwd: medians, launch atlas, extra peak memory, floors",
                  lt::kbench::setup_kda);
