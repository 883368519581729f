// kbench step: one full training step of the depth-2 model (forward + loss + backward,
// global grad norm, AdamW), and kbench model-dump: the files of the fla equivalence check.
//
//   kbench step --arch kda|rwkv6 --precision fp32|tf32|bf16 [--B 8 --T 512 --d 768 --layers 2
//               --heads 12 --head-dim 64 --vocab 32000 --chunk 64 --path auto] [--iters 50]
//               [--warmup 5] [--json FILE]
//
// Prints ms/step (median, p10, p90 of CUDA events around whole steps after warm-up), tokens/s,
// model TFLOP/s (Model::flops_per_token), kernel launches per step (the launch atlas, summed
// over its rows), the per-stage atlas of one step (stage, launches, ms), peak in-use and
// reserved bytes of the caching allocator over the timed steps, and the device mallocs made
// after the first step (0 when the caching allocator serves every later step).
//
//   kbench model-dump --arch kda --out DIR [--device auto|cpu|cuda] [--dtype f32|f64]
//                     [--B 2 --T 128 ... sizes as above] [--seed 0] [--weights FILE] [--docs N]
//
// Writes DIR/config.json (Model::fla_config), DIR/model.safetensors (the initial parameters
// under fla's names), DIR/batch.safetensors (tokens, targets: [B, T] i64; 3 targets are -100),
// DIR/grads.safetensors (every parameter's gradient of one step, and "loss": the mean
// cross-entropy over the valid targets) for scripts/fla_equivalence.py. --dtype f64 runs the
// model in float64 on the CPU (the reference precision of the check). --docs N packs N
// documents into each row (starts at seeded positions, one a single token; the step restarts
// the state at each, engine/mixers/segments.h, and drops the target before each start) and
// adds "starts" ([B, T] i64, 1 where a document starts) to batch.safetensors: the script then
// runs fla with cu_seqlens.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "apps/kbench/bench_common.h"
#include "apps/kbench/kbench.h"
#include "engine/device.h"
#include "engine/io/safetensors.h"
#include "engine/mixers/segments.h"
#include "engine/model/model.h"
#include "engine/ops.h"
#include "engine/optim/adamw.h"
#include "kernels/launch.h"

namespace lt::kbench {
namespace {

struct StepOptions {
  std::string arch = "kda";
  std::string precision = "fp32";
  int64_t B = 8, T = 512, d = 768, layers = 2, heads = 12, head_dim = 64, vocab = 32000;
  int chunk = 0;  // 0: auto (engine/model/blocks.h)
  std::string path = "auto";
  int iters = 50;
  int warmup = 5;
  int64_t max_split_mb = 0;  // 0: the allocator's default oversize threshold
  uint64_t seed = 0;
  std::string json_path;
  // model-dump
  std::string out_dir;
  std::string device = "auto";
  std::string dtype = "f32";
  std::string weights;  // a safetensors file of fla-named weights instead of init_weights
  int64_t docs = 1;     // documents per row (packed)
};

void add_model_options(CLI::App& sub, StepOptions& o) {
  sub.add_option("--arch", o.arch, "kda | rwkv6");
  sub.add_option("--B", o.B, "batch")->check(CLI::PositiveNumber);
  sub.add_option("--T", o.T, "sequence length")->check(CLI::PositiveNumber);
  sub.add_option("--d", o.d, "hidden size")->check(CLI::PositiveNumber);
  sub.add_option("--layers", o.layers, "blocks")->check(CLI::PositiveNumber);
  sub.add_option("--heads", o.heads, "heads")->check(CLI::PositiveNumber);
  sub.add_option("--head-dim", o.head_dim, "head size")->check(CLI::PositiveNumber);
  sub.add_option("--vocab", o.vocab, "vocabulary size")->check(CLI::PositiveNumber);
  sub.add_option("--chunk", o.chunk, "mixer chunk length (16, 32, 64; 0: auto, the fastest for the shape)")
      ->check(CLI::IsMember({0, 16, 32, 64}));
  sub.add_option("--path", o.path, "mixer path: auto | naive | ops | fused");
  sub.add_option("--seed", o.seed, "initialisation and batch seed");
}

model::ModelConfig model_config(const StepOptions& o, const std::string& precision) {
  model::ModelConfig c;
  c.arch = model::parse_arch(o.arch);
  c.precision = model::parse_precision(precision);
  c.vocab_size = o.vocab;
  c.hidden_size = o.d;
  c.num_layers = o.layers;
  c.num_heads = o.heads;
  c.head_dim = o.head_dim;
  c.chunk = o.chunk;
  c.mixer_path = o.path;
  return c;
}

// Token ids uniform in [0, V) (Philox on the host), as i64 [B, T]; `ignored` targets -100.
Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed, int ignored) {
  const std::vector<double> u = ops::rand({B * T}, seed, 0, DType::f64).to_vector();
  std::vector<int64_t> ids(u.size());
  for (size_t i = 0; i < u.size(); ++i)
    ids[i] = std::min<int64_t>(V - 1, static_cast<int64_t>(u[i] * static_cast<double>(V)));
  for (int i = 0; i < ignored && !ids.empty(); ++i) ids[(static_cast<size_t>(i) * 7919 + 5) % ids.size()] = -100;
  return Tensor::from_vector(ids, {B, T}, DType::i64);
}

int run_step_bench(const StepOptions& o) {
  const model::ModelConfig cfg = model_config(o, o.precision);
  const bool device = cuda_available();
  const Device dev = device ? Device::cuda(0) : Device::cpu();
  const int iters = device ? o.iters : std::min(o.iters, 3);
  const int warmup = device ? o.warmup : std::min(o.warmup, 1);
  model::Model m(cfg, dev);
  m.init_weights(o.seed);
  const Tensor tokens = random_ids(o.B, o.T, o.vocab, o.seed + 1, 0).to(DType::i32).to(dev);
  const Tensor targets = random_ids(o.B, o.T, o.vocab, o.seed + 2, 0).to(DType::i32).to(dev);
  const double inv_count = 1.0 / static_cast<double>(o.B * o.T);
  Tensor loss = Tensor::zeros({}, DType::f32, dev);
  Tensor skipped = Tensor::zeros({}, DType::i32, dev);
  optim::AdamWConfig acfg;
  int64_t t = 0;
  auto step = [&] {
    {
      StageScope s("zero_grad");
      m.zero_grad();
      loss.zero_();
    }
    m.forward_backward(tokens, targets, inv_count, loss);
    StageScope s("optim");
    Tensor norm;
    {
      StageScope g("grad_norm");
      norm = optim::grad_norm(m.arenas().grads);
    }
    StageScope a("adamw");
    optim::adamw_step(m.arenas(), acfg, 1e-4, ++t, norm, skipped);
  };
  void* stream = device ? current_stream(dev).handle() : nullptr;
  alloc::CachingAllocator& A = device ? alloc::cuda_allocator(0) : alloc::host_allocator();

  // The allocator's trace names the stage of every segment allocated after the first step
  // (a steady-state step should allocate none).
  if (o.max_split_mb > 0) A.set_max_split_size(static_cast<size_t>(o.max_split_mb) << 20);
  const bool was_tracing = A.tracing();
  A.set_trace(true);
  A.set_step(1);
  step();  // first step: the caching allocator fills
  synchronize(dev);
  A.set_step(2);
  const int64_t mallocs_after_first = A.stats().num_device_alloc;
  A.reset_peak_stats();
  const MultiTiming timing = time_regions(
      [&](int, const MarkFn& mark) {
        mark(0);
        step();
        mark(1);
      },
      2, TimingOptions{warmup, iters}, stream, device);
  synchronize(dev);
  const alloc::Stats st = A.stats();
  const int64_t mallocs_later = st.num_device_alloc - mallocs_after_first;
  std::vector<alloc::TraceEvent> late_segments;
  for (const alloc::TraceEvent& e : A.trace())
    if (e.action == alloc::TraceAction::segment_alloc && e.step >= 2) late_segments.push_back(e);
  A.set_trace(was_tracing);
  const std::vector<StageRow> atlas = time_stages(step, device ? 5 : 1, stream, device);
  double launches = 0;
  for (const StageRow& r : atlas) launches += r.launches_per_call;
  const double loss_now = loss.item();

  const Timing& tt = timing.total;
  const double tokens_per_step = static_cast<double>(o.B * o.T);
  const double tok_s = tokens_per_step / (tt.median_ms * 1e-3);
  const double flops_per_token = m.flops_per_token(o.T, o.B);
  const double tflops = flops_per_token * tok_s / 1e12;
  const int chunk = m.mixer_chunk(o.B, o.T);
  std::printf(
      "kbench step  %s %s  d %lld  layers %lld  heads %lld x %lld  vocab %lld  B %lld T %lld  chunk %d%s  "
      "path %s  (%s, %s)\n",
      o.arch.c_str(), o.precision.c_str(), (long long)o.d, (long long)o.layers, (long long)o.heads,
      (long long)o.head_dim, (long long)o.vocab, (long long)o.B, (long long)o.T, chunk, o.chunk == 0 ? " (auto)" : "",
      o.path.c_str(), device_description(device).c_str(), today_utc().c_str());
  std::printf("  parameters %.2fM   loss after %lld steps %.5f\n", static_cast<double>(m.num_params()) / 1e6,
              (long long)t, loss_now);
  std::printf("  ms/step median %.3f  p10 %.3f  p90 %.3f   (%d steps after %d warm-up)\n", tt.median_ms, tt.p10_ms,
              tt.p90_ms, iters, warmup);
  std::printf("  tokens/s %.0f   model %.1f TFLOP/s (%.3g FLOP/token)\n", tok_s, tflops, flops_per_token);
  std::printf("  launches per step %.0f\n", launches);
  std::printf("%s", stage_table(atlas).c_str());
  std::printf("  peak in use %s, peak reserved %s; device mallocs after step 1: %lld\n",
              fmt_bytes(static_cast<double>(st.allocated_bytes.peak)).c_str(),
              fmt_bytes(static_cast<double>(st.reserved_bytes.peak)).c_str(), (long long)mallocs_later);
  for (const alloc::TraceEvent& e : late_segments)
    std::printf("    segment of %s allocated in stage '%s'\n", fmt_bytes(static_cast<double>(e.size)).c_str(),
                e.stage.c_str());

  nlohmann::json j = {{"bench", "step"},
                      {"arch", o.arch},
                      {"precision", o.precision},
                      {"d", o.d},
                      {"layers", o.layers},
                      {"heads", o.heads},
                      {"head_dim", o.head_dim},
                      {"vocab", o.vocab},
                      {"B", o.B},
                      {"T", o.T},
                      {"chunk", chunk},
                      {"chunk_auto", o.chunk == 0},
                      {"path", o.path},
                      {"date", today_utc()},
                      {"device", device_description(device)},
                      {"params", m.num_params()}};
  j["step"] = tt.json();
  j["tokens_per_s"] = tok_s;
  j["model_tflops"] = tflops;
  j["flops_per_token"] = m.flops_per_token(o.T);
  j["launches_per_step"] = launches;
  j["atlas"] = stage_json(atlas);
  j["peak_in_use_bytes"] = st.allocated_bytes.peak;
  j["peak_reserved_bytes"] = st.reserved_bytes.peak;
  j["device_mallocs_after_step1"] = mallocs_later;
  j["loss"] = loss_now;
  write_json(o.json_path, j);
  return 0;
}

int run_model_dump(const StepOptions& o) {
  if (o.out_dir.empty()) throw std::invalid_argument("kbench model-dump: --out DIR is required");
  if (o.dtype != "f32" && o.dtype != "f64")
    throw std::invalid_argument("kbench model-dump: --dtype must be f32 or f64, got '" + o.dtype + "'");
  const bool f64 = o.dtype == "f64";
  Device dev = o.device == "auto" ? default_device() : Device::parse(o.device);
  if (f64) dev = Device::cpu();
  const model::ModelConfig cfg = model_config(o, "fp32");
  model::Model m(cfg, dev, f64 ? DType::f64 : DType::f32);
  if (o.weights.empty()) m.init_weights(o.seed);
  else m.load_params(io::read_safetensors(o.weights));
  const int ignored = 3;
  const Tensor tokens = random_ids(o.B, o.T, o.vocab, o.seed + 1, 0);
  Tensor targets = random_ids(o.B, o.T, o.vocab, o.seed + 2, ignored);
  // Packed documents: starts at t = 0 and at docs - 1 seeded positions a row (the first of
  // them followed at once by another: a one-token document); the target before each is dropped.
  std::vector<uint8_t> starts(static_cast<size_t>(o.B * o.T), 0);
  if (o.docs > 1) {
    if (o.docs > o.T / 2) throw std::invalid_argument("kbench model-dump: --docs must be at most T / 2");
    std::vector<double> tg = targets.to_vector();
    const std::vector<double> u = ops::rand({o.B * o.docs}, o.seed + 3, 0, DType::f64).to_vector();
    for (int64_t b = 0; b < o.B; ++b) {
      starts[b * o.T] = 1;
      for (int64_t i = 1; i < o.docs; ++i) {
        int64_t t = 1 + static_cast<int64_t>(u[b * o.docs + i] * static_cast<double>(o.T - 2));
        if (i == 1) starts[b * o.T + t + 1] = 1;  // a one-token document at t
        starts[b * o.T + t] = 1;
      }
      for (int64_t t = 1; t < o.T; ++t)
        if (starts[b * o.T + t]) tg[b * o.T + t - 1] = -100;
    }
    targets = Tensor::from_vector(tg, targets.shape(), targets.dtype());
  }
  int64_t valid = 0;
  for (double t : targets.to_vector()) valid += t >= 0 ? 1 : 0;
  const std::optional<mixers::Segments> seg =
      o.docs > 1 ? std::optional<mixers::Segments>(std::in_place, starts, o.B, o.T, dev) : std::nullopt;
  Tensor loss = Tensor::zeros({}, f64 ? DType::f64 : DType::f32, dev);
  m.zero_grad();
  m.forward_backward(tokens.to(DType::i32).to(dev), targets.to(DType::i32).to(dev), 1.0 / static_cast<double>(valid),
                     loss, nullptr, seg ? &*seg : nullptr);
  std::filesystem::create_directories(o.out_dir);
  const std::string dir = o.out_dir + "/";
  {
    std::ofstream f(dir + "config.json");
    f << m.fla_config().dump(2) << "\n";
    if (!f) throw std::runtime_error("kbench model-dump: cannot write " + dir + "config.json");
  }
  // The weights exactly as the step used them (f64 under --dtype f64: rounding them to f32 here
  // would hand fla other weights and cap the check at f32's 1e-7).
  io::write_safetensors(dir + "model.safetensors", m.named_params());
  std::vector<io::NamedTensor> batch = {{"tokens", tokens}, {"targets", targets}};
  if (seg)
    batch.push_back(
        {"starts", Tensor::from_vector(std::vector<double>(starts.begin(), starts.end()), {o.B, o.T}, DType::i64)});
  io::write_safetensors(dir + "batch.safetensors", batch);
  std::vector<io::NamedTensor> grads = m.named_grads();
  grads.push_back({"loss", loss});
  io::write_safetensors(dir + "grads.safetensors", grads,
                        {{"device", dev.str()},
                         {"dtype", o.dtype},
                         {"path", o.path},
                         {"chunk", std::to_string(m.mixer_chunk(o.B, o.T))}});
  std::printf("kbench model-dump: %s %s on %s, B %lld T %lld, loss %.8f -> %s\n", o.arch.c_str(), o.dtype.c_str(),
              dev.str().c_str(), (long long)o.B, (long long)o.T, loss.item(), o.out_dir.c_str());
  return 0;
}

void setup_step(CLI::App& sub, std::function<int()>& run) {
  auto o = std::make_shared<StepOptions>();
  add_model_options(sub, *o);
  sub.add_option("--precision", o->precision, "fp32 | tf32 | bf16");
  sub.add_option("--iters", o->iters, "timed steps")->check(CLI::PositiveNumber);
  sub.add_option("--warmup", o->warmup, "warm-up steps");
  sub.add_option("--json", o->json_path, "write the figures as JSON to FILE");
  sub.add_option("--max-split-mb", o->max_split_mb,
                 "caching allocator: blocks of at least this many MiB are not split (0: its default, 64)")
      ->check(CLI::NonNegativeNumber);
  run = [o] { return run_step_bench(*o); };
}

void setup_model_dump(CLI::App& sub, std::function<int()>& run) {
  auto o = std::make_shared<StepOptions>();
  o->B = 2;
  o->T = 128;
  add_model_options(sub, *o);
  sub.add_option("--out", o->out_dir, "output directory")->required();
  sub.add_option("--device", o->device, "auto | cpu | cuda[:N]");
  sub.add_option("--dtype", o->dtype, "f32 | f64 (f64: CPU)");
  sub.add_option("--weights", o->weights, "start from these fla-named weights (safetensors) instead of the init");
  sub.add_option("--docs", o->docs, "packed documents per row (the state restarts at each; fla runs with cu_seqlens)")
      ->check(CLI::PositiveNumber);
  run = [o] { return run_model_dump(*o); };
}

}  // namespace
}  // namespace lt::kbench

LT_KBENCH_COMMAND(step, "one training step of the depth-2 model: ms/step, tokens/s, launches, atlas, memory",
                  lt::kbench::setup_step);
// The subcommand's name has a dash, so it registers without the macro.
static ::lt::kbench::Registrar lt_kbench_registrar_model_dump(
    "model-dump", "weights, batch, loss and gradients of one step for scripts/fla_equivalence.py",
    lt::kbench::setup_model_dump);
