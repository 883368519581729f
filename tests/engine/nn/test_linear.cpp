// Linear layer (engine/nn/linear.h): forward against a host reference, backward by central
// finite differences in f64 (dx, dW, db), parameter gradients accumulating with +=, f32 and
// bf16 against the f64 result, the accumulating form (linear_backward_add), argument checks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/nn/linear.h"
#include "engine/ops.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/gradcheck.h"

using namespace lt;

namespace {

// y[r, o] = sum_i x[r, i] W[o, i] + b[o] on host doubles (x flattened to rows).
std::vector<double> linear_ref(const Tensor& x, const Tensor& W, const Tensor& b) {
  const std::vector<double> xv = x.to_vector(), wv = W.to_vector();
  const std::vector<double> bv = b.defined() ? b.to_vector() : std::vector<double>();
  const int64_t in = W.size(1), out = W.size(0), R = x.numel() / in;
  std::vector<double> y(static_cast<size_t>(R * out));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = bv.empty() ? 0.0 : bv[o];
      for (int64_t i = 0; i < in; ++i) s += xv[r * in + i] * wv[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

}  // namespace

TEST_CASE("linear forward matches the host reference", "[nn][linear]") {
  const Tensor x = test::random_tensor({2, 5, 7}, 1, DType::f64);
  const Tensor W = test::random_tensor({4, 7}, 2, DType::f64);
  const Tensor b = test::random_tensor({4}, 3, DType::f64);
  for (bool with_bias : {true, false}) {
    INFO("bias " << with_bias);
    const Tensor y = nn::linear_forward(x, W, with_bias ? b : Tensor());
    REQUIRE(y.shape() == Shape{2, 5, 4});
    REQUIRE(y.dtype() == DType::f64);
    CHECK(test::rel_err(y.to_vector(), linear_ref(x, W, with_bias ? b : Tensor())) < 1e-15);
  }
  // A strided x (transposed leading dims) gives the same rows.
  const Tensor xt = test::random_tensor({5, 2, 7}, 4, DType::f64).transpose(0, 1);
  CHECK(test::rel_err(nn::linear_forward(xt, W, b).to_vector(), linear_ref(xt.contiguous(), W, b)) < 1e-15);
}

TEST_CASE("linear backward: finite differences in f64 for dx, dW, db", "[nn][linear]") {
  Tensor x = test::random_tensor({3, 4, 6}, 11, DType::f64);
  Tensor W = test::random_tensor({5, 6}, 12, DType::f64);
  Tensor b = test::random_tensor({5}, 13, DType::f64);
  const Tensor w_loss = test::random_tensor({3, 4, 5}, 14, DType::f64);  // dy
  auto loss = [&] { return test::weighted_sum(nn::linear_forward(x, W, b), w_loss); };

  Tensor dW = Tensor::zeros({5, 6}, DType::f64);
  Tensor db = Tensor::zeros({5}, DType::f64);
  const Tensor dx = nn::linear_backward(w_loss, x, W, dW, &db);
  REQUIRE(dx.shape() == x.shape());
  CHECK(test::gradcheck(x, dx, loss) < 1e-8);
  CHECK(test::gradcheck(W, dW, loss) < 1e-8);
  CHECK(test::gradcheck(b, db, loss) < 1e-8);
}

TEST_CASE("linear backward accumulates dW and db with +=; need_dx = false skips dx", "[nn][linear]") {
  const Tensor x = test::random_tensor({7, 6}, 21, DType::f64);
  const Tensor W = test::random_tensor({3, 6}, 22, DType::f64);
  const Tensor dy = test::random_tensor({7, 3}, 23, DType::f64);
  const Tensor dW0 = test::random_tensor({3, 6}, 24, DType::f64);
  const Tensor db0 = test::random_tensor({3}, 25, DType::f64);

  // The increments alone, from zeroed gradients.
  Tensor dW_inc = Tensor::zeros({3, 6}, DType::f64), db_inc = Tensor::zeros({3}, DType::f64);
  nn::linear_backward(dy, x, W, dW_inc, &db_inc);
  // Host reference of the increments: dW[o, i] = sum_r dy[r, o] x[r, i], db[o] = sum_r dy[r, o].
  const std::vector<double> xv = x.to_vector(), dyv = dy.to_vector();
  std::vector<double> dW_ref(18, 0.0), db_ref(3, 0.0);
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t o = 0; o < 3; ++o) {
      db_ref[o] += dyv[r * 3 + o];
      for (int64_t i = 0; i < 6; ++i) dW_ref[o * 6 + i] += dyv[r * 3 + o] * xv[r * 6 + i];
    }
  CHECK(test::rel_err(dW_inc.to_vector(), dW_ref) < 1e-14);
  CHECK(test::rel_err(db_inc.to_vector(), db_ref) < 1e-14);

  // Starting from nonzero gradients, two backward calls add twice the increment.
  Tensor dW = dW0.clone(), db = db0.clone();
  const Tensor none = nn::linear_backward(dy, x, W, dW, &db, /*need_dx=*/false);
  CHECK_FALSE(none.defined());
  nn::linear_backward(dy, x, W, dW, &db, false);
  const std::vector<double> dWv = dW.to_vector(), dbv = db.to_vector(), dW0v = dW0.to_vector(), db0v = db0.to_vector();
  std::vector<double> dW_exp(18), db_exp(3);
  for (size_t i = 0; i < 18; ++i) dW_exp[i] = dW0v[i] + 2 * dW_ref[i];
  for (size_t i = 0; i < 3; ++i) db_exp[i] = db0v[i] + 2 * db_ref[i];
  CHECK(test::rel_err(dWv, dW_exp) < 1e-14);
  CHECK(test::rel_err(dbv, db_exp) < 1e-14);

  // Without a bias gradient dW still accumulates.
  Tensor dW2 = dW0.clone();
  nn::linear_backward(dy, x, W, dW2, nullptr, false);
  std::vector<double> dW2_exp(18);
  for (size_t i = 0; i < 18; ++i) dW2_exp[i] = dW0v[i] + dW_ref[i];
  CHECK(test::rel_err(dW2.to_vector(), dW2_exp) < 1e-14);
}

TEST_CASE("linear f32 and bf16 against f64", "[nn][linear]") {
  const Tensor x = test::random_tensor({2, 9, 16}, 31, DType::f64);
  const Tensor W = test::random_tensor({12, 16}, 32, DType::f64);
  const Tensor b = test::random_tensor({12}, 33, DType::f64);
  const Tensor dy = test::random_tensor({2, 9, 12}, 34, DType::f64);
  const Tensor dW0 = test::random_tensor({12, 16}, 35, DType::f64);
  const Tensor db0 = test::random_tensor({12}, 36, DType::f64);

  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    // The f64 reference on the operands as rounded to dt, so only the arithmetic differs.
    const Tensor xr = x.to(dt).to(DType::f64), Wr = W.to(dt).to(DType::f64), br = b.to(dt).to(DType::f64),
                 dyr = dy.to(dt).to(DType::f64);
    const Tensor y_ref = nn::linear_forward(xr, Wr, br);
    Tensor dW_ref = dW0.clone(), db_ref = db0.clone();
    const Tensor dx_ref = nn::linear_backward(dyr, xr, Wr, dW_ref, &db_ref);

    const DType gdt = DType::f32;  // gradients of f32 and bf16 operands are f32
    Tensor dW = dW0.to(gdt), db = db0.to(gdt);
    const Tensor y = nn::linear_forward(x.to(dt), W.to(dt), b.to(dt));
    const Tensor dx = nn::linear_backward(dy.to(dt), x.to(dt), W.to(dt), dW, &db);
    REQUIRE(y.dtype() == dt);
    REQUIRE(dx.dtype() == dt);
    // One rounding of the output to dt (the bias add in bf16 rounds a second time).
    const double out_tol = dt == DType::f32 ? 1e-6 : 1e-2;
    CHECK(test::rel_err(y.to_vector(), y_ref.to_vector()) < out_tol);
    CHECK(test::rel_err(dx.to_vector(), dx_ref.to_vector()) < out_tol);
    // f32 gradients accumulate from the (exact) products in f32 or better.
    CHECK(test::rel_err(dW.to_vector(), dW_ref.to_vector()) < 1e-6);
    CHECK(test::rel_err(db.to_vector(), db_ref.to_vector()) < 1e-6);
  }
}

TEST_CASE("linear_backward_add: dx_acc += dy W with one rounding, the same parameter gradients", "[nn][linear]") {
  const Tensor x = test::random_tensor({3, 5, 16}, 51, DType::f64);
  const Tensor W = test::random_tensor({12, 16}, 52, DType::f64);
  const Tensor dy = test::random_tensor({3, 5, 12}, 53, DType::f64);
  const Tensor acc0 = test::random_tensor({3, 5, 16}, 54, DType::f64);
  const Tensor dW0 = test::random_tensor({12, 16}, 55, DType::f64);
  const Tensor db0 = test::random_tensor({12}, 56, DType::f64);
  // f64: the accumulator gains exactly linear_backward's dx; dW, db as with linear_backward.
  Tensor dW_ref = dW0.clone(), db_ref = db0.clone();
  const Tensor dx_ref = nn::linear_backward(dy, x, W, dW_ref, &db_ref);
  Tensor acc = acc0.clone(), dW = dW0.clone(), db = db0.clone();
  nn::linear_backward_add(dy, x, W, dW, acc, &db);
  CHECK(test::rel_err(acc.to_vector(), (acc0 + dx_ref).to_vector()) < 1e-15);
  CHECK(test::rel_err(dW.to_vector(), dW_ref.to_vector()) < 1e-15);
  CHECK(test::rel_err(db.to_vector(), db_ref.to_vector()) < 1e-15);
  // bf16: acc + dy W from the f64 product of the bf16 operands, rounded once to bf16.
  const Tensor xb = x.to(DType::bf16), Wb = W.to(DType::bf16), dyb = dy.to(DType::bf16);
  const Tensor accb0 = acc0.to(DType::bf16);
  Tensor dW_f32 = dW0.to(DType::f32);
  Tensor accb = accb0.clone();
  nn::linear_backward_add(dyb, xb, Wb, dW_f32, accb);
  REQUIRE(accb.dtype() == DType::bf16);
  const Tensor want =
      accb0.to(DType::f64) + ops::matmul(dyb.to(DType::f64).reshape({15, 12}), Wb.to(DType::f64)).view({3, 5, 16});
  // One rounding to nearest: every element within 2^-8 of its exact value, relatively.
  const std::vector<double> got_v = accb.to_vector(), want_v = want.to_vector();
  double worst = 0.0;
  for (size_t i = 0; i < got_v.size(); ++i)
    worst = std::max(worst, std::abs(got_v[i] - want_v[i]) / std::abs(want_v[i]));
  CHECK(worst <= std::ldexp(1.0, -8));
  // The accumulator must have x's shape and dtype, contiguous.
  Tensor bad = Tensor::zeros({3, 5, 15}, DType::f64);
  CHECK_THROWS_WITH(nn::linear_backward_add(dy, x, W, dW, bad), Catch::Contains("linear_backward_add") &&
                                                                    Catch::Contains("dx_acc") &&
                                                                    Catch::Contains("[3, 5, 15]"));
  Tensor strided = Tensor::zeros({5, 3, 16}, DType::f64).transpose(0, 1);
  CHECK_THROWS_WITH(nn::linear_backward_add(dy, x, W, dW, strided), Catch::Contains("contiguous"));
}

TEST_CASE("linear argument checks name the problem", "[nn][linear]") {
  const Tensor x = test::random_tensor({4, 6}, 41);
  const Tensor W = test::random_tensor({3, 6}, 42);
  CHECK_THROWS_WITH(nn::linear_forward(x, test::random_tensor({3, 5}, 43)),
                    Catch::Contains("linear_forward") && Catch::Contains("[3, 5]"));
  CHECK_THROWS_WITH(nn::linear_forward(x, W, test::random_tensor({4}, 44)),
                    Catch::Contains("bias") && Catch::Contains("[4]"));
  CHECK_THROWS_WITH(nn::linear_forward(x, W.to(DType::f64)), Catch::Contains("f64"));
  Tensor dW_bad = Tensor::zeros({3, 6}, DType::f64);
  CHECK_THROWS_WITH(nn::linear_backward(test::random_tensor({4, 3}, 45), x, W, dW_bad),
                    Catch::Contains("linear_backward") && Catch::Contains("dW"));
  Tensor dW = Tensor::zeros({3, 6});
  CHECK_THROWS_WITH(nn::linear_backward(test::random_tensor({4, 4}, 46), x, W, dW),
                    Catch::Contains("dy") && Catch::Contains("[4, 3]"));
  // bf16 operands need f32 gradients.
  Tensor dW_bf16 = Tensor::zeros({3, 6}, DType::bf16);
  CHECK_THROWS_WITH(
      nn::linear_backward(test::random_tensor({4, 3}, 47, DType::bf16), x.to(DType::bf16), W.to(DType::bf16), dW_bf16),
      Catch::Contains("f32"));
}
