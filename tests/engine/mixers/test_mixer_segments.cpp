// Packed documents in the mixers (engine/mixers/segments.h): the padded layout and its gather,
// and every path of both mixers with chunk resets against the float64 naive recurrence with
// the same segment starts (which tests/kernels/test_segments.cpp checks against documents run
// one by one). Fresh random inputs each run (seed printed; LINTRAIN_TEST_SEED=<n> replays one).
#include <catch2/catch.hpp>

#include <cstdio>
#include <random>
#include <vector>

#include "engine/mixers/kda.h"
#include "engine/mixers/rwkv6.h"
#include "engine/mixers/segments.h"
#include "engine/nn/short_conv.h"
#include "engine/ops.h"
#include "tests/kernels/rwkv6_test_util.h"
#include "tests/support/kda_testing.h"
#include "tests/support/segments_testing.h"
#include "tests/support/test_seed.h"

using namespace lt;

using lt::test::random_resets;
using lt::test::random_starts;

TEST_CASE("segment layout: documents start on chunk boundaries, and the gathers invert", "[segments]") {
  // Row 0: documents at t = 0, 5, 6 (one token), 9; row 1: one document. T = 12, C = 4.
  const int64_t B = 2, T = 12;
  std::vector<uint8_t> starts(B * T, 0);
  starts[0] = starts[5] = starts[6] = starts[9] = 1;
  const mixers::SegmentLayout L = mixers::build_segment_layout(starts, B, T, 4, Device::cpu());
  // Row 0: tokens 0-4 at 0-4; p = 5 -> round_up(5) = 8: token 5 at 8; token 6 at round_up(9) =
  // 12; tokens 7, 8 at 13, 14; token 9 at round_up(15) = 16; tokens 10, 11 at 17, 18.
  const std::vector<double> from = L.from_padded.to_vector();
  const std::vector<double> want0 = {0, 1, 2, 3, 4, 8, 12, 13, 14, 16, 17, 18};
  CHECK(L.Tp == 19);
  for (int64_t t = 0; t < T; ++t) {
    CHECK(from[t] == want0[t]);
    CHECK(from[T + t] == static_cast<double>(L.Tp + t));  // row 1 unmoved
  }
  const std::vector<double> reset = L.chunk_reset.to_vector();  // [2, 5]
  REQUIRE(L.chunk_reset.shape() == Shape{2, 5});
  const std::vector<double> want_reset = {1, 0, 1, 1, 1, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < want_reset.size(); ++i) CHECK(reset[i] == want_reset[i]);
  CHECK(L.padding_rows() == B * L.Tp - B * T);
  // x -> padded (fill 7 on padding) -> back is the identity; padding rows hold the fill.
  Tensor x = ops::randn({B * T, 3}, 11, 0, DType::f32);
  Tensor xp = ops::gather_rows(x, L.to_padded, 7.0);
  REQUIRE(xp.shape() == Shape{B * L.Tp, 3});
  CHECK(ops::max_abs_diff(ops::gather_rows(xp, L.from_padded), x) == 0.0);
  const std::vector<double> to = L.to_padded.to_vector(), xpv = xp.to_vector();
  int64_t pads = 0;
  for (int64_t m = 0; m < B * L.Tp; ++m)
    if (to[m] < 0) {
      ++pads;
      for (int c = 0; c < 3; ++c) CHECK(xpv[m * 3 + c] == 7.0);
    }
  CHECK(pads == L.padding_rows());
  // bf16 rows and a bad start vector
  Tensor xb = x.to(DType::bf16);
  CHECK(ops::max_abs_diff(ops::gather_rows(ops::gather_rows(xb, L.to_padded), L.from_padded), xb) == 0.0);
  CHECK_THROWS_WITH(mixers::build_segment_layout(std::vector<uint8_t>(5, 0), 2, 3, 4, Device::cpu()),
                    Catch::Contains("B * T = 6"));
  // Segments: any() only for a start past t = 0
  CHECK_FALSE(mixers::Segments(std::vector<uint8_t>{1, 0, 0, 1, 0, 0}, 2, 3, Device::cpu()).any());
  CHECK(mixers::Segments(std::vector<uint8_t>{1, 0, 1, 0, 0, 0}, 2, 3, Device::cpu()).any());
}

TEST_CASE("KDA with segment starts anywhere: ops, fused (CPU twins) and naive paths match the naive recurrence",
          "[kda][segments]") {
  using namespace lt::kda::testing;
  const uint64_t seed = test_seed() + 71;
  struct Row {
    kda::Dims d;
    bool h0, dht;
    DType dt;
    mixers::KdaPath path;
    double tol;
  };
  const std::vector<Row> rows = {
      {{2, 45, 2, 16, 8}, true, true, DType::f64, mixers::KdaPath::ops, 1e-10},
      {{2, 45, 2, 16, 8}, true, true, DType::f64, mixers::KdaPath::naive, 1e-12},
      {{2, 70, 2, 64, 16}, true, true, DType::f32, mixers::KdaPath::fused, 1e-5},
      {{3, 100, 1, 64, 32}, false, true, DType::f32, mixers::KdaPath::fused, 1e-5},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    Case c = make_case(r.d, r.h0, r.dht, false, r.dt);
    c.seg_start = random_starts(r.d.B, r.d.T, seed + 100 + i);
    const Data x = make_data(c, seed + i);
    const Result ref = run_naive(c, x);
    const Result got = run_mixer(c, to_tensors(c, x, c.dtype), r.path);
    const ErrReport e = compare(got, ref, false, true, c.h0);
    const ErrReport e32 = c.dtype == DType::f64 ? ErrReport{} : compare(run_naive_f32(c, x), ref, false, true, c.h0);
    const Gated gt = gate_errors(e, e32, r.tol);
    std::printf("[kda] packed %s vs naive %s worst %.2e, %.3f of allowed:%s%s\n", mixers::kda_path_name(r.path),
                c.name().c_str(), e.worst(), gt.worst_ratio, e.str().c_str(), gt.adapted.c_str());
    INFO(c.name() << " seed " << seed + i << e.str() << gt.adapted << replay_hint());
    CHECK(gt.pass);
  }
}

TEST_CASE("RWKV6 with chunk resets: ops, fused twins (both backwards) and naive paths match the naive recurrence",
          "[rwkv6][segments]") {
  using namespace lt::rwkv6;
  using namespace lt::rwkv6::test;
  const uint64_t seed = lt::testing::test_seed() + 72;
  struct Row {
    Dims d;
    DType dt;
    mixers::Rwkv6Path path;
    BwdImpl bwd;
    double tol;
  };
  const std::vector<Row> rows = {
      {{2, 45, 2, 16, 8}, DType::f64, mixers::Rwkv6Path::ops, BwdImpl::fused, 1e-10},
      {{2, 45, 2, 16, 8}, DType::f64, mixers::Rwkv6Path::naive, BwdImpl::fused, 1e-12},
      {{2, 70, 2, 16, 16}, DType::f32, mixers::Rwkv6Path::fused, BwdImpl::fused, 1e-5},
      {{3, 100, 1, 16, 32}, DType::f32, mixers::Rwkv6Path::fused, BwdImpl::fallback, 1e-5},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const Dims& d = r.d;
    Problem p(d, seed + i, GateKind::kLogSigmoid, true, true);
    const std::vector<int32_t> resets = random_resets(d.B, d.NT(), seed + 200 + i);
    lt::test::set_starts_from_resets(p, resets);
    const Grads ref = naive_reference(p);
    mixers::Rwkv6Config cfg;
    cfg.path = r.path;
    cfg.backward = r.bwd;
    const auto e = lt::test::rwkv6_packed_errors(p, resets, r.dt, Device::cpu(), cfg, ref);
    double worst = 0;
    for (double x : e) worst = std::max(worst, x);
    std::printf("[rwkv6] packed %s/%s B%lld T%lld C%lld %s worst rel err %.2e (dh0 %.2e)\n",
                mixers::rwkv6_path_name(r.path), bwd_impl_name(r.bwd), (long long)d.B, (long long)d.T, (long long)d.C,
                dtype_name(r.dt), worst, e[7]);
    INFO("seed " << seed + i << lt::testing::replay_hint());
    CHECK(worst < r.tol);
  }
}

TEST_CASE("short conv with document starts: no tap reads across a start; the gradients by finite differences",
          "[segments][conv]") {
  // Row 0: documents at t = 0, 3, 4 (one token), 9; row 1: one. The conv of the packed rows
  // equals the conv of each document alone; dx and dw against the documents' backward.
  const int64_t B = 2, T = 14, C = 5, W = 4;
  std::vector<uint8_t> starts(B * T, 0);
  starts[3] = starts[4] = starts[9] = 1;
  const Tensor st = mixers::Segments(starts, B, T, Device::cpu()).positions();
  const std::vector<double> pos = st.to_vector();
  const std::vector<double> want = {0, 1, 2, 0, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
  for (int64_t t = 0; t < T; ++t) CHECK(pos[t] == want[t]);
  for (int64_t t = 0; t < T; ++t) CHECK(pos[T + t] == static_cast<double>(t));
  const Tensor x = ops::randn({B, T, C}, 31, 0, DType::f64), w = ops::randn({C, W}, 32, 0, DType::f64);
  const Tensor dy = ops::randn({B, T, C}, 33, 0, DType::f64);
  Tensor dw = Tensor::zeros({C, W}, DType::f64);
  const Tensor y = nn::short_conv_forward(x, w, true, st);
  const Tensor dx = nn::short_conv_backward(dy, x, w, dw, true, st);
  Tensor dw_docs = Tensor::zeros({C, W}, DType::f64);
  const std::vector<std::pair<int64_t, int64_t>> docs = {{0, 3}, {3, 4}, {4, 9}, {9, 14}};
  for (int64_t b = 0; b < B; ++b)
    for (auto [t0, t1] : b == 0 ? docs : std::vector<std::pair<int64_t, int64_t>>{{0, T}}) {
      const Tensor xd = x.narrow(0, b, 1).narrow(1, t0, t1 - t0).contiguous();
      const Tensor dyd = dy.narrow(0, b, 1).narrow(1, t0, t1 - t0).contiguous();
      const Tensor yd = nn::short_conv_forward(xd, w, true);
      const Tensor dxd = nn::short_conv_backward(dyd, xd, w, dw_docs, true);
      INFO("row " << b << " document [" << t0 << ", " << t1 << ")");
      CHECK(ops::max_abs_diff(y.narrow(0, b, 1).narrow(1, t0, t1 - t0), yd) < 1e-14);
      CHECK(ops::max_abs_diff(dx.narrow(0, b, 1).narrow(1, t0, t1 - t0), dxd) < 1e-14);
    }
  CHECK(ops::max_abs_diff(dw, dw_docs) < 1e-13);
  // f32 and bf16 take the same masks (against the f64 result)
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor dw32 = Tensor::zeros({C, W}, DType::f32);
    const Tensor y32 = nn::short_conv_forward(x.to(dt), w.to(DType::f32), true, st);
    CHECK(ops::max_abs_diff(y32.to(DType::f64), y) < (dt == DType::bf16 ? 3e-2 : 1e-5));
  }
  CHECK_THROWS_WITH(nn::short_conv_forward(x, w, true, Tensor::zeros({5}, DType::i32)), Catch::Contains("positions"));
}
