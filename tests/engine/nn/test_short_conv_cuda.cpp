// Causal depthwise short convolution, CUDA against the CPU on the same random inputs (never
// zeros): f32 and bf16, every width 1..8, with and without SiLU, odd sizes (T = 37, T = 1,
// C = 100 not a multiple of the 128-channel block), a model-sized case (B = 8, T = 512,
// C = 768). Outputs and scratch NaN-poisoned through the allocator's poison mode; dw starts
// from the same random values on both sides. Also bit-identical results run to run.
// Runs only with a GPU (the cuda test main exits 77 otherwise).
#include <catch2/catch.hpp>

#include <cstring>

#include "allocator/caching_allocator.h"
#include "engine/nn/short_conv.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using namespace lt::test;

namespace {

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();

// f32: same sums in different orders. bf16 (y, dx): neighbouring bf16 roundings of nearly
// equal f32 values, one bf16 ulp = 2^-8 of an element; 8e-3 relative to the largest. dw: f32.
double act_tol(DType dt) { return dt == DType::f32 ? 1e-5 : 8e-3; }
constexpr double kWeightTol = 1e-5;

struct Case {
  int64_t B, T, C, W;
};

}  // namespace

TEST_CASE("cuda short_conv: forward and backward match the CPU", "[nn][short_conv][cuda]") {
  PoisonScope poison;
  std::vector<Case> cases = {{2, 37, 100, 4}, {1, 1, 33, 4}, {2, 5, 7, 8}, {8, 512, 768, 4}};
  for (int64_t W = 1; W <= 8; ++W) cases.push_back({3, 100, 37, W});
  uint64_t seed = 5000;
  for (DType dt : {DType::f32, DType::bf16})
    for (const Case& k : cases)
      for (bool silu : {true, false}) {
        INFO(dtype_name(dt) << " B " << k.B << " T " << k.T << " C " << k.C << " W " << k.W << " silu " << silu);
        seed += 10;
        const Tensor x = random_tensor({k.B, k.T, k.C}, seed, dt);
        const Tensor w = random_tensor({k.C, k.W}, seed + 1) * 0.5;
        const Tensor dy = random_tensor(x.shape(), seed + 2, dt);
        const Tensor xg = x.to(kGpu), wg = w.to(kGpu), dyg = dy.to(kGpu);
        const Tensor yc = nn::short_conv_forward(x, w, silu), yg = nn::short_conv_forward(xg, wg, silu);
        REQUIRE(yg.device() == kGpu);
        CHECK(rel_err(yg.to_vector(), yc.to_vector()) < act_tol(dt));
        const Tensor dw0 = random_tensor(w.shape(), seed + 3);
        Tensor dw_c = dw0.clone(), dw_g = dw0.to(kGpu);
        const Tensor dxc = nn::short_conv_backward(dy, x, w, dw_c, silu);
        const Tensor dxg = nn::short_conv_backward(dyg, xg, wg, dw_g, silu);
        CHECK(rel_err(dxg.to_vector(), dxc.to_vector()) < act_tol(dt));
        CHECK(rel_err((dw_g.to(kCpu) - dw0).to_vector(), (dw_c - dw0).to_vector()) < kWeightTol);
      }
}

TEST_CASE("cuda short_conv: bit-identical results run to run", "[nn][short_conv][cuda]") {
  const Tensor x = random_tensor({4, 300, 200}, 6000, DType::f32, kGpu);
  const Tensor w = (random_tensor({200, 4}, 6001) * 0.5).to(kGpu);
  const Tensor dy = random_tensor(x.shape(), 6002, DType::f32, kGpu);
  CHECK(same_bits(nn::short_conv_forward(x, w), nn::short_conv_forward(x, w)));
  Tensor dw_a = Tensor::zeros(w.shape(), DType::f32, kGpu), dw_b = Tensor::zeros(w.shape(), DType::f32, kGpu);
  const Tensor dx_a = nn::short_conv_backward(dy, x, w, dw_a), dx_b = nn::short_conv_backward(dy, x, w, dw_b);
  CHECK(same_bits(dx_a, dx_b));
  CHECK(same_bits(dw_a, dw_b));
}
