// Linear layer on CUDA against the CPU (engine/nn/linear.h): the accumulating backward
// (linear_backward_add: dx_acc += dy W as one GEMM with beta = 1) in f32 and bf16 at a model
// shape and an odd one, the accumulator and dW starting from the same random values on both
// sides. Runs only with a GPU (the cuda test main exits 77 otherwise).
#include <catch2/catch.hpp>

#include "engine/nn/linear.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using namespace lt::test;

TEST_CASE("cuda linear_backward_add matches the CPU", "[nn][linear][cuda]") {
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  struct Case {
    int64_t R, in, out;
  };
  uint64_t seed = 7000;
  for (DType dt : {DType::f32, DType::bf16})
    for (const Case& k : {Case{4096, 768, 64}, Case{37, 100, 13}}) {
      INFO(dtype_name(dt) << " R " << k.R << " in " << k.in << " out " << k.out);
      seed += 10;
      const Tensor x = random_tensor({k.R, k.in}, seed, dt), dy = random_tensor({k.R, k.out}, seed + 1, dt);
      const Tensor W = random_tensor({k.out, k.in}, seed + 2, dt);
      const Tensor acc0 = random_tensor({k.R, k.in}, seed + 3, dt), dW0 = random_tensor({k.out, k.in}, seed + 4);
      Tensor acc_c = acc0.clone(), dW_c = dW0.clone();
      Tensor acc_g = acc0.to(gpu), dW_g = dW0.to(gpu);
      nn::linear_backward_add(dy, x, W, dW_c, acc_c);
      nn::linear_backward_add(dy.to(gpu), x.to(gpu), W.to(gpu), dW_g, acc_g);
      // the CPU sums in f64 and rounds once; cuBLAS in f32, then one rounding (bf16: 2^-8)
      CHECK(rel_err(acc_g.to(cpu).to_vector(), acc_c.to_vector()) < (dt == DType::f32 ? 1e-5 : 8e-3));
      CHECK(rel_err((dW_g.to(cpu) - dW0).to_vector(), (dW_c - dW0).to_vector()) < 1e-5);
    }
}
