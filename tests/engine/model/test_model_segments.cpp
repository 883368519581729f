// Packed documents through the whole model (engine/mixers/segments.h): a batch whose rows
// hold several documents gives the loss and every parameter gradient that the documents give
// run one by one, for both architectures (short convolutions, token shifts and mixers all
// restart at each document) and on each CPU path of the mixers.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/mixers/segments.h"
#include "engine/model/model.h"
#include "engine/ops.h"
#include "tests/support/gradcheck.h"
#include "tests/support/model_testing.h"

using lt::Device;
using lt::DType;
using lt::Tensor;
using namespace lt::model;

namespace {

// Rows of T tokens; the documents of row b start at starts[b] (0 first). The packed batch's
// targets drop each document's last target (the next document's first token), as the loader
// does; the documents run alone with the same targets.
struct Packed {
  int64_t B = 2, T = 41;
  std::vector<std::vector<int64_t>> starts = {{0, 7, 8, 23, 40}, {0, 19}};  // a 1-token document each
  std::vector<double> tok, tgt;
  std::vector<uint8_t> flags;
  double inv = 0;
  explicit Packed(int64_t vocab) {
    tok = lt::test::random_ids(B, T, vocab, 11).to_vector();
    tgt = lt::test::random_ids(B, T, vocab, 12).to_vector();
    flags.assign(static_cast<size_t>(B * T), 0);
    int64_t valid = B * T;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s : starts[b]) {
        flags[b * T + s] = 1;
        if (s > 0) tgt[b * T + s - 1] = -100, --valid;
      }
    inv = 1.0 / static_cast<double>(valid);
  }
};

struct StepResult {
  double loss = 0;
  std::vector<std::vector<double>> grads;  // per parameter spec
};

// One step over the packed rows (documents restarting), or over the documents one by one.
StepResult run_packed(Model& m, const Packed& pk, DType ldt) {
  m.zero_grad();
  Tensor loss = Tensor::zeros({}, ldt);
  const lt::mixers::Segments seg(pk.flags, pk.B, pk.T, Device::cpu());
  REQUIRE(seg.any());
  m.forward_backward(Tensor::from_vector(pk.tok, {pk.B, pk.T}, DType::i32),
                     Tensor::from_vector(pk.tgt, {pk.B, pk.T}, DType::i32), pk.inv, loss, nullptr, &seg);
  StepResult r{loss.item(), {}};
  for (const ParamSpec& s : m.specs()) r.grads.push_back(m.grad(s.name).to_vector());
  return r;
}
StepResult run_documents(Model& m, const Packed& pk, DType ldt) {
  m.zero_grad();
  Tensor loss = Tensor::zeros({}, ldt);
  for (int64_t b = 0; b < pk.B; ++b)
    for (size_t i = 0; i < pk.starts[b].size(); ++i) {
      const int64_t t0 = pk.starts[b][i], t1 = i + 1 < pk.starts[b].size() ? pk.starts[b][i + 1] : pk.T;
      const std::vector<double> dt(pk.tok.begin() + b * pk.T + t0, pk.tok.begin() + b * pk.T + t1);
      const std::vector<double> dg(pk.tgt.begin() + b * pk.T + t0, pk.tgt.begin() + b * pk.T + t1);
      m.forward_backward(Tensor::from_vector(dt, {1, t1 - t0}, DType::i32),
                         Tensor::from_vector(dg, {1, t1 - t0}, DType::i32), pk.inv, loss);
    }
  StepResult r{loss.item(), {}};
  for (const ParamSpec& s : m.specs()) r.grads.push_back(m.grad(s.name).to_vector());
  return r;
}

// Worst over parameters of max |x - ref| / max |ref| (every reference gradient non-zero).
double worst_rel(const Model& m, const StepResult& x, const StepResult& ref, double tol) {
  double worst = 0;
  for (size_t a = 0; a < ref.grads.size(); ++a) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < ref.grads[a].size(); ++i) {
      diff = std::max(diff, std::fabs(x.grads[a][i] - ref.grads[a][i]));
      scale = std::max(scale, std::fabs(ref.grads[a][i]));
    }
    INFO(m.specs()[a].name << ": max diff " << diff << ", max |g| " << scale);
    CHECK(scale > 0);
    CHECK(diff <= tol * scale);
    worst = std::max(worst, scale > 0 ? diff / scale : 0.0);
  }
  return worst;
}

ModelConfig packed_config(Arch arch, const std::string& path) {
  ModelConfig c = lt::test::small_model_config(arch);
  c.mixer_path = path;
  if (arch == Arch::kda && path == "fused") {  // the KDA twins take head dim 64 or 128
    c.hidden_size = 128;
    c.head_dim = 64;
  }
  return c;
}

}  // namespace

TEST_CASE("model with packed documents: loss and gradients equal the documents run one by one (f64, ops)",
          "[model][segments]") {
  for (Arch arch : {Arch::kda, Arch::rwkv6})
    for (int chunk : {16, 8}) {  // chunk 8: documents across more chunk boundaries
      ModelConfig c = packed_config(arch, "ops");
      c.chunk = chunk;
      Model m(c, Device::cpu(), DType::f64);
      m.init_weights(7);
      lt::test::perturb_params(m, {.normal = 8.0, .constant_noise = 0.2});
      const Packed pk(c.vocab_size);
      const StepResult packed = run_packed(m, pk, DType::f64), docs = run_documents(m, pk, DType::f64);
      std::printf("[segments] model %s f64 ops chunk %d: loss packed %.15g, documents %.15g\n", arch_name(arch), chunk,
                  packed.loss, docs.loss);
      CHECK(std::fabs(packed.loss - docs.loss) <= 1e-12 * std::fabs(docs.loss));
      const double worst = worst_rel(m, packed, docs, 1e-10);
      std::printf("[segments]   worst gradient difference %.2e of its parameter's largest\n", worst);
    }
}

TEST_CASE("model with packed documents: the fused mixers' CPU twins (f32) against float64, as fla_equivalence gates",
          "[model][segments]") {
  // The float64 ops model with the same weights is the truth (it equals the documents run one
  // by one, above); the gates are the fla equivalence's (loss 1e-5, gradients 1e-4 of each
  // parameter's largest). The documents run alone in f32 print the f32 floor beside.
  for (Arch arch : {Arch::kda, Arch::rwkv6}) {
    const ModelConfig c = packed_config(arch, "fused");
    Model m(c, Device::cpu(), DType::f32);
    m.init_weights(7);
    lt::test::perturb_params(m, {.normal = 8.0, .constant_noise = 0.2});
    ModelConfig c64 = c;
    c64.mixer_path = "ops";
    Model ref(c64, Device::cpu(), DType::f64);
    for (const ParamSpec& s : m.specs()) ref.param(s.name).copy_(m.param(s.name));
    const Packed pk(c.vocab_size);
    const StepResult truth = run_packed(ref, pk, DType::f64);
    const StepResult packed = run_packed(m, pk, DType::f32), docs = run_documents(m, pk, DType::f32);
    CHECK(std::fabs(packed.loss - truth.loss) <= 1e-5 * std::fabs(truth.loss));
    const double worst = worst_rel(m, packed, truth, 1e-4);
    double floor = 0;
    {
      INFO("the documents run one by one in f32 (the floor)");
      floor = worst_rel(m, docs, truth, 1e-4);
    }
    std::printf(
        "[segments] model %s f32 fused (CPU twins): worst gradient error against f64 %.2e packed, %.2e "
        "documents one by one; loss %.9g / %.9g / f64 %.12g\n",
        arch_name(arch), worst, floor, packed.loss, docs.loss, truth.loss);
  }
}

TEST_CASE("model with packed documents: float64 finite differences of the packed loss match every gradient",
          "[model][segments][gradcheck]") {
  for (Arch arch : {Arch::kda, Arch::rwkv6}) {
    const ModelConfig c = packed_config(arch, "ops");
    Model m(c, Device::cpu(), DType::f64);
    m.init_weights(9);
    // the gates of the model gradchecks (test_model.cpp, test_model_rwkv6.cpp)
    if (arch == Arch::kda) lt::test::perturb_params(m, {.normal = 10.0, .constant_noise = 0.3});
    else lt::test::perturb_params(m, {.normal = 6.0, .xavier_orthogonal = 6.0, .constant_noise = 0.3});
    const double gate = arch == Arch::kda ? 1e-7 : 1e-6;
    const Packed pk(c.vocab_size);
    const lt::mixers::Segments seg(pk.flags, pk.B, pk.T, Device::cpu());
    const Tensor tokens = Tensor::from_vector(pk.tok, {pk.B, pk.T}, DType::i32);
    const Tensor targets = Tensor::from_vector(pk.tgt, {pk.B, pk.T}, DType::i32);
    m.zero_grad();
    Tensor loss = Tensor::zeros({}, DType::f64);
    m.forward_backward(tokens, targets, pk.inv, loss, nullptr, &seg);
    auto loss_of = [&] {
      Tensor l = Tensor::zeros({}, DType::f64);
      m.evaluate(tokens, targets, pk.inv, l, Tensor(), &seg);
      return l.item();
    };
    CHECK(std::fabs(loss_of() - loss.item()) < 1e-12 * std::fabs(loss.item()));
    double worst = 0;
    for (const ParamSpec& s : m.specs()) {
      INFO(arch_name(arch) << " " << s.name);
      Tensor p = m.param(s.name);
      const double err = lt::test::gradcheck(p, m.grad(s.name), loss_of, 1e-5, 6);
      CHECK(err < gate);
      worst = std::max(worst, err);
    }
    std::printf("[segments] model %s packed: finite differences, worst relative error %.2e\n", arch_name(arch), worst);
  }
}
