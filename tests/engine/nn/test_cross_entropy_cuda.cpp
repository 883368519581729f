// The LM head with cross-entropy on CUDA against the CPU on the same random inputs: loss,
// argmax flags, dx and dW (f32; bf16 with bf16 logits), chunks that do not divide
// N, ignored rows, bit-identical reruns, fresh outputs NaN-poisoned, a bad target -> NaN.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/device.h"
#include "engine/nn/cross_entropy.h"
#include "engine/ops.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using lt::test::PoisonScope;
using lt::test::same_bits;

namespace {

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();

// Targets in [0, V) with every seventh row ignored (-100).
Tensor make_targets(int64_t N, int64_t V, uint64_t seed) {
  std::vector<double> u = ops::rand({N}, seed, 0, DType::f64).to_vector();
  std::vector<int64_t> t(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) t[i] = i % 7 == 3 ? -100 : static_cast<int64_t>(u[i] * static_cast<double>(V));
  return Tensor::from_vector(t, {N}, DType::i64);
}

struct Result {
  Tensor loss, dx, dW, correct;
};

Result run_head(const Tensor& x, const Tensor& W, const Tensor& targets, const nn::LmHeadLossArgs& args) {
  const Device dev = x.device();
  Result r;
  r.loss = Tensor::full({}, 0.75, DType::f32, dev);
  r.dW = test::random_tensor(W.shape(), 9, DType::f32, dev);
  nn::lm_head_cross_entropy_backward(x, W, targets, args, r.loss, r.dx, r.dW);
  Tensor eval_loss = Tensor::full({}, 0.75, DType::f32, dev);
  r.correct = Tensor::full({x.size(0)}, 5, DType::i32, dev);
  nn::lm_head_cross_entropy_forward(x, W, targets, args, eval_loss, r.correct);
  CHECK(std::fabs(eval_loss.item() - r.loss.item()) <= 1e-6 * std::fabs(r.loss.item()));
  return r;
}

}  // namespace

TEST_CASE("cuda lm head cross-entropy matches the CPU", "[nn][cross_entropy][cuda]") {
  PoisonScope poison;
  // V = 1037: odd (the scalar path), > the row block; 1040, 4104, 12296, 32000: 16-byte rows
  // (the pack path), the last pack step partial
  const int64_t N = 301, d = 64;
  nn::LmHeadLossArgs args;
  args.inv_count = 1.0 / 256;
  args.chunk_tokens = 128;  // 301 = 2 * 128 + 45
  for (int64_t V : {1037, 1040, 4104, 12296, 32000})
    for (DType dt : {DType::f32, DType::bf16}) {
      INFO(dtype_name(dt) << " V " << V);
      const Tensor targets = make_targets(N, V, 3);
      const Tensor x = test::random_tensor({N, d}, 1, dt);
      const Tensor W = ops::mul_scalar(test::random_tensor({V, d}, 2), 0.3).to(dt);
      const Result c = run_head(x, W, targets, args);
      const Result g = run_head(x.to(kGpu), W.to(kGpu), targets.to(kGpu), args);
      CHECK(g.dx.dtype() == dt);
      // bf16: the logits are rounded to bf16 from sums that differ in the last f32 bits
      // between cuBLAS and the CPU, so a few of the 312k logits (those within that difference
      // of a rounding boundary, ~2^-12 of them) land on neighbouring bf16 values (2^-8 apart);
      // a target logit's flip moves the loss by 2^-8 |z_t| inv_count, ~5e-6 of it
      CHECK(g.loss.item() == Approx(c.loss.item()).epsilon(dt == DType::f32 ? 1e-6 : 1e-4));
      // bf16: dlogits (and dx) are rounded to bf16, and their neighbours differ by 2^-8
      const double grad_tol = dt == DType::f32 ? 1e-5 : 4e-3;
      CHECK(ops::max_rel_diff(g.dx, c.dx) < grad_tol);
      CHECK(ops::max_rel_diff(g.dW, c.dW) < grad_tol);
      const std::vector<double> cg = g.correct.to_vector(), cc = c.correct.to_vector();
      int mismatches = 0;
      for (size_t i = 0; i < cc.size(); ++i) mismatches += cg[i] != cc[i];
      CHECK(mismatches == 0);
      // deterministic on the device
      const Result g2 = run_head(x.to(kGpu), W.to(kGpu), targets.to(kGpu), args);
      CHECK(same_bits(g2.loss, g.loss));
      CHECK(same_bits(g2.dx, g.dx));
      CHECK(same_bits(g2.dW, g.dW));
      // logits for sampling
      CHECK(ops::max_rel_diff(nn::lm_head_logits(x.to(kGpu), W.to(kGpu)), nn::lm_head_logits(x, W)) < 1e-5);
    }
}

TEST_CASE("cuda cross-entropy: a target out of range makes the loss NaN", "[nn][cross_entropy][cuda]") {
  const Tensor x = test::random_tensor({4, 8}, 1, DType::f32, kGpu),
               W = test::random_tensor({10, 8}, 2, DType::f32, kGpu);
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{1, 2, 10, 3}, {4}, DType::i64, kGpu);
  Tensor loss = Tensor::zeros({}, DType::f32, kGpu);
  nn::lm_head_cross_entropy_forward(x, W, targets, nn::LmHeadLossArgs{}, loss);
  CHECK(std::isnan(loss.item()));
}

TEST_CASE("cuda lm head cross-entropy in f64 matches the CPU", "[nn][cross_entropy][cuda]") {
  PoisonScope poison;
  const int64_t N = 45, d = 12, V = 700;
  const Tensor x = test::random_tensor({N, d}, 4, DType::f64), W = test::random_tensor({V, d}, 5, DType::f64);
  const Tensor targets = make_targets(N, V, 6);
  nn::LmHeadLossArgs args;
  args.inv_count = 1.0 / 40;
  args.chunk_tokens = 16;
  auto run = [&](Device dev) {
    Tensor loss = Tensor::zeros({}, DType::f64, dev), dx, dW = Tensor::zeros({V, d}, DType::f64, dev);
    nn::lm_head_cross_entropy_backward(x.to(dev), W.to(dev), targets.to(dev), args, loss, dx, dW);
    return std::vector<Tensor>{loss, dx, dW};
  };
  const auto c = run(kCpu), g = run(kGpu);
  CHECK(std::fabs(g[0].item() - c[0].item()) < 1e-13 * std::fabs(c[0].item()));
  CHECK(ops::max_rel_diff(g[1], c[1]) < 1e-12);
  CHECK(ops::max_rel_diff(g[2], c[2]) < 1e-12);
}
