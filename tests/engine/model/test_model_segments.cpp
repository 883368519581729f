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
#include "tests/support/segments_testing.h"

using lt::Device;
using lt::DType;
using lt::Tensor;
using namespace lt::model;

using lt::test::PackedBatch;
using lt::test::run_documents;
using lt::test::run_packed;
using lt::test::StepResult;
using lt::test::worst_rel;

namespace {

// Row 0: documents at 0, 7, 8 (one token), 23, 40 (one token); row 1: at 0 and 19. T = 41.
PackedBatch packed_batch(int64_t vocab) { return PackedBatch(41, {{0, 7, 8, 23, 40}, {0, 19}}, vocab); }

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
      const PackedBatch pk = packed_batch(c.vocab_size);
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
    const PackedBatch pk = packed_batch(c.vocab_size);
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
    const PackedBatch pk = packed_batch(c.vocab_size);
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
