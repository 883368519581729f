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
#include <string>
#include <vector>

#include "engine/model/blocks.h"
#include "engine/model/params.h"
#include "engine/ops.h"
#include "tests/support/gradcheck.h"
#include "tests/support/model_testing.h"

using lt::DType;
using lt::Shape;
using lt::Tensor;
using namespace lt::model;

TEST_CASE("rwkv6 block specs: fla's names, order, shapes and initialisations (tiny listing)", "[model][rwkv6]") {
  const ModelConfig cfg = lt::test::tiny_fla_config(Arch::rwkv6);
  for (int layer = 0; layer < 2; ++layer) {
    const std::vector<ParamSpec> specs = rwkv6_block_specs(cfg, layer);
    const std::vector<lt::test::FlaListed> listed =
        lt::test::fla_listing("RWKV6ForCausalLM", "model.layers." + std::to_string(layer) + ".");
    REQUIRE(listed.size() == (layer == 0 ? 26u : 24u));
    REQUIRE(specs.size() == listed.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const ParamSpec& s = specs[i];
      const lt::test::FlaListed& l = listed[i];
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

// A block's parameters (random, non-zero: lt::test::random_block_params) and gradient
// buffers prefilled with a constant (so the check sees += rather than =), in float64 on the CPU.
struct BlockParams {
  ParamMap w, g;
  std::vector<ParamSpec> specs;
  static constexpr double kGradPrefill = 0.25;

  BlockParams(const ModelConfig& cfg, int layer, uint64_t seed)
      : w(lt::test::random_block_params(rwkv6_block_specs(cfg, layer), seed)), specs(rwkv6_block_specs(cfg, layer)) {
    for (const ParamSpec& s : specs) g[s.name] = Tensor::full(s.shape, kGradPrefill, DType::f64);
  }
};

ModelConfig grad_config(const std::string& path, int chunk) {
  ModelConfig c = lt::test::small_model_config(Arch::rwkv6);
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
