// Causal depthwise short convolution on the CPU (engine/nn/short_conv.h): forward and
// backward against the direct double formula (f64, f32; every width 1..8, with and without
// SiLU, T shorter than W, several dw slots), dx and dw by finite differences in f64, bf16
// against f32, dw accumulation, run-to-run bit-identical dw, strided inputs, errors.
#include <catch2/catch.hpp>

#include <cstring>

#include "engine/nn/short_conv.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/nn/conv_testing.h"
#include "tests/support/gradcheck.h"

using namespace lt;
using namespace lt::test;

namespace {

// Conv weights ~ N(0, 0.5) shifted off zero: pre-activations of order 1 (SiLU's curved part).
Tensor conv_weight(int64_t C, int64_t W, uint64_t seed, DType dt) {
  return random_tensor({C, W}, seed, dt == DType::f64 ? DType::f64 : DType::f32) * 0.5;
}

}  // namespace

TEST_CASE("short_conv forward and backward match the double formula", "[nn][short_conv]") {
  struct Shape3 {
    int64_t B, T, C;
  };
  for (DType dt : {DType::f64, DType::f32})
    for (int64_t W = 1; W <= 8; ++W)
      for (bool silu : {true, false})
        for (Shape3 s : {Shape3{2, 75, 5}, Shape3{3, 2, 4}}) {  // 3 dw tiles; T < W
          INFO(dtype_name(dt) << " W " << W << " silu " << silu << " T " << s.T);
          const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
          const Tensor x = random_tensor({s.B, s.T, s.C}, 100 + W, dt);
          const Tensor w = conv_weight(s.C, W, 200 + W, dt);
          const Tensor dy = random_tensor(x.shape(), 300 + W, dt);
          const std::vector<double> dyv = dy.to_vector();
          const RefConv ref = ref_short_conv(x, w, silu, &dyv);
          const Tensor y = nn::short_conv_forward(x, w, silu);
          CHECK(y.shape() == x.shape());
          CHECK(y.dtype() == dt);
          CHECK(rel_err(y.to_vector(), ref.y) < tol);
          Tensor dw = Tensor::zeros(w.shape(), w.dtype());
          const Tensor dx = nn::short_conv_backward(dy, x, w, dw, silu);
          CHECK(rel_err(dx.to_vector(), ref.dx) < tol);
          CHECK(rel_err(dw.to_vector(), ref.dw) < tol);
        }
}

TEST_CASE("short_conv backward matches finite differences (f64)", "[nn][short_conv]") {
  for (int64_t W : {2, 4})
    for (bool silu : {true, false}) {
      INFO("W " << W << " silu " << silu);
      Tensor x = random_tensor({2, 7, 3}, 400 + W, DType::f64);
      Tensor w = conv_weight(3, W, 410 + W, DType::f64);
      const Tensor dy = random_tensor(x.shape(), 420 + W, DType::f64);
      Tensor dw = Tensor::zeros(w.shape(), DType::f64);
      const Tensor dx = nn::short_conv_backward(dy, x, w, dw, silu);
      auto loss = [&] { return weighted_sum(nn::short_conv_forward(x, w, silu), dy); };
      CHECK(gradcheck(x, dx, loss) < 1e-7);
      CHECK(gradcheck(w, dw, loss) < 1e-7);
    }
}

TEST_CASE("short_conv: dw accumulates, dx is written", "[nn][short_conv]") {
  const Tensor x = random_tensor({2, 40, 6}, 501, DType::f64);
  const Tensor w = conv_weight(6, 4, 502, DType::f64);
  const Tensor dy = random_tensor(x.shape(), 503, DType::f64);
  Tensor dw1 = Tensor::zeros(w.shape(), DType::f64);
  const Tensor dx1 = nn::short_conv_backward(dy, x, w, dw1);
  const Tensor dw0 = random_tensor(w.shape(), 504, DType::f64);
  Tensor dw = dw0.clone();
  nn::short_conv_backward(dy, x, w, dw);
  const Tensor dx2 = nn::short_conv_backward(dy, x, w, dw);
  CHECK(rel_err(dw.to_vector(), (dw0 + dw1 * 2.0).to_vector()) < 1e-14);
  CHECK(same_bits(dx1, dx2));
}

TEST_CASE("short_conv: bf16 activations against f32 on the same values", "[nn][short_conv]") {
  // Same values, both computed in f32: the bf16 results differ only by their final rounding
  // (half a bf16 ulp, 2^-9 of each element); 4e-3 relative to the largest element.
  const Tensor xb = random_tensor({2, 50, 12}, 601, DType::bf16), xf = xb.to(DType::f32);
  const Tensor w = conv_weight(12, 4, 602, DType::f32);
  const Tensor dyb = random_tensor(xb.shape(), 603, DType::bf16), dyf = dyb.to(DType::f32);
  const Tensor yb = nn::short_conv_forward(xb, w), yf = nn::short_conv_forward(xf, w);
  CHECK(yb.dtype() == DType::bf16);
  CHECK(rel_err(yb.to_vector(), yf.to_vector()) < 4e-3);
  Tensor dwb = Tensor::zeros(w.shape()), dwf = Tensor::zeros(w.shape());
  const Tensor dxb = nn::short_conv_backward(dyb, xb, w, dwb), dxf = nn::short_conv_backward(dyf, xf, w, dwf);
  CHECK(rel_err(dxb.to_vector(), dxf.to_vector()) < 4e-3);
  CHECK(rel_err(dwb.to_vector(), dwf.to_vector()) < 1e-5);
}

TEST_CASE("short_conv: dw is bit-identical run to run (CPU); strided x", "[nn][short_conv]") {
  const Tensor x = random_tensor({4, 200, 32}, 701, DType::f32);
  const Tensor w = conv_weight(32, 4, 702, DType::f32);
  const Tensor dy = random_tensor(x.shape(), 703, DType::f32);
  Tensor dw_a = Tensor::zeros(w.shape()), dw_b = Tensor::zeros(w.shape());
  const Tensor dx_a = nn::short_conv_backward(dy, x, w, dw_a);
  const Tensor dx_b = nn::short_conv_backward(dy, x, w, dw_b);
  CHECK(same_bits(dw_a, dw_b));
  CHECK(same_bits(dx_a, dx_b));
  // the same values through a non-contiguous view
  const Tensor xs = x.transpose(0, 1).contiguous().transpose(0, 1);
  REQUIRE_FALSE(xs.is_contiguous());
  CHECK(same_bits(nn::short_conv_forward(xs, w), nn::short_conv_forward(x, w)));
  Tensor dw_s = Tensor::zeros(w.shape());
  CHECK(same_bits(nn::short_conv_backward(dy, xs, w, dw_s), dx_a));
  CHECK(same_bits(dw_s, dw_a));
}

TEST_CASE("short_conv: bad arguments name the op and the shapes", "[nn][short_conv]") {
  const Tensor x = random_tensor({2, 5, 6}, 801);
  const Tensor w = conv_weight(6, 4, 802, DType::f32);
  CHECK_THROWS_WITH(nn::short_conv_forward(random_tensor({10, 6}, 803), w), Catch::Contains("short_conv_forward") &&
                                                                                Catch::Contains("x [10, 6]") &&
                                                                                Catch::Contains("[B, T, C]"));
  CHECK_THROWS_WITH(nn::short_conv_forward(x, conv_weight(5, 4, 804, DType::f32)),
                    Catch::Contains("short_conv_forward") && Catch::Contains("w [5, 4]") && Catch::Contains("C = 6"));
  CHECK_THROWS_WITH(nn::short_conv_forward(x, conv_weight(6, 9, 805, DType::f32)),
                    Catch::Contains("w [6, 9]") && Catch::Contains("W <= 8"));
  CHECK_THROWS_WITH(nn::short_conv_forward(x, w.to(DType::f64)), Catch::Contains("w [6, 4] f64"));
  CHECK_THROWS_WITH(nn::short_conv_forward(x.to(DType::f16), w), Catch::Contains("dtype must be f32, bf16 or f64"));
  Tensor dw = Tensor::zeros({6, 4});
  CHECK_THROWS_WITH(nn::short_conv_backward(random_tensor({2, 4, 6}, 806), x, w, dw),
                    Catch::Contains("short_conv_backward") && Catch::Contains("dy [2, 4, 6]"));
  Tensor dw_bad = Tensor::zeros({6, 3});
  CHECK_THROWS_WITH(nn::short_conv_backward(x, x, w, dw_bad), Catch::Contains("dw [6, 3]"));
  Tensor dw_strided = Tensor::zeros({4, 6}).transpose(0, 1);
  CHECK_THROWS_WITH(nn::short_conv_backward(x, x, w, dw_strided), Catch::Contains("contiguous"));
}
