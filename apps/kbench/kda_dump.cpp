// kbench kda-dump: one KDA mixer forward + backward on given inputs, every output and gradient
// written out: the lintrain side of the bf16 precision contract (scripts/peer/kda_precision.py).
//
//   kbench kda-dump --in inputs.safetensors --out results.safetensors
//                   [--dtype bf16|fp32|f64] [--path fused|ops|naive] [--chunk 0|16|32|64] [--device auto|cpu|cuda]
//
// Inputs (any float dtype in the file): q, k, v, f, dO [B,T,H,D]; b [B,T,H]; A_log [H];
// dt_bias [H*D]; optional h0 and dht [B,H,D,D] (the initial state and the final state's
// gradient). q, k, v, f, b and dO run in --dtype (the file's values rounded to it); the
// parameters and the states in f32 (f64 under --dtype f64). Results (f32, or f64 under f64):
// o, ht, dq, dk, dv, df, db, dA_log, ddt_bias, and dh0 when h0 is given; the metadata names the
// dtype, path, chunk and device.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/kbench/bench_common.h"
#include "apps/kbench/kbench.h"
#include "engine/device.h"
#include "engine/io/safetensors.h"
#include "engine/mixers/kda.h"

namespace lt::kbench {
namespace {

struct KdaDumpOptions {
  std::string in, out, dtype = "bf16", path = "fused", device = "auto";
  int chunk = 0;
};

int run_kda_dump(const KdaDumpOptions& o) {
  const DType dt = parse_bench_dtype("kda-dump", o.dtype);
  const bool f64 = dt == DType::f64;
  Device dev = o.device == "auto" ? default_device() : Device::parse(o.device);
  const mixers::KdaPath path = mixers::parse_kda_path(o.path);
  if (path == mixers::KdaPath::fused && f64)
    throw std::invalid_argument("kbench kda-dump: the fused path runs bf16 or fp32, not f64 (use --path ops|naive)");
  const io::SafetensorsFile file = [&] {
    try {
      return io::read_safetensors(o.in);
    } catch (const std::runtime_error& e) {  // a bad or missing input file is a usage error (exit 2)
      throw std::invalid_argument(e.what());
    }
  }();
  const DType pdt = f64 ? DType::f64 : DType::f32;  // parameters, states and results
  auto act = [&](const char* n) { return file.get(n).to(dt).to(dev); };
  auto par = [&](const char* n) { return file.get(n).to(pdt).to(dev); };
  const Tensor q = act("q");
  const Shape& s = q.shape();
  if (s.size() != 4) throw std::invalid_argument("kbench kda-dump: " + o.in + ": q must be [B, T, H, D]");
  const int64_t B = s[0], T = s[1], H = s[2], D = s[3];
  auto check = [&](const Tensor& t, const Shape& want, const char* n) {
    if (t.shape() != want) throw std::invalid_argument("kbench kda-dump: " + o.in + ": " + n + " has the wrong shape");
    return t;
  };
  mixers::KdaInputs in;
  in.q = q;
  in.k = check(act("k"), s, "k");
  in.v = check(act("v"), s, "v");
  in.f = check(act("f"), s, "f");
  in.b = check(act("b"), {B, T, H}, "b");
  in.A_log = check(par("A_log"), {H}, "A_log");
  in.dt_bias = check(par("dt_bias"), {H * D}, "dt_bias");
  const bool has_h0 = file.has("h0");
  if (has_h0) in.h0 = check(par("h0"), {B, H, D, D}, "h0");
  const Tensor dO = check(act("dO"), s, "dO");
  const Tensor dht = file.has("dht") ? check(par("dht"), {B, H, D, D}, "dht") : Tensor();

  mixers::KdaConfig cfg;
  cfg.chunk = o.chunk;
  cfg.path = path;
  cfg.output_final_state = true;
  const int chunk = mixers::kda_chunk(cfg, s, dt);
  mixers::KdaOutput out = mixers::kda_forward(in, cfg);
  const mixers::KdaGrads g = mixers::kda_backward(std::move(out.saved), dO, dht);
  auto res = [&](const Tensor& t) { return t.to(pdt).to(Device::cpu()); };
  std::vector<io::NamedTensor> r = {{"o", res(out.o)}, {"ht", res(out.ht)},       {"dq", res(g.dq)},
                                    {"dk", res(g.dk)}, {"dv", res(g.dv)},         {"df", res(g.df)},
                                    {"db", res(g.db)}, {"dA_log", res(g.dA_log)}, {"ddt_bias", res(g.ddt_bias)}};
  if (has_h0) r.push_back({"dh0", res(g.dh0)});
  io::write_safetensors(
      o.out, r, {{"dtype", dtype_name(dt)}, {"path", o.path}, {"chunk", std::to_string(chunk)}, {"device", dev.str()}});
  std::printf("kbench kda-dump: B %lld T %lld H %lld D %lld, %s, path %s, chunk %d, on %s -> %s\n", (long long)B,
              (long long)T, (long long)H, (long long)D, dtype_name(dt), o.path.c_str(), chunk, dev.str().c_str(),
              o.out.c_str());
  return 0;
}

void setup_kda_dump(CLI::App& sub, std::function<int()>& run) {
  auto o = std::make_shared<KdaDumpOptions>();
  sub.add_option("--in", o->in, "inputs: q k v f b dO A_log dt_bias [h0 dht] (safetensors)")->required();
  sub.add_option("--out", o->out, "results: o ht dq dk dv df db dA_log ddt_bias [dh0] (safetensors)")->required();
  sub.add_option("--dtype", o->dtype, "bf16 | fp32 | f64 (the activations' dtype)");
  sub.add_option("--path", o->path, "fused | ops | naive");
  sub.add_option("--chunk", o->chunk, "chunk length (0: the engine's pick; fused: 16, 32, 64)")
      ->check(CLI::NonNegativeNumber);
  sub.add_option("--device", o->device, "auto | cpu | cuda[:N]");
  run = [o] { return run_kda_dump(*o); };
}

}  // namespace
}  // namespace lt::kbench

// The subcommand's name has a dash, so it registers without the macro.
static ::lt::kbench::Registrar lt_kbench_registrar_kda_dump(
    "kda-dump", "one KDA fwd+bwd on given inputs, every output and gradient written (precision contract)",
    lt::kbench::setup_kda_dump);
