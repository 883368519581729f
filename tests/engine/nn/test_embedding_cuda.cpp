// Token embedding on CUDA against the CPU on the same random inputs: forward and the
// deterministic backward are bit-identical (same accumulation rule), with a hot row, rows
// that never occur and a partial column tile; fresh outputs NaN-poisoned; bad
// indices reported by the next call.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/device.h"
#include "engine/nn/embedding.h"
#include "engine/ops.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using lt::test::PoisonScope;
using lt::test::same_bits;

namespace {

const Device kGpu = Device::cuda(0);

// n indices in [0, V) with heavy repeats: every fifth token is row 3 (a hot row), the rest
// uniform over [0, V / 2) so that half the rows never occur.
Tensor make_indices(int64_t n, int64_t V, DType dt, uint64_t seed) {
  std::vector<double> u = ops::rand({n}, seed, 0, DType::f64).to_vector();
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[i] = i % 5 == 0 ? 3 : static_cast<int64_t>(u[i] * static_cast<double>(V / 2));
  return Tensor::from_vector(idx, {n}, dt);
}

}  // namespace

TEST_CASE("cuda embedding matches the CPU bit for bit", "[nn][embedding][cuda]") {
  PoisonScope poison;
  // d = 300: two column tiles, the second partial; n = 4500: a hot row (900 occurrences, the
  // first at t = 0) and rows first seen late, in scans longer than one 128-token step.
  const int64_t V = 1001, d = 300, n = 4500;
  for (DType idx_dt : {DType::i32, DType::i64}) {
    INFO(dtype_name(idx_dt));
    const Tensor idx = make_indices(n, V, idx_dt, 1);
    const Tensor W = test::random_tensor({V, d}, 2);
    for (DType act : {DType::f32, DType::bf16}) {
      INFO(dtype_name(act));
      const Tensor y_cpu = nn::embedding_forward(idx, W, act);
      const Tensor y_gpu = nn::embedding_forward(idx.to(kGpu), W.to(kGpu), act);
      CHECK(same_bits(y_gpu, y_cpu));

      const Tensor dy = test::random_tensor({n, d}, 3, act);
      const Tensor dW0 = test::random_tensor({V, d}, 4);
      Tensor dW_cpu = dW0.clone();
      Tensor dW_gpu = dW0.to(kGpu);
      nn::embedding_backward(dy, idx, dW_cpu);
      nn::embedding_backward(dy.to(kGpu), idx.to(kGpu), dW_gpu);
      CHECK(same_bits(dW_gpu, dW_cpu));
      CHECK(ops::max_abs_diff(dW_cpu, dW0) > 0.0);  // the test is not vacuous
      // and again on the device: bit-identical reruns
      Tensor dW_again = dW0.to(kGpu);
      nn::embedding_backward(dy.to(kGpu), idx.to(kGpu), dW_again);
      CHECK(same_bits(dW_again, dW_gpu));
    }
  }
  // a [B, T] index tensor and a small odd width
  const Tensor idx2 = make_indices(3 * 7, 50, DType::i64, 5).view({3, 7});
  const Tensor W2 = test::random_tensor({50, 5}, 6);
  CHECK(same_bits(nn::embedding_forward(idx2.to(kGpu), W2.to(kGpu), DType::f32),
                  nn::embedding_forward(idx2, W2, DType::f32)));
}

TEST_CASE("cuda embedding reports an out-of-range index at the next call", "[nn][embedding][cuda]") {
  const Tensor W = test::random_tensor({10, 4}, 1, DType::f32, kGpu);
  const Tensor bad = Tensor::from_vector(std::vector<int64_t>{1, 12, 2}, {3}, DType::i64, kGpu);
  const Tensor good = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3}, DType::i64, kGpu);
  Tensor y = nn::embedding_forward(bad, W, DType::f32);
  (void)y.to_vector();  // the launch has completed
  CHECK_THROWS_WITH(nn::embedding_forward(good, W, DType::f32),
                    Catch::Contains("index 12") && Catch::Contains("[0, 10)"));
  CHECK_NOTHROW(nn::embedding_forward(good, W, DType::f32).to_vector());  // the record was cleared
  Tensor dW = Tensor::zeros({10, 4}, DType::f32, kGpu);
  const Tensor neg = Tensor::from_vector(std::vector<int64_t>{-7, 2, 3}, {3}, DType::i32, kGpu);
  nn::embedding_backward(test::random_tensor({3, 4}, 2, DType::f32, kGpu), neg, dW);
  (void)dW.to_vector();
  CHECK_THROWS_WITH(nn::embedding_backward(test::random_tensor({3, 4}, 2, DType::f32, kGpu), good, dW),
                    Catch::Contains("index -7"));
}
