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
#include "tests/support/model_testing.h"

using lt::Device;
using lt::DType;
using lt::Tensor;
using namespace lt::model;

namespace {

struct PackedCase {
  ModelConfig cfg;
  DType dtype;  // parameter dtype
  double tol;   // on the loss and on max |g_packed - g_docs| / max |g_docs| per parameter
};

// Rows of T tokens; the documents of row b start at starts[b] (0 first). The packed batch's
// targets drop each document's last target (the next document's first token), as the loader
// does; the documents run alone with the same targets.
void check_packed_model(const PackedCase& pc) {
  const ModelConfig& c = pc.cfg;
  const int64_t B = 2, T = 41;
  const std::vector<std::vector<int64_t>> starts = {{0, 7, 8, 23, 40}, {0, 19}};  // a 1-token document each
  Model m(c, Device::cpu(), pc.dtype);
  m.init_weights(7);
  lt::test::perturb_params(m, {.normal = 8.0, .constant_noise = 0.2});
  const std::vector<double> tok = lt::test::random_ids(B, T, c.vocab_size, 11).to_vector();
  std::vector<double> tgt = lt::test::random_ids(B, T, c.vocab_size, 12).to_vector();
  std::vector<uint8_t> flags(static_cast<size_t>(B * T), 0);
  int64_t valid = B * T;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s : starts[b]) {
      flags[b * T + s] = 1;
      if (s > 0) tgt[b * T + s - 1] = -100, --valid;
    }
  const double inv = 1.0 / static_cast<double>(valid);
  const DType ldt = pc.dtype;

  m.zero_grad();
  Tensor packed_loss = Tensor::zeros({}, ldt);
  const lt::mixers::Segments seg(flags, B, T, Device::cpu());
  REQUIRE(seg.any());
  m.forward_backward(Tensor::from_vector(tok, {B, T}, DType::i32), Tensor::from_vector(tgt, {B, T}, DType::i32), inv,
                     packed_loss, nullptr, &seg);
  std::vector<std::vector<double>> packed;
  for (const ParamSpec& s : m.specs()) packed.push_back(m.grad(s.name).to_vector());

  m.zero_grad();
  Tensor doc_loss = Tensor::zeros({}, ldt);
  for (int64_t b = 0; b < B; ++b)
    for (size_t i = 0; i < starts[b].size(); ++i) {
      const int64_t t0 = starts[b][i], t1 = i + 1 < starts[b].size() ? starts[b][i + 1] : T;
      const std::vector<double> dt(tok.begin() + b * T + t0, tok.begin() + b * T + t1);
      const std::vector<double> dg(tgt.begin() + b * T + t0, tgt.begin() + b * T + t1);
      m.forward_backward(Tensor::from_vector(dt, {1, t1 - t0}, DType::i32),
                         Tensor::from_vector(dg, {1, t1 - t0}, DType::i32), inv, doc_loss);
    }
  const double lp = packed_loss.item(), ld = doc_loss.item();
  std::printf("[segments] model %s %s path %s: loss packed %.12g, documents %.12g\n", arch_name(c.arch),
              lt::dtype_name(pc.dtype), c.mixer_path.c_str(), lp, ld);
  CHECK(std::fabs(lp - ld) <= pc.tol * std::fabs(ld));
  double worst = 0;
  for (size_t a = 0; a < m.specs().size(); ++a) {
    const std::vector<double> g = m.grad(m.specs()[a].name).to_vector();
    double diff = 0, scale = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      diff = std::max(diff, std::fabs(packed[a][i] - g[i]));
      scale = std::max(scale, std::fabs(g[i]));
    }
    INFO(m.specs()[a].name << ": max diff " << diff << ", max |g| " << scale);
    CHECK(scale > 0);
    CHECK(diff <= pc.tol * scale);
    worst = std::max(worst, scale > 0 ? diff / scale : 0.0);
  }
  std::printf("[segments]   worst gradient difference %.2e of its parameter's largest\n", worst);
}

}  // namespace

TEST_CASE("model with packed documents: loss and gradients equal the documents run one by one (f64, ops)",
          "[model][segments]") {
  for (Arch arch : {Arch::kda, Arch::rwkv6}) {
    PackedCase pc{lt::test::small_model_config(arch), DType::f64, 1e-10};
    pc.cfg.mixer_path = "ops";
    check_packed_model(pc);
    pc.cfg.chunk = 8;  // documents across more chunk boundaries
    check_packed_model(pc);
  }
}

TEST_CASE("model with packed documents: the fused mixers' CPU twins (f32)", "[model][segments]") {
  for (Arch arch : {Arch::kda, Arch::rwkv6}) {
    PackedCase pc{lt::test::small_model_config(arch), DType::f32, 2e-5};
    if (arch == Arch::kda) {  // the KDA twins take head dim 64 or 128
      pc.cfg.hidden_size = 128;
      pc.cfg.head_dim = 64;
    }
    pc.cfg.mixer_path = "fused";
    check_packed_model(pc);
  }
}
