// Token embedding on the CPU: the gather against W's rows, the scatter-add backward against
// a direct sum and by finite differences in f64 (repeated indices), accumulation into an
// existing dW, bit-identical reruns, index range and shape errors.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "engine/nn/embedding.h"
#include "engine/ops.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/gradcheck.h"

using namespace lt;
using lt::test::same_bits;

namespace {

// Indices with repeats: V = 7 rows, 3 of them never used, row 2 used four times.
const std::vector<int64_t> kIdx = {2, 5, 2, 0, 6, 2, 5, 2, 0, 6, 5, 2};  // [3, 4]
constexpr int64_t kV = 7, kD = 5;

}  // namespace

TEST_CASE("embedding forward gathers W's rows", "[nn][embedding]") {
  for (DType idx_dt : {DType::i32, DType::i64}) {
    for (DType w_dt : {DType::f64, DType::f32}) {
      INFO(dtype_name(idx_dt) << " " << dtype_name(w_dt));
      const Tensor W = test::random_tensor({kV, kD}, 11, w_dt);
      const Tensor idx = Tensor::from_vector(kIdx, {3, 4}, idx_dt);
      for (DType out_dt : {w_dt, DType::bf16}) {
        const Tensor y = nn::embedding_forward(idx, W, out_dt);
        REQUIRE(y.shape() == Shape{3, 4, kD});
        REQUIRE(y.dtype() == out_dt);
        const Tensor ref = W.to(out_dt);  // the expected rounding of each row
        const std::vector<double> yv = y.to_vector(), rv = ref.to_vector();
        for (size_t n = 0; n < kIdx.size(); ++n)
          for (int64_t c = 0; c < kD; ++c) CHECK(yv[n * kD + c] == rv[kIdx[n] * kD + c]);
      }
    }
  }
}

TEST_CASE("embedding backward: dW += per-row sums of dy, checked by finite differences", "[nn][embedding]") {
  Tensor W = test::random_tensor({kV, kD}, 1, DType::f64);
  const Tensor idx = Tensor::from_vector(kIdx, {3, 4}, DType::i64);
  const Tensor w_out = test::random_tensor({3, 4, kD}, 2, DType::f64);  // dy of sum(w_out * y)
  const Tensor dW0 = test::random_tensor({kV, kD}, 3, DType::f64);
  Tensor dW = dW0.clone();
  nn::embedding_backward(w_out, idx, dW);

  // direct: dW - dW0 = sum over tokens of w_out rows
  const std::vector<double> g = w_out.to_vector(), d0 = dW0.to_vector(), d1 = dW.to_vector();
  std::vector<double> want(d0);
  for (size_t n = 0; n < kIdx.size(); ++n)
    for (int64_t c = 0; c < kD; ++c) want[kIdx[n] * kD + c] += g[n * kD + c];
  CHECK(test::rel_err(d1, want) < 1e-15);

  const Tensor analytic = dW - dW0;
  const double err = test::gradcheck(
      W, analytic, [&] { return test::weighted_sum(nn::embedding_forward(idx, W, DType::f64), w_out); });
  CHECK(err < 1e-9);
}

TEST_CASE("embedding backward: bf16 dy into f32 dW, token order, bit-identical reruns", "[nn][embedding]") {
  const Tensor idx = Tensor::from_vector(kIdx, {12}, DType::i32);
  for (DType dy_dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dy_dt));
    const Tensor dy = test::random_tensor({12, kD}, 4, dy_dt);
    const Tensor dW0 = test::random_tensor({kV, kD}, 5, DType::f32);
    Tensor a = dW0.clone(), b = dW0.clone();
    nn::embedding_backward(dy, idx, a);
    nn::embedding_backward(dy, idx, b);
    CHECK(same_bits(a, b));
    // the documented rule, in f32: acc = 0; acc += dy rows in token order; dW += acc
    const std::vector<double> g = dy.to_vector(), d0 = dW0.to_vector(), got = a.to_vector();
    for (int64_t v = 0; v < kV; ++v)
      for (int64_t c = 0; c < kD; ++c) {
        float acc = 0.0f;
        for (size_t n = 0; n < kIdx.size(); ++n)
          if (kIdx[n] == v) acc += static_cast<float>(g[n * kD + c]);
        const float want = static_cast<float>(d0[v * kD + c]) + acc;
        CHECK(static_cast<float>(got[v * kD + c]) == want);
      }
  }
}

TEST_CASE("embedding errors name the bad index, shape or dtype", "[nn][embedding]") {
  const Tensor W = test::random_tensor({kV, kD}, 1);
  Tensor dW = Tensor::zeros({kV, kD});
  const Tensor bad_hi = Tensor::from_vector(std::vector<int64_t>{1, 7, 2}, {3});
  const Tensor bad_lo = Tensor::from_vector(std::vector<int64_t>{1, -3, 2}, {3}, DType::i32);
  CHECK_THROWS_WITH(nn::embedding_forward(bad_hi, W, DType::f32),
                    Catch::Contains("index 7") && Catch::Contains("[0, 7)"));
  CHECK_THROWS_WITH(nn::embedding_forward(bad_lo, W, DType::f32), Catch::Contains("index -3"));
  // nothing is written when an index is bad
  CHECK_THROWS_WITH(nn::embedding_backward(test::random_tensor({3, kD}, 2), bad_hi, dW), Catch::Contains("index 7"));
  CHECK(ops::max_abs_diff(dW, Tensor::zeros({kV, kD})) == 0.0);
  const Tensor idx = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  CHECK_THROWS_WITH(nn::embedding_backward(test::random_tensor({3, kD + 1}, 2), idx, dW),
                    Catch::Contains("embedding_backward") && Catch::Contains("[3, 6]"));
  CHECK_THROWS_WITH(nn::embedding_forward(idx.to(DType::f32), W, DType::f32), Catch::Contains("expected i32 or i64"));
  CHECK_THROWS_WITH(nn::embedding_forward(idx, W.to(DType::bf16), DType::f32),
                    Catch::Contains("W [7, 5]") && Catch::Contains("bf16"));
  CHECK_THROWS_WITH(nn::embedding_forward(idx, W, DType::i32), Catch::Contains("out_dtype i32"));
}
