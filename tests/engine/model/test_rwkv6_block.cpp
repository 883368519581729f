// The RWKV6 block (engine/model/rwkv6_block.cpp) on the CPU: its parameter specs against
// fla's tiny state_dict listing (names in order, shapes, initialisations), and a float64
// central-difference check of dx and of every parameter's gradient, with every parameter
// drawn random and non-zero (mu, x_bias, bonus and lora.0 included, which fla initialises
// to 0), for layer 0 (pre_norm) and layer 1, through the ops path (chunk 8, 11 tokens: a
// partial second chunk) and the fused path's CPU twins (chunk 16, partial); gradients
// accumulate (+=) into g.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/blocks.h"
#include "engine/model/params.h"
#include "engine/ops.h"
#include "tests/engine/model/fla_state_dict_tiny.h"
#include "tests/support/gradcheck.h"

using lt::DType;
using lt::Shape;
using lt::Tensor;
using namespace lt::model;

namespace {

struct Listed {
  std::string name;  // relative to "model.layers.{layer}."
  Shape shape;
  double mean = 0, std = 0, min = 0, max = 0;
};

// The listing's rows of one layer of RWKV6ForCausalLM, in order.
std::vector<Listed> fla_rwkv6_layer(int layer) {
  std::istringstream in(lt::test::kFlaStateDictTiny);
  const std::string prefix = "model.layers." + std::to_string(layer) + ".";
  std::string line;
  std::vector<Listed> out;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.find(' ') == std::string::npos) {
      inside = line == "RWKV6ForCausalLM";
      continue;
    }
    if (!inside || line.rfind(prefix, 0) != 0) continue;
    Listed t;
    const size_t open = line.find('('), close = line.find(')');
    t.name = line.substr(prefix.size(), open - 1 - prefix.size());
    std::istringstream ds(line.substr(open + 1, close - open - 1));
    std::string tok;
    while (std::getline(ds, tok, ','))
      if (tok.find_first_not_of(' ') != std::string::npos) t.shape.push_back(std::stoll(tok));
    std::istringstream rest(line.substr(close + 1));
    std::string dtype;
    rest >> dtype >> t.mean >> t.std >> t.min >> t.max;
    out.push_back(t);
  }
  return out;
}

// fla's tiny RWKV6 model: d 256, 4 heads, expand_k 1/2 (head_dim 32), R 32, gate rank 64.
ModelConfig tiny_fla_config() {
  ModelConfig c;
  c.arch = Arch::rwkv6;
  c.vocab_size = 1000;
  c.hidden_size = 256;
  c.num_layers = 2;
  c.num_heads = 4;
  c.head_dim = 32;
  return c;
}

}  // namespace

TEST_CASE("rwkv6 block specs: fla's names, order, shapes and initialisations (tiny listing)", "[model][rwkv6]") {
  const ModelConfig cfg = tiny_fla_config();
  for (int layer = 0; layer < 2; ++layer) {
    const std::vector<ParamSpec> specs = rwkv6_block_specs(cfg, layer);
    const std::vector<Listed> listed = fla_rwkv6_layer(layer);
    REQUIRE(listed.size() == (layer == 0 ? 26u : 24u));
    REQUIRE(specs.size() == listed.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const ParamSpec& s = specs[i];
      const Listed& l = listed[i];
      INFO("layer " << layer << " " << l.name);
      CHECK(s.name == l.name);
      CHECK(s.shape == l.shape);
      // The listing's statistics pin the initialisation kind and scale.
      const int64_t rows = s.shape[0], cols = s.shape.size() > 1 ? s.shape[1] : 1;
      switch (s.init) {
        case Init::zeros: CHECK((l.min == 0 && l.max == 0)); break;
        case Init::ones: CHECK((l.min == 1 && l.max == 1)); break;
        case Init::normal: CHECK(std::abs(l.std - s.scale) < 0.01 * s.scale); break;
        case Init::xavier_uniform: {
          const double a = s.scale * std::sqrt(6.0 / static_cast<double>(rows + cols));
          CHECK(std::abs(l.max - a) < 1e-3 * a + 5e-6);
          CHECK(std::abs(-l.min - a) < 1e-3 * a + 5e-6);
          break;
        }
        case Init::orthogonal: {
          // scale * Q with orthonormal columns (rows >= cols): every entry has variance 1 / rows.
          const double sd = s.scale / std::sqrt(static_cast<double>(std::max(rows, cols)));
          CHECK(std::abs(l.std - sd) < 0.01 * sd);
          break;
        }
        default: FAIL("unexpected init kind for " << l.name);
      }
      // AdamW decays the GEMM weights only (2-D ".weight"; not x_bias, bonus).
      CHECK(s.decay == is_gemm_weight(s));
    }
  }
}

namespace {

// A block's parameters (random, non-zero), zero-free gradient buffers prefilled with a
// constant (so the check sees += rather than =), in float64 on the CPU.
struct BlockParams {
  ParamMap w, g;
  std::vector<ParamSpec> specs;
  static constexpr double kGradPrefill = 0.25;

  BlockParams(const ModelConfig& cfg, int layer, uint64_t seed) : specs(rwkv6_block_specs(cfg, layer)) {
    uint64_t off = 0;
    for (const ParamSpec& s : specs) {
      const double n = static_cast<double>(lt::shape_numel(s.shape));
      Tensor p = lt::ops::randn(s.shape, seed, off, DType::f64);
      off += static_cast<uint64_t>(n);
      // Scales that keep every nonlinearity in its working range: matmul weights ~ fan_in^-1/2,
      // norm weights around 1, the rest O(0.5).
      const bool is_norm_weight = s.name.find("norm.weight") != std::string::npos;
      double scale = 0.5;
      if (s.shape.size() == 2 && s.decay) scale = 0.7 / std::sqrt(static_cast<double>(s.shape[1]));
      p = p * scale;
      if (is_norm_weight) p = lt::ops::add_scalar(p, 1.0);
      w[s.name] = p.contiguous();
      g[s.name] = Tensor::full(s.shape, kGradPrefill, DType::f64);
    }
  }
};

ModelConfig grad_config(const std::string& path, int chunk) {
  ModelConfig c;
  c.arch = Arch::rwkv6;
  c.hidden_size = 32;
  c.num_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 48;
  c.rwkv6_proj_low_rank_dim = 4;
  c.rwkv6_gate_low_rank_dim = 8;
  c.mixer_path = path;
  c.chunk = chunk;
  return c;
}

void check_block_gradients(const ModelConfig& cfg, int layer, uint64_t seed) {
  const int64_t B = 2, T = 11, d = cfg.hidden_size;
  BlockParams bp(cfg, layer, seed);
  Tensor x = lt::ops::randn({B, T, d}, seed + 1, 0, DType::f64).contiguous();
  const Tensor wy = lt::ops::randn({B, T, d}, seed + 2, 0, DType::f64);
  const BlockContext ctx{cfg, layer, true};
  std::unique_ptr<BlockSaved> saved;
  const Tensor y = rwkv6_block_forward(ctx, bp.w, x, saved);
  REQUIRE(y.shape() == x.shape());
  REQUIRE(saved);
  const Tensor dx = rwkv6_block_backward(ctx, bp.w, bp.g, std::move(saved), wy);
  REQUIRE(dx.shape() == x.shape());

  auto loss = [&] {
    const BlockContext eval{cfg, layer, false};
    std::unique_ptr<BlockSaved> none;
    return lt::test::weighted_sum(rwkv6_block_forward(eval, bp.w, x, none), wy);
  };
  double worst = lt::test::gradcheck(x, dx, loss);
  std::printf("rwkv6 block %s C%d layer %d: dx %.2e\n", cfg.mixer_path.c_str(), cfg.chunk, layer, worst);
  CHECK(worst < 1e-6);
  for (const ParamSpec& s : bp.specs) {
    Tensor& p = bp.w.at(s.name);
    const Tensor analytic = lt::ops::add_scalar(bp.g.at(s.name), -BlockParams::kGradPrefill);
    // A gradient that is identically zero would pass any relative check: require signal.
    CHECK(lt::ops::max_abs_diff(analytic, Tensor::zeros(s.shape, DType::f64)) > 1e-8);
    const double err = lt::test::gradcheck(p, analytic, loss, 1e-6, 24);
    std::printf("  %-36s %.2e\n", s.name.c_str(), err);
    INFO(s.name);
    CHECK(err < 1e-6);
    worst = std::max(worst, err);
  }
  std::printf("rwkv6 block %s C%d layer %d: worst %.2e\n", cfg.mixer_path.c_str(), cfg.chunk, layer, worst);
}

}  // namespace

TEST_CASE("rwkv6 block gradients match finite differences (f64, ops path, chunk 8)", "[model][rwkv6]") {
  check_block_gradients(grad_config("ops", 8), 0, 101);
  check_block_gradients(grad_config("ops", 8), 1, 202);
}

TEST_CASE("rwkv6 block gradients match finite differences (f64, fused path's CPU twins, chunk 16)", "[model][rwkv6]") {
  check_block_gradients(grad_config("fused", 16), 0, 303);
}

TEST_CASE("rwkv6 block: auto path on the CPU is the ops path; eval keeps nothing; bad shapes throw", "[model][rwkv6]") {
  ModelConfig cfg = grad_config("auto", 16);
  BlockParams bp(cfg, 1, 7);
  const Tensor x = lt::ops::randn({1, 11, cfg.hidden_size}, 8, 0, DType::f64);
  std::unique_ptr<BlockSaved> saved;
  const Tensor y_auto = rwkv6_block_forward({cfg, 1, true}, bp.w, x, saved);
  CHECK(saved);
  cfg.mixer_path = "ops";
  std::unique_ptr<BlockSaved> none;
  const Tensor y_ops = rwkv6_block_forward({cfg, 1, false}, bp.w, x, none);
  CHECK_FALSE(none);
  CHECK(lt::ops::max_abs_diff(y_auto, y_ops) == 0.0);
  // The RWKV6 mixer needs head_dim * num_heads == hidden_size (fla's expand_k = 1).
  ModelConfig half = cfg;
  half.head_dim = 8;
  BlockParams hp(half, 1, 9);
  CHECK_THROWS_AS(rwkv6_block_forward({half, 1, true}, hp.w, x, saved), std::invalid_argument);
  CHECK_THROWS_AS(rwkv6_block_forward({cfg, 1, true}, bp.w, x.narrow(2, 0, 16), saved), std::invalid_argument);
  ParamMap missing = bp.w;
  missing.erase("attn.bonus");
  CHECK_THROWS_AS(rwkv6_block_forward({cfg, 1, true}, missing, x, saved), std::invalid_argument);
}
