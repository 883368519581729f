// Set-up shared by the model and block tests (tests/engine/model): fla's tiny state_dict listing
// parsed into rows, the model configurations the tests run (fla's tiny model, the small
// gradient-check model), random token ids, parameters moved off fla's initialisation so that
// every path carries signal, and random non-zero block parameters.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/blocks.h"
#include "engine/model/config.h"
#include "engine/model/model.h"
#include "engine/model/params.h"
#include "engine/ops.h"
#include "engine/tensor.h"
#include "tests/engine/model/fla_state_dict_tiny.h"

namespace lt::test {

// One row of the listing: name, shape and the initial values' statistics.
struct FlaListed {
  std::string name;
  Shape shape;
  double mean = 0, std = 0, min = 0, max = 0;
};

// The rows of one section of the listing ("KDAForCausalLM" / "RWKV6ForCausalLM") in order;
// with a prefix, only the rows whose names start with it, named relative to it.
inline std::vector<FlaListed> fla_listing(const std::string& section, const std::string& prefix = "") {
  std::istringstream in(kFlaStateDictTiny);
  std::string line;
  std::vector<FlaListed> out;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.find(' ') == std::string::npos) {
      inside = line == section;
      continue;
    }
    if (!inside || line.rfind(prefix, 0) != 0) continue;
    FlaListed t;
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

// fla's tiny models of the listing: d 256, 4 heads, vocabulary 1000; KDA head_dim 64, RWKV6
// head_dim 32 (fla's expand_k = 1/2: key_dim 128).
inline model::ModelConfig tiny_fla_config(model::Arch arch) {
  model::ModelConfig c;
  c.arch = arch;
  c.vocab_size = 1000;
  c.hidden_size = 256;
  c.num_layers = 2;
  c.num_heads = 4;
  c.head_dim = arch == model::Arch::kda ? 64 : 32;
  return c;
}

// The gradient-check model: small enough that a loss evaluation takes about a millisecond
// (d 32, 2 heads of 16, vocabulary 64, FFN 48, chunk 16; RWKV6 LoRA ranks 4 and 8).
inline model::ModelConfig small_model_config(model::Arch arch) {
  model::ModelConfig c;
  c.arch = arch;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 48;
  c.chunk = 16;
  if (arch == model::Arch::rwkv6) {
    c.rwkv6_proj_low_rank_dim = 4;
    c.rwkv6_gate_low_rank_dim = 8;
  }
  return c;
}

// Token ids [B, T] (i32) uniform in [0, V); `ignored` positions set to -100 (targets).
inline Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed, int ignored = 0) {
  const std::vector<double> u = ops::rand({B * T}, seed, 0, DType::f64).to_vector();
  std::vector<int64_t> ids(u.size());
  for (size_t i = 0; i < u.size(); ++i)
    ids[i] = std::min<int64_t>(V - 1, static_cast<int64_t>(u[i] * static_cast<double>(V)));
  for (int i = 0; i < ignored; ++i) ids[(static_cast<size_t>(i) * 7 + 3) % ids.size()] = -100;
  return Tensor::from_vector(ids, {B, T}, DType::i32);
}

// How perturb_params moves parameters off fla's initialisation. fla's N(0, 0.02) weights make
// the blocks nearly the identity (inner gradients tiny), and its zeros and ones (LoRA
// down-projections, mu, biases, bonus, norm weights) leave terms without signal.
struct Perturbation {
  double normal = 1;             // factor on Init::normal parameters
  double xavier_orthogonal = 1;  // factor on Init::xavier_uniform and Init::orthogonal ones
  double constant_noise = 0;     // standard deviation of the noise added to Init::zeros / ones
  uint64_t noise_seed = 99;      // a tensor of n elements gets the stream noise_seed + n
};

inline void perturb_params(model::Model& m, const Perturbation& how) {
  using model::Init;
  for (const model::ParamSpec& s : m.specs()) {
    Tensor p = m.param(s.name);
    double factor = 1;
    if (s.init == Init::normal) factor = how.normal;
    if (s.init == Init::xavier_uniform || s.init == Init::orthogonal) factor = how.xavier_orthogonal;
    if (factor != 1) p.copy_(ops::mul_scalar(p, factor));
    if ((s.init == Init::zeros || s.init == Init::ones) && how.constant_noise != 0) {
      const Tensor noise =
          ops::randn(s.shape, how.noise_seed + static_cast<uint64_t>(p.numel()), 0, p.dtype()).to(p.device());
      p.copy_(ops::add(p, ops::mul_scalar(noise, how.constant_noise)));
    }
  }
}

// Random non-zero parameters of one block in float64 on the CPU (consecutive streams of
// `seed`), with scales that keep every nonlinearity in its working range: GEMM weights
// N(0, 0.49 / fan_in), norm weights 1 + N(0, 0.25), the rest N(0, 0.25).
inline model::ParamMap random_block_params(const std::vector<model::ParamSpec>& specs, uint64_t seed) {
  model::ParamMap w;
  uint64_t off = 0;
  for (const model::ParamSpec& s : specs) {
    Tensor p = ops::randn(s.shape, seed, off, DType::f64);
    off += static_cast<uint64_t>(shape_numel(s.shape));
    p = p * (model::is_gemm_weight(s) ? 0.7 / std::sqrt(static_cast<double>(s.shape[1])) : 0.5);
    if (s.name.find("norm.weight") != std::string::npos) p = ops::add_scalar(p, 1.0);
    w[s.name] = p.contiguous();
  }
  return w;
}

}  // namespace lt::test
