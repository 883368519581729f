// The depth-2 model with RWKV6 blocks on the CPU: fla's names and shapes, initial values,
// float64 finite differences of every parameter's gradient (LayerNorm final norm included).
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/ops.h"
#include "tests/engine/model/fla_state_dict_tiny.h"
#include "tests/support/gradcheck.h"

using lt::Device;
using lt::DType;
using lt::Shape;
using lt::Tensor;
using namespace lt::model;

namespace {

struct Listed {
  std::string name;
  Shape shape;
  double mean = 0, std = 0, min = 0, max = 0;
};

std::vector<Listed> rwkv6_listing() {
  std::istringstream in(lt::test::kFlaStateDictTiny);
  std::string line;
  std::vector<Listed> out;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.find(' ') == std::string::npos) {
      inside = line == "RWKV6ForCausalLM";
      continue;
    }
    if (!inside) continue;
    Listed t;
    const size_t open = line.find('('), close = line.find(')');
    t.name = line.substr(0, open - 1);
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

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed, int ignored = 0) {
  const std::vector<double> u = lt::ops::rand({B * T}, seed, 0, DType::f64).to_vector();
  std::vector<int64_t> ids(u.size());
  for (size_t i = 0; i < u.size(); ++i)
    ids[i] = std::min<int64_t>(V - 1, static_cast<int64_t>(u[i] * static_cast<double>(V)));
  for (int i = 0; i < ignored; ++i) ids[(static_cast<size_t>(i) * 7 + 3) % ids.size()] = -100;
  return Tensor::from_vector(ids, {B, T}, DType::i32);
}

}  // namespace

TEST_CASE("model RWKV6: parameter names, shapes and initial values are fla's", "[model][rwkv6]") {
  ModelConfig c;
  c.arch = Arch::rwkv6;
  c.vocab_size = 1000;
  c.hidden_size = 256;
  c.num_layers = 2;
  c.num_heads = 4;
  c.head_dim = 32;  // fla's default expand_k = 1/2: key_dim 128
  Model m(c, Device::cpu());
  m.init_weights(9);
  const std::vector<Listed> listed = rwkv6_listing();
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
  ModelConfig c;
  c.arch = Arch::rwkv6;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 48;
  c.rwkv6_proj_low_rank_dim = 4;
  c.rwkv6_gate_low_rank_dim = 8;
  c.chunk = 16;
  Model m(c, Device::cpu(), DType::f64);
  m.init_weights(42);
  // fla's zeros (LoRA down-projections, mu, x_bias, bonus) and ones become random, the
  // small weights larger, so that every parameter carries signal.
  for (const ParamSpec& s : m.specs()) {
    Tensor p = m.param(s.name);
    if (s.init == Init::zeros || s.init == Init::ones)
      p.copy_(lt::ops::add(p, lt::ops::mul_scalar(lt::ops::randn(s.shape, 99 + p.numel(), 0, DType::f64), 0.3)));
    else p.copy_(lt::ops::mul_scalar(p, 6.0));
  }
  const int64_t B = 2, T = 20;
  const Tensor tokens = random_ids(B, T, c.vocab_size, 5);
  const Tensor targets = random_ids(B, T, c.vocab_size, 6, 3);
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
