// Mixed-precision GEMM and TF32 on CUDA against the CPU: bf16 / f16 operands with an f32
// output (cublasGemmStridedBatchedEx, Ctype CUDA_R_32F) for every transpose flag, batched and
// with a shared 2-D operand, beta = 1 accumulation into f32; f32 GEMMs with
// set_matmul_tf32(true) (CUBLAS_COMPUTE_32F_FAST_TF32) against the CPU's TF32 emulation.
// Outputs written from scratch are poisoned with NaN first.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/ops.h"
#include "engine/tensor.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using test::rel_err;

namespace {

const Device kGpu = Device::cuda(0);

struct Tf32Scope {
  explicit Tf32Scope(bool on) : was(ops::matmul_tf32()) { ops::set_matmul_tf32(on); }
  ~Tf32Scope() { ops::set_matmul_tf32(was); }
  bool was;
};

// Random f32 values with at most 11 significant bits (exactly representable in TF32).
Tensor tf32_exact(const Shape& shape, uint64_t seed) {
  std::vector<double> v = test::random_tensor(shape, seed, DType::f64).to_vector();
  for (double& x : v) {
    int e = 0;
    const double m = std::frexp(x, &e);
    x = std::ldexp(std::round(std::ldexp(m, 11)), e - 11);
  }
  return Tensor::from_vector(v, shape, DType::f32);
}

}  // namespace

TEST_CASE("cuda: bf16 / f16 operands with an f32 output match the CPU", "[engine][cuda][matmul][mixed]") {
  // The CPU sums exactly (f64) and rounds once; cuBLAS accumulates in fp32: the f32 GEMM
  // tolerance. A bf16-rounded output would miss it by two orders of magnitude.
  const double tol = 1e-5;
  const int64_t M = 37, K = 64, N = 29;
  uint64_t seed = 500;
  for (DType dt : {DType::bf16, DType::f16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO(dtype_name(dt) << " ta " << ta << " tb " << tb);
        const Tensor a = test::random_tensor(ta ? Shape{2, 3, K, M} : Shape{2, 3, M, K}, seed++, dt);
        const Tensor b = test::random_tensor(tb ? Shape{2, 3, N, K} : Shape{2, 3, K, N}, seed++, dt);
        const Tensor w = test::random_tensor(tb ? Shape{N, K} : Shape{K, N}, seed++, dt);
        const Tensor ga = a.to(kGpu), gb = b.to(kGpu), gw = w.to(kGpu);

        const Tensor ref = ops::matmul(a, b, ta, tb, DType::f32);
        Tensor out = Tensor::full({2, 3, M, N}, NAN, DType::f32, kGpu);
        ops::matmul_out(out, ga, gb, ta, tb);
        CHECK(rel_err(out.to_vector(), ref.to_vector()) <= tol);
        const Tensor c = ops::matmul(ga, gb, ta, tb, DType::f32);
        REQUIRE(c.dtype() == DType::f32);
        CHECK(rel_err(c.to_vector(), ref.to_vector()) <= tol);

        // Shared 2-D operand (x[B, T, D] @ W) and transposed views instead of flags.
        const Tensor ref_w = ops::matmul(a, w, ta, tb, DType::f32);
        Tensor out_w = Tensor::full({2, 3, M, N}, NAN, DType::f32, kGpu);
        ops::matmul_out(out_w, ga, gw, ta, tb);
        CHECK(rel_err(out_w.to_vector(), ref_w.to_vector()) <= tol);
        const Tensor c_views = ops::matmul(ga.transpose(-1, -2), gb.transpose(-1, -2), !ta, !tb, DType::f32);
        CHECK(rel_err(c_views.to_vector(), ref.to_vector()) <= tol);
      }
}

TEST_CASE("cuda: f32 weight gradient accumulates from bf16 operands (beta = 1)", "[engine][cuda][matmul][mixed]") {
  // dW [E, D] = 0.5 dy^T x + dW0, with x [R, D] and dy [R, E] bf16, dW f32.
  const int64_t R = 300, D = 48, E = 40;
  const Tensor x = test::random_tensor({R, D}, 600, DType::bf16);
  const Tensor dy = test::random_tensor({R, E}, 601, DType::bf16);
  const Tensor w0 = test::random_tensor({E, D}, 602, DType::f32);
  Tensor w_cpu = w0.clone();
  ops::matmul_out(w_cpu, dy, x, true, false, 0.5, 1.0);
  Tensor w_gpu = w0.to(kGpu);
  ops::matmul_out(w_gpu, dy.to(kGpu), x.to(kGpu), true, false, 0.5, 1.0);
  CHECK(rel_err(w_gpu.to_vector(), w_cpu.to_vector()) <= 1e-5);
  // Twice more: the accumulation keeps adding (not overwriting) on both devices.
  for (int i = 0; i < 2; ++i) {
    ops::matmul_out(w_cpu, dy, x, true, false, 0.5, 1.0);
    ops::matmul_out(w_gpu, dy.to(kGpu), x.to(kGpu), true, false, 0.5, 1.0);
  }
  CHECK(rel_err(w_gpu.to_vector(), w_cpu.to_vector()) <= 1e-5);
}

TEST_CASE("cuda: TF32 f32 GEMMs match the CPU's TF32 emulation", "[engine][cuda][matmul][tf32]") {
  const int64_t M = 128, K = 256, N = 96;
  uint64_t seed = 700;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      INFO("ta " << ta << " tb " << tb);
      // Operands already in TF32: every rounding mode leaves them alone, so TF32 products are
      // exact and only the fp32 accumulation differs from the CPU: the f32 GEMM tolerance.
      const Tensor a = tf32_exact(ta ? Shape{2, K, M} : Shape{2, M, K}, seed++);
      const Tensor b = tf32_exact(tb ? Shape{2, N, K} : Shape{2, K, N}, seed++);
      const Tensor ref = ops::matmul(a, b, ta, tb);
      Tf32Scope on(true);
      Tensor out = Tensor::full({2, M, N}, NAN, DType::f32, kGpu);
      ops::matmul_out(out, a.to(kGpu), b.to(kGpu), ta, tb);
      CHECK(rel_err(out.to_vector(), ref.to_vector()) <= 1e-5);
      // beta = 1 accumulation under TF32 (the accumulator itself stays fp32).
      Tensor acc_cpu = ref.clone();
      ops::matmul_out(acc_cpu, a, b, ta, tb, 0.5, 1.0);
      Tensor acc_gpu = ref.to(kGpu);
      ops::matmul_out(acc_gpu, a.to(kGpu), b.to(kGpu), ta, tb, 0.5, 1.0);
      CHECK(rel_err(acc_gpu.to_vector(), acc_cpu.to_vector()) <= 1e-5);
    }
  // Random f32 operands: each is rounded to 11 significant bits. The CPU rounds to nearest
  // (ties away); the tensor cores may truncate instead, a per-operand difference of 0 or
  // 2^-10 relative (rms ~7e-4). Summed over K random-signed products that is a random walk
  // whose worst element over ~2.5e4 outputs stays near 1e-3 of the largest |C| (both grow
  // as sqrt(K)), so 3e-3 bounds both the CPU emulation and the fp32 result by ~3x.
  for (bool ta : {false, true}) {
    INFO("random operands, ta " << ta);
    const Tensor a = test::random_tensor(ta ? Shape{2, K, M} : Shape{2, M, K}, seed++);
    const Tensor b = test::random_tensor({2, K, N}, seed++);
    const Tensor fp32_ref = ops::matmul(a, b, ta, false);
    Tf32Scope on(true);
    const Tensor tf32_ref = ops::matmul(a, b, ta, false);
    Tensor out = Tensor::full({2, M, N}, NAN, DType::f32, kGpu);
    ops::matmul_out(out, a.to(kGpu), b.to(kGpu), ta, false);
    const double err_tf32 = rel_err(out.to_vector(), tf32_ref.to_vector());
    const double err_fp32 = rel_err(out.to_vector(), fp32_ref.to_vector());
    INFO("cuda tf32 vs cpu tf32 " << err_tf32 << ", vs cpu fp32 " << err_fp32);
    CHECK(err_tf32 <= 3e-3);
    CHECK(err_fp32 <= 3e-3);
  }
  // Off again: the f32 GEMM is plain fp32 to the usual tolerance.
  CHECK_FALSE(ops::matmul_tf32());
  const Tensor a = test::random_tensor({64, 80}, 750), b = test::random_tensor({80, 48}, 751);
  CHECK(rel_err(ops::matmul(a.to(kGpu), b.to(kGpu)).to_vector(), ops::matmul(a, b).to_vector()) <= 1e-5);
}
