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
#include "engine/nn/short_conv.h"
#include "engine/ops.h"
#include "tests/kernels/rwkv6_test_util.h"
#include "tests/support/kda_testing.h"
#include "tests/support/model_testing.h"
#include "tests/support/segments_testing.h"
#include "tests/support/test_seed.h"

using namespace lt;

using lt::test::random_resets;
using lt::test::random_starts;

TEST_CASE("KDA on CUDA with segment starts anywhere: every scan form against the naive recurrence",
          "[kda][cuda][segments]") {
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
    lt::test::set_starts_from_resets(p, resets);
    const Grads ref = naive_reference(p);
    for (BwdImpl impl : {BwdImpl::fused, BwdImpl::fallback}) {
      mixers::Rwkv6Config cfg;
      cfg.backward = impl;
      const auto e = lt::test::rwkv6_packed_errors(p, resets, r.dt, Device::cuda(0), cfg, ref);
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
    Model m(c, Device::cuda(0), DType::f32);
    m.init_weights(3);
    lt::test::perturb_params(m, {.normal = 8.0, .constant_noise = 0.2});
    const lt::test::PackedBatch pk(70, {{0, 9, 10, 33, 69}, {0, 40}}, c.vocab_size);
    const lt::test::StepResult packed = lt::test::run_packed(m, pk, DType::f32);
    const lt::test::StepResult docs = lt::test::run_documents(m, pk, DType::f32);
    std::printf("[segments] cuda model %s: loss packed %.9g, documents %.9g\n", arch_name(arch), packed.loss,
                docs.loss);
    CHECK(std::fabs(packed.loss - docs.loss) <= 2e-5 * std::fabs(docs.loss));
    const double worst = lt::test::worst_rel(m, packed, docs, 1e-4);
    std::printf("[segments]   worst gradient difference %.2e of its parameter's largest\n", worst);
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

TEST_CASE("short conv on CUDA with document positions: forward, dx and dw against the CPU", "[segments][cuda][conv]") {
  // Documents at t = 0, 3, 4 (one token), 37 (a tile boundary at 32 in between) in row 0; row 1
  // one document; C 200 (two blocks of channels), W 4.
  const int64_t B = 2, T = 70, C = 200, W = 4;
  std::vector<uint8_t> starts(B * T, 0);
  starts[3] = starts[4] = starts[37] = starts[69] = 1;
  const Tensor pos = mixers::Segments(starts, B, T, Device::cpu()).positions();
  const Device dev = Device::cuda(0);
  for (DType dt : {DType::f32, DType::bf16}) {
    const Tensor x = ops::randn({B, T, C}, 41, 0, DType::f32).to(dt),
                 dy = ops::randn({B, T, C}, 42, 0, DType::f32).to(dt);
    const Tensor w = ops::randn({C, W}, 43, 0, DType::f32);
    Tensor dw_cpu = Tensor::zeros({C, W}, DType::f32), dw_gpu = Tensor::zeros({C, W}, DType::f32, dev);
    const Tensor y_cpu = nn::short_conv_forward(x, w, true, pos);
    const Tensor dx_cpu = nn::short_conv_backward(dy, x, w, dw_cpu, true, pos);
    const Tensor y_gpu = nn::short_conv_forward(x.to(dev), w.to(dev), true, pos.to(dev));
    const Tensor dx_gpu = nn::short_conv_backward(dy.to(dev), x.to(dev), w.to(dev), dw_gpu, true, pos.to(dev));
    const double tol = dt == DType::bf16 ? 1e-2 : 1e-5;
    INFO(dtype_name(dt));
    CHECK(ops::max_rel_diff(y_gpu.to(Device::cpu()).to(DType::f32), y_cpu.to(DType::f32)) < tol);
    CHECK(ops::max_rel_diff(dx_gpu.to(Device::cpu()).to(DType::f32), dx_cpu.to(DType::f32)) < tol);
    CHECK(ops::max_rel_diff(dw_gpu.to(Device::cpu()), dw_cpu) < 1e-5);
  }
}
