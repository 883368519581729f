// The depth-2 model on the CPU: fla's names, shapes and initial statistics, a float64
// finite-difference check of every parameter's gradient through the whole model, bit
// reproducibility and the caching allocator's steady state.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/io/safetensors.h"
#include "engine/model/init.h"
#include "engine/model/model.h"
#include "engine/ops.h"
#include "engine/optim/adamw.h"
#include "tests/support/gradcheck.h"
#include "tests/support/model_testing.h"

using lt::Device;
using lt::DType;
using lt::Shape;
using lt::Tensor;
using namespace lt::model;
using lt::test::fla_listing;
using lt::test::FlaListed;
using lt::test::random_ids;
using lt::test::small_model_config;
using lt::test::tiny_fla_config;

namespace {

double sample_mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double sample_std(const std::vector<double>& v) {
  const double m = sample_mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}
double inv_softplus(double x) { return x + std::log(-std::expm1(-x)); }

}  // namespace

TEST_CASE("model config: fla's size and epsilon rules, names", "[model]") {
  ModelConfig c;
  c.hidden_size = 768;
  CHECK(c.intermediate() == 2048);  // 256 * ceil(2048 / 256)
  c.hidden_size = 256;
  CHECK(c.intermediate() == 768);  // int(682.67) = 682 -> 768
  CHECK(c.eps() == 1e-6);
  c.arch = Arch::rwkv6;
  CHECK(c.intermediate() == 896);  // 3.5 * 256
  c.hidden_size = 768;
  CHECK(c.intermediate() == 2688);
  CHECK(c.eps() == 1e-5);
  c.intermediate_size = 100;
  c.norm_eps = 1e-3;
  CHECK(c.intermediate() == 100);
  CHECK(c.eps() == 1e-3);
  CHECK(parse_arch("rwkv6") == Arch::rwkv6);
  CHECK(std::string(precision_name(parse_precision("bf16"))) == "bf16");
  CHECK_THROWS_WITH(parse_arch("mamba"), Catch::Contains("mamba"));
  CHECK_THROWS_WITH(parse_precision("fp8"), Catch::Contains("fp8"));
}

TEST_CASE("model: KDA parameter names and shapes are fla's", "[model]") {
  Model m(tiny_fla_config(Arch::kda), Device::cpu());
  const std::vector<FlaListed> listed = fla_listing("KDAForCausalLM");
  const std::vector<lt::io::NamedTensor> ours = m.named_params();
  REQUIRE(listed.size() == 45);
  REQUIRE(ours.size() == listed.size());
  int64_t total = 0;
  for (size_t i = 0; i < listed.size(); ++i) {
    INFO(listed[i].name);
    CHECK(ours[i].name == listed[i].name);
    CHECK(ours[i].tensor.shape() == listed[i].shape);
    total += lt::shape_numel(listed[i].shape);
  }
  CHECK(m.num_params() == total);
  // Arena order: decayed parameters first, and decay_end separates them.
  const auto& specs = m.specs();
  bool seen_no_decay = false;
  for (const ParamSpec& s : specs) {
    if (!s.decay) seen_no_decay = true;
    if (seen_no_decay) CHECK_FALSE(s.decay);
    const bool norm_or_bias = s.name.find("norm") != std::string::npos || s.name.find("bias") != std::string::npos ||
                              s.name.find("A_log") != std::string::npos;
    CHECK(s.decay == !norm_or_bias);
  }
  const lt::optim::AdamWArenas& a = m.arenas();
  CHECK(a.params.numel() == a.grads.numel());
  CHECK(a.decay_end > 0);
  CHECK(a.decay_end < a.params.numel());
  CHECK(m.param("model.layers.1.attn.o_proj.weight").shares_storage(a.params));
  CHECK_THROWS_WITH(m.param("model.layers.2.attn.o_proj.weight"), Catch::Contains("model.layers.2.attn.o_proj.weight"));
  const nlohmann::json j = m.fla_config();
  CHECK(j["model_type"] == "kda");
  CHECK(j["intermediate_size"] == 768);
  CHECK(j["head_dim"] == 64);
  CHECK(j["num_hidden_layers"] == 2);
}

TEST_CASE("model: tied embeddings drop lm_head.weight", "[model]") {
  ModelConfig c = tiny_fla_config(Arch::kda);
  c.tie_embeddings = true;
  Model m(c, Device::cpu());
  for (const ParamSpec& s : m.specs()) CHECK(s.name != "lm_head.weight");
  CHECK(m.fla_config()["tie_word_embeddings"] == true);
}

TEST_CASE("model: KDA initial values follow fla's initialisation", "[model][init]") {
  Model m(tiny_fla_config(Arch::kda), Device::cpu());
  m.init_weights(1234);
  const std::vector<FlaListed> listed = fla_listing("KDAForCausalLM");
  const double ln16 = std::log(16.0);
  const double dt_lo = inv_softplus(1e-3), dt_hi = inv_softplus(0.1);
  for (const FlaListed& l : listed) {
    INFO(l.name);
    const std::vector<double> v = m.param(l.name).to_vector();
    const double n = static_cast<double>(v.size());
    const double mean = sample_mean(v);
    double lo = v[0], hi = v[0];
    for (double x : v) lo = std::min(lo, x), hi = std::max(hi, x);
    if (l.std == 0.0) {  // constants: norm weights 1, the gate's bias 0
      CHECK(lo == l.min);
      CHECK(hi == l.max);
    } else if (l.name.find("A_log") != std::string::npos) {
      // log U(1, 16): inside [0, ln 16]; fla's two layers' values lie in that range too
      CHECK(lo >= 0.0);
      CHECK(hi <= ln16);
      CHECK(l.min >= 0.0);
      CHECK(l.max <= ln16);
    } else if (l.name.find("dt_bias") != std::string::npos) {
      // softplus^-1 of a log-uniform dt in [1e-3, 0.1]: mean ~ -4.60, std ~ ln(100) / sqrt(12)
      CHECK(lo >= dt_lo - 1e-12);
      CHECK(hi <= dt_hi + 1e-12);
      const double sd = std::log(100.0) / std::sqrt(12.0);
      CHECK(std::fabs(mean - l.mean) < 6 * sd / std::sqrt(n));
      CHECK(std::fabs(sample_std(v) - l.std) < 0.2);
    } else {  // N(0, 0.02): mean within 5 standard errors of 0; std within 5 standard errors of 0.02 and of fla's
      CHECK(std::fabs(mean) < 5 * 0.02 / std::sqrt(n));
      const double sd = sample_std(v);
      CHECK(std::fabs(sd - 0.02) < 0.02 * 5 / std::sqrt(2 * n) + 1e-4);
      CHECK(std::fabs(sd - l.std) < 5 * 0.02 / std::sqrt(n));  // two samples' std: each +-0.02 / sqrt(2n)
      CHECK(hi < 6 * 0.02);
      CHECK(lo > -6 * 0.02);
    }
  }
  // Deterministic by (seed, parameter index): a rerun is bit-identical, another seed differs,
  // and a parameter drawn alone (init_param) equals its slot in the model.
  Model m2(tiny_fla_config(Arch::kda), Device::cpu());
  m2.init_weights(1234);
  CHECK(m2.arenas().params.to_vector() == m.arenas().params.to_vector());
  m2.init_weights(1235);
  CHECK(m2.param("model.layers.0.attn.q_proj.weight").to_vector() !=
        m.param("model.layers.0.attn.q_proj.weight").to_vector());
  const auto& specs = m.specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name != "model.layers.1.attn.dt_bias") continue;
    // fla's order index of this parameter: its row in the listing
    uint64_t fla_index = 0;
    while (listed[fla_index].name != specs[i].name) ++fla_index;
    Tensor alone = Tensor::empty(specs[i].shape, DType::f32);
    init_param(alone, specs[i], 1234, fla_index);
    CHECK(alone.to_vector() == m.param(specs[i].name).to_vector());
  }
}

TEST_CASE("init: orthogonal and xavier_uniform", "[model][init]") {
  for (const Shape& shape : {Shape{48, 16}, Shape{12, 40}}) {
    ParamSpec s{"lora.2.weight", shape, Init::orthogonal, 0.1, true};
    Tensor w = Tensor::empty(shape, DType::f64);
    init_param(w, s, 7, 3);
    const int64_t r = shape[0], c = shape[1];
    const std::vector<double> v = w.to_vector();
    // The shorter side's vectors are orthonormal (times the gain): W^T W or W W^T = 0.01 I.
    const bool tall = r >= c;
    const int64_t n = tall ? c : r, len = tall ? r : c;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < len; ++k) dot += tall ? v[k * c + i] * v[k * c + j] : v[i * c + k] * v[j * c + k];
        worst = std::max(worst, std::fabs(dot - (i == j ? 0.01 : 0.0)));
      }
    CHECK(worst < 1e-14);
  }
  ParamSpec x{"x_proj.0.linear.weight", {160, 256}, Init::xavier_uniform, std::pow(2.0, -2.5), true};
  Tensor w = Tensor::empty(x.shape, DType::f32);
  init_param(w, x, 7, 4);
  const std::vector<double> v = w.to_vector();
  const double a = std::pow(2.0, -2.5) * std::sqrt(6.0 / (160 + 256));  // fla's listing: max 0.02123
  double lo = 0, hi = 0;
  for (double e : v) lo = std::min(lo, e), hi = std::max(hi, e);
  CHECK(hi <= a * (1 + 1e-6));
  CHECK(lo >= -a * (1 + 1e-6));
  CHECK(hi > 0.99 * a);
  CHECK(std::fabs(sample_std(v) - a / std::sqrt(3.0)) < 0.02 * a);  // fla: 0.01225
  ParamSpec bad{"w", {4}, Init::orthogonal, 1.0, true};
  Tensor b = Tensor::empty({4}, DType::f64);
  CHECK_THROWS_WITH(init_param(b, bad, 1, 0), Catch::Contains("orthogonal"));
}

TEST_CASE("model: float64 finite differences of the loss match every parameter gradient", "[model][gradcheck]") {
  const ModelConfig c = small_model_config(Arch::kda);
  Model m(c, Device::cpu(), DType::f64);
  m.init_weights(42);
  // Scale the initial values up so that every path carries signal; non-trivial norm weights
  // and gate bias.
  lt::test::perturb_params(m, {.normal = 12.0, .constant_noise = 0.3});
  const int64_t B = 2, T = 20;  // chunk 16: one full and one partial chunk
  const Tensor tokens = random_ids(B, T, c.vocab_size, 5);
  const Tensor targets = random_ids(B, T, c.vocab_size, 6, /*ignored=*/3);
  const double inv_count = 1.0 / static_cast<double>(B * T - 3);
  m.zero_grad();
  Tensor loss = Tensor::zeros({}, DType::f64);
  m.forward_backward(tokens, targets, inv_count, loss);
  const double loss_fb = loss.item();
  auto loss_of = [&] {
    Tensor l = Tensor::zeros({}, DType::f64);
    m.evaluate(tokens, targets, inv_count, l);
    return l.item();
  };
  CHECK(std::fabs(loss_of() - loss_fb) < 1e-12 * std::fabs(loss_fb));
  CHECK(loss_fb > 1.0);
  for (const ParamSpec& s : m.specs()) {
    INFO(s.name);
    Tensor p = m.param(s.name);
    const Tensor g = m.grad(s.name);
    const double gmax = lt::ops::max_abs_diff(g, Tensor::zeros(s.shape, DType::f64));
    CHECK(gmax > 1e-8);  // every parameter reaches the loss
    const double err = lt::test::gradcheck(p, g, loss_of, 1e-5, 12);
    CHECK(err < 1e-7);
  }
}

TEST_CASE("model: tied embeddings: the embedding's gradient holds both uses", "[model][gradcheck]") {
  ModelConfig c = small_model_config(Arch::kda);
  c.tie_embeddings = true;
  c.num_layers = 1;
  Model m(c, Device::cpu(), DType::f64);
  m.init_weights(8);
  Tensor emb = m.param("model.embeddings.weight");
  emb.copy_(lt::ops::mul_scalar(emb, 20.0));  // logits of order 1
  const Tensor tokens = random_ids(2, 10, c.vocab_size, 3);
  const Tensor targets = random_ids(2, 10, c.vocab_size, 4, 1);
  m.zero_grad();
  Tensor loss = Tensor::zeros({}, DType::f64);
  m.forward_backward(tokens, targets, 1.0 / 19, loss);
  auto loss_of = [&] {
    Tensor l = Tensor::zeros({}, DType::f64);
    m.evaluate(tokens, targets, 1.0 / 19, l);
    return l.item();
  };
  CHECK(lt::test::gradcheck(emb, m.grad("model.embeddings.weight"), loss_of, 1e-5, 96) < 1e-7);
}

TEST_CASE("model: a CPU training step is bit-reproducible and makes no host malloc after the first", "[model]") {
  // Full steps: forward, loss, backward, global grad norm, AdamW (loss and parameters change
  // from step to step); two runs from the same seed agree bit for bit.
  ModelConfig c = small_model_config(Arch::kda);
  c.hidden_size = 64;
  c.num_heads = 4;
  const int64_t B = 2, T = 40;
  const Tensor tokens = random_ids(B, T, c.vocab_size, 11);
  const Tensor targets = random_ids(B, T, c.vocab_size, 12, 2);
  auto run = [&](int steps, int64_t* mallocs_after_first, std::vector<double>* losses) {
    Model m(c, Device::cpu());
    m.init_weights(3);
    Tensor loss = Tensor::zeros({});
    Tensor skipped = Tensor::zeros({}, DType::i32);
    lt::optim::AdamWConfig opt;
    lt::alloc::CachingAllocator& host = lt::alloc::host_allocator();
    int64_t after_first = 0;
    for (int s = 0; s < steps; ++s) {
      m.zero_grad();
      loss.zero_();
      m.forward_backward(tokens, targets, 1.0 / (B * T - 2), loss);
      const Tensor norm = lt::optim::grad_norm(m.arenas().grads);
      lt::optim::adamw_step(m.arenas(), opt, 1e-2, s + 1, norm, skipped);
      if (losses) losses->push_back(loss.item());
      if (s == 0) after_first = host.stats().num_device_alloc;
    }
    if (mallocs_after_first) *mallocs_after_first = host.stats().num_device_alloc - after_first;
    std::vector<double> out = m.arenas().params.to_vector();
    const std::vector<double> g = m.arenas().grads.to_vector();
    out.insert(out.end(), g.begin(), g.end());
    out.push_back(loss.item());
    out.push_back(skipped.item());
    return out;
  };
  int64_t mallocs = -1;
  std::vector<double> losses;
  const std::vector<double> a = run(3, &mallocs, &losses);
  const std::vector<double> b = run(3, nullptr, nullptr);
  CHECK(a == b);
  CHECK(mallocs == 0);
  REQUIRE(losses.size() == 3);
  CHECK(losses[2] < losses[0]);  // the updates fit the fixed batch
  CHECK(a.back() == 0);          // no step skipped
}

TEST_CASE("model: zero_grad leaves the GEMM weights' gradients to the next backward, which overwrites them",
          "[model]") {
  // zero_grad skips the linear weights' and an untied LM head's gradients; the first
  // micro-batch's GEMMs write them (beta 0), later ones add. Whatever the arena held before,
  // the gradients equal those of the accumulate path (the arena zeroed whole, every GEMM
  // adding): one backward per weight, nothing left stale. A read between zero_grad and the
  // backward sees zeros.
  for (Arch arch : {Arch::kda, Arch::rwkv6})
    for (bool tied : {false, true}) {
      ModelConfig c = small_model_config(arch);
      c.tie_embeddings = tied;
      const int64_t B = 2, T = 12;
      const Tensor tokens = random_ids(B, T, c.vocab_size, 21), tokens2 = random_ids(B, T, c.vocab_size, 22);
      const Tensor targets = random_ids(B, T, c.vocab_size, 23, 1), targets2 = random_ids(B, T, c.vocab_size, 24, 1);
      // hooked: every ready range is read (summed) from the arena during the backward, as the
      // data-parallel reduction reads its buckets
      auto grads_after = [&](bool poisoned, bool settled, int micro_batches, bool hooked = false) {
        Model m(c, Device::cpu(), DType::f64);
        m.init_weights(5);
        if (poisoned) m.arenas().grads.fill_(std::nan(""));
        m.zero_grad();
        if (settled) (void)m.arenas();  // a read: the arena zeroed whole, every GEMM adds
        Tensor loss = Tensor::zeros({}, DType::f64);
        GradsReadyHook hook = [&](const std::vector<ParamRange>& ready) {
          for (const ParamRange& r : ready)
            REQUIRE(std::isfinite(lt::ops::sum_all(m.arenas().grads.narrow(0, r.offset, r.count)).item()));
        };
        m.forward_backward(tokens, targets, 1.0 / (B * T), loss, hooked && micro_batches == 1 ? &hook : nullptr);
        if (micro_batches == 2) m.forward_backward(tokens2, targets2, 1.0 / (B * T), loss, hooked ? &hook : nullptr);
        std::vector<double> g = m.arenas().grads.to_vector();
        g.push_back(loss.item());
        return g;
      };
      for (int mb : {1, 2}) {
        INFO((arch == Arch::kda ? "kda" : "rwkv6") << (tied ? " tied" : "") << ", " << mb << " micro-batches");
        const std::vector<double> overwritten = grads_after(true, false, mb), added = grads_after(false, true, mb);
        CHECK(overwritten == added);
        CHECK(grads_after(true, false, mb, true) == added);
        if (mb == 2) CHECK(overwritten != grads_after(false, true, 1));  // the second micro-batch added
      }
      Model m(c, Device::cpu(), DType::f64);
      m.init_weights(5);
      Tensor loss = Tensor::zeros({}, DType::f64);
      m.zero_grad();
      m.forward_backward(tokens, targets, 1.0 / (B * T), loss);
      m.zero_grad();  // and no backward: every gradient reads as zero
      for (double v : m.arenas().grads.to_vector()) REQUIRE(v == 0.0);
    }
}

TEST_CASE("model: bad inputs name what is wrong", "[model]") {
  ModelConfig c = small_model_config(Arch::kda);
  Model m(c, Device::cpu());
  Tensor loss = Tensor::zeros({});
  const Tensor tokens = random_ids(2, 8, c.vocab_size, 1);
  CHECK_THROWS_WITH(m.forward_backward(tokens, random_ids(2, 9, c.vocab_size, 2), 1.0, loss),
                    Catch::Contains("targets"));
  CHECK_THROWS_WITH(m.forward_backward(Tensor::zeros({2, 8}), tokens, 1.0, loss), Catch::Contains("tokens"));
  ModelConfig bad = c;
  bad.mixer_path = "fast";
  CHECK_THROWS_WITH(Model(bad, Device::cpu()), Catch::Contains("fast"));
  bad = c;
  bad.hidden_size = 0;
  CHECK_THROWS_WITH(Model(bad, Device::cpu()), Catch::Contains("hidden_size"));
}

TEST_CASE("model: parameters round-trip through safetensors under fla's names", "[model]") {
  const ModelConfig c = small_model_config(Arch::kda);
  Model a(c, Device::cpu());
  a.init_weights(77);
  const std::string path =
      (std::filesystem::temp_directory_path() / "lintrain_test_model_roundtrip.safetensors").string();
  lt::io::write_safetensors(path, a.named_params());
  Model b(c, Device::cpu());
  b.load_params(lt::io::read_safetensors(path));
  CHECK(b.arenas().params.to_vector() == a.arenas().params.to_vector());
  // A tensor of the wrong shape, and a missing tensor, are named.
  std::vector<lt::io::NamedTensor> bad = a.named_params();
  bad[3].tensor = Tensor::zeros({2, 2});
  lt::io::write_safetensors(path, bad);
  CHECK_THROWS_WITH(b.load_params(lt::io::read_safetensors(path)),
                    Catch::Contains(bad[3].name) && Catch::Contains("[2, 2]"));
  bad = a.named_params();
  const std::string gone = bad.back().name;
  bad.pop_back();
  lt::io::write_safetensors(path, bad);
  CHECK_THROWS_WITH(b.load_params(lt::io::read_safetensors(path)), Catch::Contains(gone));
  std::remove(path.c_str());
}

TEST_CASE("model: next-token logits agree with the evaluation loss at the last position", "[model]") {
  const ModelConfig c = small_model_config(Arch::kda);
  Model m(c, Device::cpu(), DType::f64);
  m.init_weights(31);
  lt::test::perturb_params(m, {.normal = 10.0});
  const int64_t B = 3, T = 9, V = c.vocab_size;
  const Tensor tokens = random_ids(B, T, V, 40);
  // Only the last position of each row has a target.
  std::vector<int64_t> tg(static_cast<size_t>(B * T), -100);
  const std::vector<int64_t> last_targets = {5, 17, 63};
  for (int64_t b = 0; b < B; ++b) tg[static_cast<size_t>(b * T + T - 1)] = last_targets[static_cast<size_t>(b)];
  const Tensor targets = Tensor::from_vector(tg, {B, T}, DType::i32);
  Tensor loss = Tensor::zeros({}, DType::f64);
  Tensor correct = Tensor::full({B * T}, 7, DType::i32);
  m.evaluate(tokens, targets, 1.0, loss, correct);
  const Tensor logits = m.next_token_logits(tokens);
  REQUIRE(logits.shape() == Shape{B, V});
  const std::vector<double> l = logits.to_vector();
  const std::vector<double> cor = correct.to_vector();
  double expect = 0;
  for (int64_t b = 0; b < B; ++b) {
    double mx = -INFINITY;
    int64_t arg = 0;
    for (int64_t v = 0; v < V; ++v)
      if (l[static_cast<size_t>(b * V + v)] > mx) mx = l[static_cast<size_t>(b * V + v)], arg = v;
    double se = 0;
    for (int64_t v = 0; v < V; ++v) se += std::exp(l[static_cast<size_t>(b * V + v)] - mx);
    expect += mx + std::log(se) - l[static_cast<size_t>(b * V + last_targets[static_cast<size_t>(b)])];
    CHECK(cor[static_cast<size_t>(b * T + T - 1)] == (arg == last_targets[static_cast<size_t>(b)] ? 1 : 0));
    CHECK(cor[static_cast<size_t>(b * T)] == -1);
  }
  CHECK(std::fabs(loss.item() - expect) < 1e-12 * expect);
}

TEST_CASE("model: the fused mixer path (its CPU twins) gives the ops path's step", "[model]") {
  // The path CUDA takes by default, run through the CPU twins of its kernels: same loss and
  // gradients as the ops path to fp32 rounding.
  ModelConfig c = small_model_config(Arch::kda);
  c.hidden_size = 64;
  c.num_heads = 1;
  c.head_dim = 64;              // the fused kernels' head size
  const int64_t B = 1, T = 24;  // chunk 16: a full chunk and a partial one
  const Tensor tokens = random_ids(B, T, c.vocab_size, 51);
  const Tensor targets = random_ids(B, T, c.vocab_size, 52, 2);
  std::vector<std::vector<double>> grads;
  std::vector<double> losses;
  for (const char* path : {"ops", "fused"}) {
    c.mixer_path = path;
    Model m(c, Device::cpu());
    m.init_weights(13);
    lt::test::perturb_params(m, {.normal = 10.0});
    Tensor loss = Tensor::zeros({});
    m.zero_grad();
    m.forward_backward(tokens, targets, 1.0 / (B * T - 2), loss);
    losses.push_back(loss.item());
    grads.push_back(m.arenas().grads.to_vector());
  }
  CHECK(std::fabs(losses[1] - losses[0]) < 1e-6 * std::fabs(losses[0]));
  double diff = 0, scale = 0;
  for (size_t i = 0; i < grads[0].size(); ++i) {
    diff = std::max(diff, std::fabs(grads[1][i] - grads[0][i]));
    scale = std::max(scale, std::fabs(grads[0][i]));
  }
  CHECK(scale > 0);
  CHECK(diff < 1e-4 * scale);  // measured 7.7e-6
}
