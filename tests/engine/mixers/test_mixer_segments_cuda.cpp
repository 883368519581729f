// Packed documents on CUDA: the fused KDA and RWKV6 kernels with chunk resets (every scan form:
// SIMT / tensor cores, V-split and lean / full inter adjoints, RWKV6's tensor-core and SIMT
// scans, both backwards) against the float64 naive recurrence with the same segment starts,
// on NaN-poisoned allocations; and the whole model with packed rows against its documents run
// one by one. Fresh random inputs each run (LINTRAIN_TEST_SEED=<n> replays one).
#include <catch2/catch.hpp>

#include <cstdio>
#include <random>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/mixers/kda.h"
#include "engine/mixers/rwkv6.h"
#include "engine/mixers/segments.h"
#include "engine/model/model.h"
#include "engine/ops.h"
#include "tests/kernels/rwkv6_test_util.h"
#include "tests/support/kda_testing.h"
#include "tests/support/model_testing.h"
#include "tests/support/test_seed.h"

using namespace lt;

namespace {

// [B, NT] chunk flags: resets at random chunks (chunk 0 among them) in every row but the last.
std::vector<int32_t> random_resets(int64_t B, int64_t NT, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> f(static_cast<size_t>(B * NT), 0);
  for (int64_t b = 0; b + 1 < B; ++b)
    for (int64_t n = 0; n < NT; ++n) f[b * NT + n] = rng() % 3 == 0 ? 1 : 0;
  if (B > 1) f[0] = 1, f[NT - 1] = 1;
  return f;
}

// [B, T] token starts for KDA (any position): t = 0 in every other row, two adjacent starts,
// a start on the last token, the rest random (on and off chunk boundaries); the last row has
// none. Drawn from `seed`.
std::vector<uint8_t> random_starts(int64_t B, int64_t T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> f(static_cast<size_t>(B * T), 0);
  for (int64_t b = 0; b + 1 < B; ++b) {
    for (int64_t t = 0; t < T; ++t) f[b * T + t] = rng() % 23 == 0 ? 1 : 0;
    f[b * T] = b % 2 == 0 ? 1 : 0;
    f[b * T + T - 1] = 1;
    f[b * T + T / 3] = f[b * T + T / 3 + 1] = 1;
  }
  return f;
}

}  // namespace

TEST_CASE("KDA on CUDA with chunk resets: every scan form against the naive recurrence", "[kda][cuda][segments]") {
  using namespace lt::kda;
  using namespace lt::kda::testing;
  alloc::cuda_allocator(0).set_poison(true);
  const uint64_t seed = test_seed() + 81;
  struct Row {
    Dims d;
    DType dt;
    int split;
    LeanScan lean;
  };
  const std::vector<Row> rows = {
      {{3, 300, 4, 64, 32}, DType::bf16, 0, LeanScan::pick}, {{3, 300, 4, 64, 16}, DType::f32, 0, LeanScan::pick},
      {{2, 260, 2, 128, 64}, DType::f32, 0, LeanScan::full}, {{2, 260, 2, 128, 32}, DType::bf16, 0, LeanScan::lean},
      {{2, 256, 2, 64, 64}, DType::bf16, 4, LeanScan::pick}, {{2, 256, 2, 128, 64}, DType::f32, 4, LeanScan::pick},
      {{3, 200, 2, 64, 32}, DType::f32, 0, LeanScan::full},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    Case c = make_case(r.d, true, true, false, r.dt);
    c.split = r.split;
    c.lean = r.lean;
    c.seg_start = random_starts(r.d.B, r.d.T, seed + 100 + i);
    const Data x = make_data(c, seed + i);
    const Result ref = run_naive(c, x);
    TensorCase t = to_tensors(c, x, c.dtype, Device::cuda(0));
    const Result got = run_mixer(c, t, mixers::KdaPath::fused);
    const GatedReport g =
        gate_against_reference("cuda packed", c, got, ref, compare(run_naive_f32(c, x), ref, false, true, true));
    INFO(c.name() << " seed " << seed + i << g.report.str() << g.gated.adapted << replay_hint());
    CHECK(g.gated.pass);
  }
}

TEST_CASE("RWKV6 on CUDA with chunk resets: SIMT and tensor-core scans, both backwards, against the naive recurrence",
          "[rwkv6][cuda][segments]") {
  using namespace lt::rwkv6;
  using namespace lt::rwkv6::test;
  alloc::cuda_allocator(0).set_poison(true);
  const uint64_t seed = lt::testing::test_seed() + 82;
  struct Row {
    Dims d;
    DType dt;
  };
  const std::vector<Row> rows = {{{3, 300, 2, 64, 64}, DType::f32},
                                 {{3, 300, 2, 64, 64}, DType::bf16},
                                 {{2, 250, 2, 128, 32}, DType::bf16},
                                 {{2, 250, 2, 64, 16}, DType::bf16}};
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const Dims& d = r.d;
    const bool bf = r.dt == DType::bf16;
    Problem p(d, seed + i, GateKind::kLogSigmoid, true, true);
    if (bf) p.round_to_bf16();
    const std::vector<int32_t> resets = random_resets(d.B, d.NT(), seed + 200 + i);
    p.seg_start.assign(static_cast<size_t>(d.B * d.T), 0);
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t n = 0; n < d.NT(); ++n)
        if (resets[b * d.NT() + n]) p.seg_start[b * d.T + n * d.C] = 1;
    const Grads ref = naive_reference(p);
    const Device dev = Device::cuda(0);
    const Shape tok{d.B, d.T, d.H, d.D}, st{d.B, d.H, d.D, d.D};
    const mixers::Rwkv6Inputs in{
        Tensor::from_vector(p.r, tok, r.dt, dev),
        Tensor::from_vector(p.k, tok, r.dt, dev),
        Tensor::from_vector(p.v, tok, r.dt, dev),
        Tensor::from_vector(p.w, tok, r.dt, dev),
        Tensor::from_vector(p.u, {d.H, d.D}, DType::f32, dev),
        Tensor::from_vector(p.h0, st, DType::f32, dev),
        Tensor::from_vector(std::vector<double>(resets.begin(), resets.end()), {d.B, d.NT()}, DType::i32, dev)};
    for (BwdImpl impl : {BwdImpl::fused, BwdImpl::fallback}) {
      mixers::Rwkv6Config cfg;
      cfg.chunk = static_cast<int>(d.C);
      cfg.scale = p.scale;
      cfg.backward = impl;
      cfg.output_final_state = true;
      auto out = mixers::rwkv6_forward(in, cfg);
      auto g = mixers::rwkv6_backward(std::move(out.saved), Tensor::from_vector(p.dO, tok, r.dt, dev),
                                      Tensor::from_vector(p.dht, st, DType::f32, dev));
      const double e[8] = {rel_err_l2(out.o.to_vector(), ref.o), rel_err_l2(out.ht.to_vector(), ref.ht),
                           rel_err_l2(g.dr.to_vector(), ref.dr), rel_err_l2(g.dk.to_vector(), ref.dk),
                           rel_err_l2(g.dv.to_vector(), ref.dv), rel_err_l2(g.dw.to_vector(), ref.dw),
                           rel_err_l2(g.du.to_vector(), ref.du), rel_err_l2(g.dh0.to_vector(), ref.dh0)};
      double worst = 0;
      for (double x : e) worst = std::max(worst, x);
      std::printf("[rwkv6] cuda packed %s D%lld C%lld backward %-8s worst rel err %.2e (dh0 %.2e)\n",
                  bf ? "bf16" : "fp32", (long long)d.D, (long long)d.C, bwd_impl_name(impl), worst, e[7]);
      INFO("seed " << seed + i << lt::testing::replay_hint());
      CHECK(worst < (bf ? 1e-2 : 1e-5));
    }
  }
}

TEST_CASE("model on CUDA with packed documents: loss and gradients equal the documents run one by one",
          "[model][cuda][segments]") {
  using namespace lt::model;
  for (Arch arch : {Arch::kda, Arch::rwkv6}) {
    ModelConfig c = lt::test::small_model_config(arch);
    c.hidden_size = 128;
    c.head_dim = 64;  // the fused kernels' head dims
    c.chunk = 16;
    const int64_t B = 2, T = 70;
    const std::vector<std::vector<int64_t>> starts = {{0, 9, 10, 33, 69}, {0, 40}};
    Model m(c, Device::cuda(0), DType::f32);
    m.init_weights(3);
    lt::test::perturb_params(m, {.normal = 8.0, .constant_noise = 0.2});
    const std::vector<double> tok = lt::test::random_ids(B, T, c.vocab_size, 21).to_vector();
    std::vector<double> tgt = lt::test::random_ids(B, T, c.vocab_size, 22).to_vector();
    std::vector<uint8_t> flags(static_cast<size_t>(B * T), 0);
    int64_t valid = B * T;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s : starts[b]) {
        flags[b * T + s] = 1;
        if (s > 0) tgt[b * T + s - 1] = -100, --valid;
      }
    const double inv = 1.0 / static_cast<double>(valid);
    const Device dev = Device::cuda(0);
    m.zero_grad();
    Tensor lp = Tensor::zeros({}, DType::f32, dev);
    const mixers::Segments seg(flags, B, T, dev);
    m.forward_backward(Tensor::from_vector(tok, {B, T}, DType::i32, dev),
                       Tensor::from_vector(tgt, {B, T}, DType::i32, dev), inv, lp, nullptr, &seg);
    std::vector<std::vector<double>> packed;
    for (const ParamSpec& s : m.specs()) packed.push_back(m.grad(s.name).to_vector());
    m.zero_grad();
    Tensor ld = Tensor::zeros({}, DType::f32, dev);
    for (int64_t b = 0; b < B; ++b)
      for (size_t i = 0; i < starts[b].size(); ++i) {
        const int64_t t0 = starts[b][i], t1 = i + 1 < starts[b].size() ? starts[b][i + 1] : T;
        m.forward_backward(Tensor::from_vector(std::vector<double>(tok.begin() + b * T + t0, tok.begin() + b * T + t1),
                                               {1, t1 - t0}, DType::i32, dev),
                           Tensor::from_vector(std::vector<double>(tgt.begin() + b * T + t0, tgt.begin() + b * T + t1),
                                               {1, t1 - t0}, DType::i32, dev),
                           inv, ld);
      }
    std::printf("[segments] cuda model %s: loss packed %.9g, documents %.9g\n", arch_name(arch), lp.item(), ld.item());
    CHECK(std::fabs(lp.item() - ld.item()) <= 2e-5 * std::fabs(ld.item()));
    for (size_t a = 0; a < m.specs().size(); ++a) {
      const std::vector<double> g = m.grad(m.specs()[a].name).to_vector();
      double diff = 0, scale = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        diff = std::max(diff, std::fabs(packed[a][i] - g[i]));
        scale = std::max(scale, std::fabs(g[i]));
      }
      INFO(arch_name(arch) << " " << m.specs()[a].name << ": max diff " << diff << ", max |g| " << scale);
      CHECK(diff <= 1e-4 * scale);
    }
  }
}

TEST_CASE("gather_rows on CUDA: the 16-byte and the element paths equal the CPU bit for bit", "[segments][cuda]") {
  alloc::cuda_allocator(0).set_poison(true);
  const uint64_t seed = lt::testing::test_seed() + 83;
  struct Row {
    int64_t rows, width;
    DType dt;
    int64_t offset;  // rows skipped at the start of x: a misaligned base for odd widths
  };
  for (const Row& r : {Row{300, 3, DType::f32, 0}, Row{300, 64, DType::bf16, 0}, Row{200, 768, DType::f32, 0},
                       Row{200, 8, DType::bf16, 1}, Row{129, 12, DType::bf16, 1}}) {
    const Tensor all = ops::randn({r.rows + r.offset, r.width}, seed + r.width, 0, DType::f32).to(r.dt);
    const Tensor x = all.narrow(0, r.offset, r.rows);
    std::mt19937_64 rng(seed + r.rows);
    std::vector<double> idx(static_cast<size_t>(r.rows + 37));
    for (double& v : idx) v = rng() % 5 == 0 ? -1.0 : static_cast<double>(rng() % static_cast<uint64_t>(r.rows));
    const Tensor icpu = Tensor::from_vector(idx, {static_cast<int64_t>(idx.size())}, DType::i32);
    const Tensor want = ops::gather_rows(x, icpu, -2.5);
    const Tensor got = ops::gather_rows(x.to(Device::cuda(0)), icpu.to(Device::cuda(0)), -2.5);
    INFO("rows " << r.rows << " width " << r.width << " " << dtype_name(r.dt) << " offset " << r.offset);
    CHECK(ops::max_abs_diff(got.to(Device::cpu()), want) == 0.0);
  }
}
