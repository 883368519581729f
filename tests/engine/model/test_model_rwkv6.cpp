// The depth-2 model with RWKV6 blocks on the CPU: fla's names and shapes, initial values,
// float64 finite differences of every parameter's gradient (LayerNorm final norm included).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/ops.h"
#include "tests/support/gradcheck.h"
#include "tests/support/model_testing.h"

using lt::Device;
using lt::DType;
using lt::Shape;
using lt::Tensor;
using namespace lt::model;

TEST_CASE("model RWKV6: parameter names, shapes and initial values are fla's", "[model][rwkv6]") {
  Model m(lt::test::tiny_fla_config(Arch::rwkv6), Device::cpu());  // head_dim 32: fla's default expand_k = 1/2
  m.init_weights(9);
  const std::vector<lt::test::FlaListed> listed = lt::test::fla_listing("RWKV6ForCausalLM");
  const std::vector<lt::io::NamedTensor> ours = m.named_params();
  REQUIRE(listed.size() == 54);
  REQUIRE(ours.size() == listed.size());
  for (size_t i = 0; i < listed.size(); ++i) {
    INFO(listed[i].name);
    CHECK(ours[i].name == listed[i].name);
    CHECK(ours[i].tensor.shape() == listed[i].shape);
    const std::vector<double> v = ours[i].tensor.to_vector();
    double lo = v[0], hi = v[0], s = 0, s2 = 0;
    for (double x : v) lo = std::min(lo, x), hi = std::max(hi, x), s += x, s2 += x * x;
    const double n = static_cast<double>(v.size()), mean = s / n, sd = std::sqrt(std::max(0.0, s2 / n - mean * mean));
    if (listed[i].std == 0.0) {
      CHECK(lo == listed[i].min);
      CHECK(hi == listed[i].max);
    } else {
      // uniform / orthogonal / normal: the spread within 10% of fla's, the range inside fla's bound
      CHECK(std::fabs(sd - listed[i].std) < 0.1 * listed[i].std);
      CHECK(std::fabs(mean) < 6 * listed[i].std / std::sqrt(n));
    }
  }
  const nlohmann::json j = m.fla_config();
  CHECK(j["model_type"] == "rwkv6");
  CHECK(j["expand_k"] == 0.5);
  CHECK(j["intermediate_size"] == 896);
}

TEST_CASE("model RWKV6: float64 finite differences of the loss match every parameter gradient",
          "[model][rwkv6][gradcheck]") {
  const ModelConfig c = lt::test::small_model_config(Arch::rwkv6);
  Model m(c, Device::cpu(), DType::f64);
  m.init_weights(42);
  // fla's zeros (LoRA down-projections, mu, x_bias, bonus) and ones become random, the
  // small weights larger, so that every parameter carries signal.
  lt::test::perturb_params(m, {.normal = 6.0, .xavier_orthogonal = 6.0, .constant_noise = 0.3});
  const int64_t B = 2, T = 20;
  const Tensor tokens = lt::test::random_ids(B, T, c.vocab_size, 5);
  const Tensor targets = lt::test::random_ids(B, T, c.vocab_size, 6, 3);
  const double inv_count = 1.0 / static_cast<double>(B * T - 3);
  m.zero_grad();
  Tensor loss = Tensor::zeros({}, DType::f64);
  m.forward_backward(tokens, targets, inv_count, loss);
  auto loss_of = [&] {
    Tensor l = Tensor::zeros({}, DType::f64);
    m.evaluate(tokens, targets, inv_count, l);
    return l.item();
  };
  CHECK(std::fabs(loss_of() - loss.item()) < 1e-12 * std::fabs(loss.item()));
  for (const ParamSpec& s : m.specs()) {
    INFO(s.name);
    Tensor p = m.param(s.name);
    const Tensor g = m.grad(s.name);
    CHECK(lt::ops::max_abs_diff(g, Tensor::zeros(s.shape, DType::f64)) > 1e-8);
    // worst measured 1.0e-7 (layer 1 receptance: its small gradient against the differences' round-off)
    CHECK(lt::test::gradcheck(p, g, loss_of, 1e-5, 12) < 1e-6);
  }
}
