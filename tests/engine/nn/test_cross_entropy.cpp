// The LM head with cross-entropy on the CPU: loss, argmax flags and gradients against the
// formulas in f64 and by finite differences, ignored rows, inv_count, chunk sizes smaller
// than N and not dividing it, accumulation into loss_accum / dW, bit-identical reruns,
// errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/nn/cross_entropy.h"
#include "engine/ops.h"
#include "tests/engine/engine_test_util.h"
#include "tests/support/gradcheck.h"

using namespace lt;
using lt::test::same_bits;

namespace {

constexpr int64_t kN = 10, kD = 6, kV = 9;
// two ignored rows (-100), one of them the last
const std::vector<int64_t> kTargets = {3, 0, -100, 8, 8, 1, 5, 2, 7, -100};
constexpr int64_t kValid = 8;

struct Reference {
  double loss = 0;              // inv_count * sum over valid rows of (lse - z_t)
  std::vector<double> dlogits;  // [N, V]
  std::vector<int> correct;     // [N]
};

// Direct formulas in f64 from x [N, d], W [V, d].
Reference reference(const Tensor& x, const Tensor& W, const std::vector<int64_t>& targets, double inv_count) {
  const std::vector<double> xv = x.to_vector(), wv = W.to_vector();
  const int64_t N = x.size(0), d = x.size(1), V = W.size(0);
  Reference r;
  r.dlogits.assign(static_cast<size_t>(N * V), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> z(V);
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t k = 0; k < d; ++k) s += xv[n * d + k] * wv[v * d + k];
      z[v] = s;
    }
    int64_t arg = 0;
    for (int64_t v = 1; v < V; ++v)
      if (z[v] > z[arg]) arg = v;
    const int64_t t = targets[n];
    if (t == -100) {
      r.correct.push_back(-1);
      continue;
    }
    r.correct.push_back(arg == t ? 1 : 0);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v]);
    r.loss += (std::log(sum) - z[t]) * inv_count;
    for (int64_t v = 0; v < V; ++v) r.dlogits[n * V + v] = (std::exp(z[v]) / sum - (v == t ? 1.0 : 0.0)) * inv_count;
  }
  return r;
}

// Targets for the bf16 test: a fixed pattern over [0, V) with one ignored row.
Tensor make_targets_for_bf16(int64_t N, int64_t V) {
  std::vector<int64_t> t(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) t[i] = i == 4 ? -100 : (i * 7 + 3) % V;
  return Tensor::from_vector(t, {N}, DType::i64);
}

Tensor scalar(double v, DType dt = DType::f64) { return Tensor::full({}, v, dt); }

}  // namespace

TEST_CASE("lm head cross-entropy forward: loss and argmax flags against the formulas", "[nn][cross_entropy]") {
  const Tensor x = test::random_tensor({kN, kD}, 1, DType::f64);
  const Tensor W = test::random_tensor({kV, kD}, 2, DType::f64);
  const Tensor targets = Tensor::from_vector(kTargets, {kN});
  const Reference ref = reference(x, W, kTargets, 1.0 / kValid);
  for (int64_t chunk : {int64_t{3}, int64_t{4}, kN, int64_t{4096}}) {
    INFO("chunk_tokens " << chunk);
    nn::LmHeadLossArgs args;
    args.inv_count = 1.0 / kValid;
    args.chunk_tokens = chunk;
    Tensor loss = scalar(0.25);  // accumulated into
    Tensor correct = Tensor::full({kN}, 7, DType::i32);
    nn::lm_head_cross_entropy_forward(x, W, targets.to(DType::i32), args, loss, correct);
    CHECK(loss.item() == Approx(0.25 + ref.loss).epsilon(1e-14));
    const std::vector<double> cv = correct.to_vector();
    for (int64_t n = 0; n < kN; ++n) CHECK(cv[n] == ref.correct[n]);
  }
  // f32: same loss up to f32 rounding; without `correct`
  nn::LmHeadLossArgs args;
  args.inv_count = 1.0 / kValid;
  args.chunk_tokens = 4;
  Tensor loss32 = scalar(0.0, DType::f32);
  nn::lm_head_cross_entropy_forward(x.to(DType::f32), W.to(DType::f32), targets, args, loss32);
  CHECK(loss32.item() == Approx(ref.loss).epsilon(1e-6));
  // the logits for sampling
  const Tensor logits = nn::lm_head_logits(x, W);
  CHECK(logits.shape() == Shape{kN, kV});
  CHECK(ops::max_abs_diff(logits, ops::matmul(x, W, false, true)) == 0.0);
  CHECK(nn::lm_head_logits(x.to(DType::f32), W.to(DType::f32)).dtype() == DType::f32);
}

TEST_CASE("lm head cross-entropy backward: dx, dW by finite differences, ignored rows, chunks", "[nn][cross_entropy]") {
  Tensor x = test::random_tensor({kN, kD}, 3, DType::f64);
  Tensor W = test::random_tensor({kV, kD}, 4, DType::f64);
  const Tensor targets = Tensor::from_vector(kTargets, {kN});
  const double inv_count = 1.0 / 16;  // e.g. two micro-batches of 8 valid targets
  const Reference ref = reference(x, W, kTargets, inv_count);
  const Tensor dW0 = test::random_tensor({kV, kD}, 5, DType::f64);

  auto loss_of = [&](const Tensor& xx, const Tensor& ww) {
    nn::LmHeadLossArgs a;
    a.inv_count = inv_count;
    a.chunk_tokens = 4;
    Tensor l = scalar(0.0);
    nn::lm_head_cross_entropy_forward(xx, ww, targets, a, l);
    return l.item();
  };

  Tensor dx_first, dW_first;
  for (int64_t chunk : {int64_t{3}, int64_t{4}, kN}) {
    INFO("chunk_tokens " << chunk);
    nn::LmHeadLossArgs args;
    args.inv_count = inv_count;
    args.chunk_tokens = chunk;
    Tensor loss = scalar(-1.5);
    Tensor dx = Tensor::full({kN, kD}, NAN, DType::f64);
    Tensor dW = dW0.clone();
    nn::lm_head_cross_entropy_backward(x, W, targets, args, loss, dx, dW);
    CHECK(loss.item() == Approx(-1.5 + ref.loss).epsilon(1e-14));
    // direct: dx = dlogits W, dW - dW0 = dlogits^T x
    const Tensor dl = Tensor::from_vector(ref.dlogits, {kN, kV}, DType::f64);
    CHECK(ops::max_rel_diff(dx, ops::matmul(dl, W)) < 1e-13);
    const Tensor ddW = dW - dW0;
    CHECK(ops::max_rel_diff(ddW, ops::matmul(dl, x, true, false)) < 1e-13);
    // ignored rows get no gradient
    const std::vector<double> dxv = dx.to_vector();
    for (int64_t n : {int64_t{2}, int64_t{9}})
      for (int64_t k = 0; k < kD; ++k) CHECK(dxv[n * kD + k] == 0.0);
    if (!dx_first.defined()) {
      dx_first = dx;
      dW_first = ddW;
      CHECK(test::gradcheck(x, dx, [&] { return loss_of(x, W); }) < 1e-8);
      CHECK(test::gradcheck(W, ddW, [&] { return loss_of(x, W); }) < 1e-8);
    } else {
      CHECK(ops::max_rel_diff(dx, dx_first) < 1e-14);
      CHECK(ops::max_rel_diff(ddW, dW_first) < 1e-14);
    }
  }
}

TEST_CASE("lm head cross-entropy: all rows ignored adds nothing", "[nn][cross_entropy]") {
  const Tensor x = test::random_tensor({4, kD}, 6, DType::f64);
  const Tensor W = test::random_tensor({kV, kD}, 7, DType::f64);
  const Tensor targets = Tensor::full({4}, -1, DType::i64);
  nn::LmHeadLossArgs args;
  args.ignore_index = -1;
  args.chunk_tokens = 3;
  Tensor loss = scalar(2.0);
  Tensor dx;  // allocated by the call
  Tensor dW = test::random_tensor({kV, kD}, 8, DType::f64);
  const Tensor dW0 = dW.clone();
  nn::lm_head_cross_entropy_backward(x, W, targets, args, loss, dx, dW);
  CHECK(loss.item() == 2.0);
  CHECK(ops::max_abs_diff(dx, Tensor::zeros({4, kD}, DType::f64)) == 0.0);
  CHECK(ops::max_abs_diff(dW, dW0) == 0.0);
}

TEST_CASE("lm head cross-entropy f32: bit-identical reruns, close to f64", "[nn][cross_entropy]") {
  const int64_t N = 37, d = 16, V = 50;
  const Tensor x = test::random_tensor({N, d}, 9);
  const Tensor W = test::random_tensor({V, d}, 10);
  const Tensor targets = test::uniform_tensor({N}, 11, 0, V - 1, DType::i32);
  nn::LmHeadLossArgs args;
  args.inv_count = 1.0 / N;
  args.chunk_tokens = 8;
  auto run = [&](const Tensor& xx, const Tensor& ww, DType dw_dt) {
    Tensor loss = Tensor::zeros({}, dw_dt), dx, dW = Tensor::zeros({V, d}, dw_dt);
    nn::lm_head_cross_entropy_backward(xx, ww, targets, args, loss, dx, dW);
    return std::vector<Tensor>{loss, dx, dW};
  };
  const auto a = run(x, W, DType::f32), b = run(x, W, DType::f32);
  for (int i = 0; i < 3; ++i) CHECK(same_bits(a[i], b[i]));
  const auto r = run(x.to(DType::f64), W.to(DType::f64), DType::f64);
  CHECK(std::fabs(a[0].item() - r[0].item()) < 1e-6 * std::fabs(r[0].item()));
  CHECK(ops::max_rel_diff(a[1].to(DType::f64), r[1]) < 1e-5);
  CHECK(ops::max_rel_diff(a[2].to(DType::f64), r[2]) < 1e-5);
}

TEST_CASE("lm head cross-entropy bf16: bf16 logits and dlogits, softmax in f32", "[nn][cross_entropy]") {
  const int64_t N = 21, d = 16, V = 40;
  const Tensor x = test::random_tensor({N, d}, 12, DType::bf16);
  const Tensor W = ops::mul_scalar(test::random_tensor({V, d}, 13), 3.0).to(DType::bf16);  // |z| up to ~10
  const Tensor targets = make_targets_for_bf16(N, V);
  nn::LmHeadLossArgs args;
  args.inv_count = 1.0 / N;
  args.chunk_tokens = 5;
  Tensor loss = Tensor::zeros({}), dx, dW = Tensor::zeros({V, d});
  nn::lm_head_cross_entropy_backward(x, W, targets, args, loss, dx, dW);
  CHECK(dx.dtype() == DType::bf16);
  // The contract: the logits rounded once to bf16 (the product in f64 on the CPU), softmax,
  // loss and dlogits from them, dlogits rounded once to bf16. The same in f64 from the bf16
  // logits: the loss within f32 rounding; dx and dW within one bf16 spacing (2^-8) of the
  // largest element, the rounding of dlogits and of dx itself.
  const std::vector<double> z = ops::matmul(x, W, false, true).to_vector();  // [N, V], bf16 values
  const std::vector<double> tv = targets.to_vector();
  double loss_ref = 0, z_max = 0;
  std::vector<double> dl(static_cast<size_t>(N * V), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = static_cast<int64_t>(tv[n]);
    double m = z[n * V];
    for (int64_t v = 0; v < V; ++v) m = std::max(m, z[n * V + v]), z_max = std::max(z_max, std::fabs(z[n * V + v]));
    if (t == -100) continue;
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(z[n * V + v] - m);
    loss_ref += (m + std::log(sum) - z[n * V + t]) * args.inv_count;
    for (int64_t v = 0; v < V; ++v)
      dl[n * V + v] = (std::exp(z[n * V + v] - m) / sum - (v == t ? 1.0 : 0.0)) * args.inv_count;
  }
  CHECK(z_max > 4.0);
  const Tensor dl16 = Tensor::from_vector(dl, {N, V}, DType::f64).to(DType::bf16).to(DType::f64);
  const Tensor x64 = x.to(DType::f64), W64 = W.to(DType::f64);
  CHECK(std::fabs(loss.item() - loss_ref) < 1e-6 * std::fabs(loss_ref));
  CHECK(ops::max_rel_diff(dx.to(DType::f64), ops::matmul(dl16, W64)) < 4e-3);
  CHECK(ops::max_rel_diff(dW.to(DType::f64), ops::matmul(dl16, x64, true, false)) < 4e-3);
  // Against f64 logits: the loss moves by at most twice the largest logit rounding
  // (lse and z_t each by at most max |dz| <= 2^-9 max |z|), and it does move.
  Tensor loss64 = Tensor::zeros({}, DType::f64), dx64, dW64 = Tensor::zeros({V, d}, DType::f64);
  nn::lm_head_cross_entropy_backward(x64, W64, targets, args, loss64, dx64, dW64);
  CHECK(std::fabs(loss.item() - loss64.item()) <= 2.0 * z_max * std::ldexp(1.0, -9));
  CHECK(loss.item() != loss64.item());
  Tensor eval = Tensor::zeros({});
  nn::lm_head_cross_entropy_forward(x, W, targets, args, eval);
  CHECK(eval.item() == loss.item());
  CHECK(nn::lm_head_logits(x, W).dtype() == DType::f32);
}

TEST_CASE("lm head cross-entropy errors name the bad target, shape or argument", "[nn][cross_entropy]") {
  const Tensor x = test::random_tensor({3, kD}, 1), W = test::random_tensor({kV, kD}, 2);
  Tensor loss = Tensor::zeros({}), dx, dW = Tensor::zeros({kV, kD});
  nn::LmHeadLossArgs args;
  const Tensor bad = Tensor::from_vector(std::vector<int64_t>{1, 9, -100}, {3});
  CHECK_THROWS_WITH(nn::lm_head_cross_entropy_backward(x, W, bad, args, loss, dx, dW),
                    Catch::Contains("target 9") && Catch::Contains("[0, 9)"));
  CHECK_THROWS_WITH(
      nn::lm_head_cross_entropy_forward(x, W, Tensor::from_vector(std::vector<int64_t>{1, -5, 2}, {3}), args, loss),
      Catch::Contains("target -5"));
  const Tensor good = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  CHECK_THROWS_WITH(nn::lm_head_cross_entropy_forward(x, W, good.narrow(0, 0, 2), args, loss),
                    Catch::Contains("targets [2]") && Catch::Contains("[3, 6]"));
  CHECK_THROWS_WITH(nn::lm_head_cross_entropy_forward(x, test::random_tensor({kV, kD + 1}, 3), good, args, loss),
                    Catch::Contains("W [9, 7]"));
  Tensor loss_vec = Tensor::zeros({1});
  CHECK_THROWS_WITH(nn::lm_head_cross_entropy_forward(x, W, good, args, loss_vec), Catch::Contains("loss_accum"));
  nn::LmHeadLossArgs zero_chunk;
  zero_chunk.chunk_tokens = 0;
  CHECK_THROWS_WITH(nn::lm_head_cross_entropy_forward(x, W, good, zero_chunk, loss), Catch::Contains("chunk_tokens 0"));
  Tensor dW_bad = Tensor::zeros({kV, kD}, DType::f64);
  CHECK_THROWS_WITH(nn::lm_head_cross_entropy_backward(x, W, good, args, loss, dx, dW_bad),
                    Catch::Contains("dW must be a contiguous f32"));
}
