// Mixed-precision GEMM and TF32 emulation on the CPU (engine/ops.h matmul section):
// bf16 / f16 operands with an f32 output are the f64 sum of the exact products rounded once
// to f32 (never through bf16), beta = 1 accumulates into the f32 output, the dtype rules
// throw naming the dtypes; with set_matmul_tf32(true) an f32 GEMM equals the f64 sum over
// operands rounded to TF32 (a reference rounding written here independently of the kernel).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/ops.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;

namespace {

// C[b] = alpha * op(A[b]) op(B[b]) + beta * C0[b] in f64 on host values (any dtype
// converted exactly to double). a: [batch, M, K] (or [batch, K, M] with ta); b likewise.
std::vector<double> gemm_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t batch, int64_t M,
                             int64_t N, int64_t K, bool ta, bool tb, double alpha = 1.0, double beta = 0.0,
                             const std::vector<double>& c0 = {}) {
  std::vector<double> c(static_cast<size_t>(batch * M * N));
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = ta ? a[(bi * K + k) * M + m] : a[(bi * M + m) * K + k];
          const double bv = tb ? b[(bi * N + n) * K + k] : b[(bi * K + k) * N + n];
          s += av * bv;
        }
        const size_t i = static_cast<size_t>((bi * M + m) * N + n);
        c[i] = alpha * s + (beta != 0.0 ? beta * c0[i] : 0.0);
      }
  return c;
}

// Worst |c - ref| in units of ref's own f32 half-ulp (<= 1 means correctly rounded to f32).
double worst_f32_half_ulps(const std::vector<double>& c, const std::vector<double>& ref) {
  double worst = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i])) return INFINITY;
    int e = 0;
    std::frexp(ref[i], &e);                           // |ref| in [2^(e-1), 2^e)
    const double half_ulp = std::ldexp(1.0, e - 25);  // f32: 24 significant bits
    worst = std::max(worst, std::fabs(c[i] - ref[i]) / half_ulp);
  }
  return worst;
}

// Nearest TF32 (11 significant bits), ties away from zero: the reference for the emulation.
double ref_tf32(double x) {
  int e = 0;
  const double m = std::frexp(x, &e);  // x = m 2^e, |m| in [0.5, 1)
  return std::ldexp(std::round(std::ldexp(m, 11)), e - 11);
}
std::vector<double> to_tf32(std::vector<double> v) {
  for (double& x : v) x = ref_tf32(x);
  return v;
}

// Restores the process-wide TF32 setting when the test leaves, pass or fail.
struct Tf32Scope {
  explicit Tf32Scope(bool on) : was(ops::matmul_tf32()) { ops::set_matmul_tf32(on); }
  ~Tf32Scope() { ops::set_matmul_tf32(was); }
  bool was;
};

}  // namespace

TEST_CASE("matmul: bf16 / f16 operands with an f32 output round the exact sum once", "[ops][matmul][mixed]") {
  const int64_t batch = 2, M = 9, N = 11, K = 40;
  uint64_t seed = 100;
  for (DType dt : {DType::bf16, DType::f16}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO(dtype_name(dt) << " ta " << ta << " tb " << tb);
        const Tensor a = test::random_tensor(ta ? Shape{batch, K, M} : Shape{batch, M, K}, seed++, dt);
        const Tensor b = test::random_tensor(tb ? Shape{batch, N, K} : Shape{batch, K, N}, seed++, dt);
        const std::vector<double> ref = gemm_ref(a.to_vector(), b.to_vector(), batch, M, N, K, ta, tb);

        const Tensor c = ops::matmul(a, b, ta, tb, DType::f32);
        REQUIRE(c.dtype() == DType::f32);
        REQUIRE(c.shape() == Shape{batch, M, N});
        CHECK(worst_f32_half_ulps(c.to_vector(), ref) <= 1.0);

        Tensor out = Tensor::full({batch, M, N}, NAN, DType::f32);
        ops::matmul_out(out, a, b, ta, tb);
        CHECK(worst_f32_half_ulps(out.to_vector(), ref) <= 1.0);

        // The same-dtype output is that sum rounded to dt: far coarser than the f32 one.
        const std::vector<double> c_half = ops::matmul(a, b, ta, tb).to_vector();
        CHECK(worst_f32_half_ulps(c_half, ref) > 100.0);
      }
  }
}

TEST_CASE("matmul_out: f32 accumulation from bf16 operands (alpha, beta = 1, shared 2-D operand)",
          "[ops][matmul][mixed]") {
  // dW [E, D] += alpha dy^T x with x [R, D], dy [R, E] bf16 (the linear layer's weight grad).
  const int64_t R = 33, D = 12, E = 7;
  const Tensor x = test::random_tensor({R, D}, 200, DType::bf16);
  const Tensor dy = test::random_tensor({R, E}, 201, DType::bf16);
  const Tensor w0 = test::random_tensor({E, D}, 202, DType::f32);
  Tensor w = w0.clone();
  ops::matmul_out(w, dy, x, true, false, 0.5, 1.0);
  const std::vector<double> ref =
      gemm_ref(dy.to_vector(), x.to_vector(), 1, E, D, R, true, false, 0.5, 1.0, w0.to_vector());
  CHECK(worst_f32_half_ulps(w.to_vector(), ref) <= 1.0);

  // A batched bf16 operand against a shared 2-D one: x3 [2, R, D] @ W [E, D]^T -> f32 [2, R, E].
  const Tensor x3 = test::random_tensor({2, R, D}, 203, DType::bf16);
  const Tensor W = test::random_tensor({E, D}, 204, DType::bf16);
  std::vector<double> wv = W.to_vector(), wv2;
  wv2.insert(wv2.end(), wv.begin(), wv.end());
  wv2.insert(wv2.end(), wv.begin(), wv.end());
  const std::vector<double> ref3 = gemm_ref(x3.to_vector(), wv2, 2, R, E, D, false, true);
  CHECK(worst_f32_half_ulps(ops::matmul(x3, W, false, true, DType::f32).to_vector(), ref3) <= 1.0);
  // A transposed view of the bf16 operand (used in place with the flag flipped).
  CHECK(worst_f32_half_ulps(ops::matmul(x3, W.transpose(0, 1), false, false, DType::f32).to_vector(), ref3) <= 1.0);
}

TEST_CASE("matmul_out: a strided output (column blocks of a wider matrix) is written in place", "[ops][matmul]") {
  // G [d, k R] f32; its k column blocks viewed [k, d, R] += alpha dm_i^T z_i with dm [k, N, d],
  // z [k, N, R] bf16 (RWKV6's lerp weight gradient); the rest of G is untouched.
  const int64_t k = 3, N = 19, d = 6, R = 4;
  const Tensor dm = test::random_tensor({k, N, d}, 210, DType::bf16);
  const Tensor z = test::random_tensor({k, N, R}, 211, DType::bf16);
  const Tensor g0 = test::random_tensor({d, k * R}, 212, DType::f32);
  Tensor g = g0.clone();
  Tensor blocks = g.view({d, k, R}).permute({1, 0, 2});  // [k, d, R], strides (R, kR, 1)
  ops::matmul_out(blocks, dm, z, true, false, 0.5, 1.0);
  const std::vector<double> gv = g.to_vector(), g0v = g0.to_vector(), dmv = dm.to_vector(), zv = z.to_vector();
  double worst = 0;
  for (int64_t i = 0; i < k; ++i)
    for (int64_t r = 0; r < d; ++r)
      for (int64_t c = 0; c < R; ++c) {
        double acc = 0;
        for (int64_t n = 0; n < N; ++n) acc += dmv[(i * N + n) * d + r] * zv[(i * N + n) * R + c];
        const double want = g0v[r * k * R + i * R + c] + 0.5 * acc;
        worst = std::max(worst, std::abs(gv[r * k * R + i * R + c] - want) / (std::abs(want) + 1e-3));
      }
  CHECK(worst < 1e-6);
  // An output into the row blocks of a taller one: out [2, M, N] as [M, 2, N] permuted.
  const Tensor a = test::random_tensor({2, 5, 7}, 213, DType::f32), b = test::random_tensor({2, 7, 3}, 214, DType::f32);
  Tensor tall = Tensor::zeros({5, 2, 3}, DType::f32);
  Tensor tb = tall.permute({1, 0, 2});
  ops::matmul_out(tb, a, b);
  CHECK(test::rel_err(tb.contiguous().to_vector(), ops::matmul(a, b).to_vector()) < 1e-6);
  // Overlapping matrices are refused by name.
  Tensor small = Tensor::zeros({5, 4}, DType::f32);
  Tensor overlap = small.view({5, 1, 4}).expand({5, 2, 4}).permute({1, 0, 2}).narrow(2, 0, 3);
  CHECK_THROWS_WITH(ops::matmul_out(overlap, a, b), Catch::Contains("matmul_out"));
}

TEST_CASE("matmul: output dtype rules name the dtypes", "[ops][matmul][mixed]") {
  const Tensor a32 = test::random_tensor({3, 4}, 300), b32 = test::random_tensor({4, 5}, 301);
  const Tensor a16 = a32.to(DType::bf16), b16 = b32.to(DType::bf16);
  Tensor out_bf16 = Tensor::zeros({3, 5}, DType::bf16), out_f64 = Tensor::zeros({3, 5}, DType::f64);
  CHECK_THROWS_WITH(ops::matmul_out(out_bf16, a32, b32), Catch::Contains("bf16") && Catch::Contains("f32"));
  CHECK_THROWS_WITH(ops::matmul_out(out_f64, a16, b16), Catch::Contains("f64") && Catch::Contains("bf16"));
  CHECK_THROWS_WITH(ops::matmul(a32, b32, false, false, DType::f16), Catch::Contains("matmul"));
  CHECK_THROWS_WITH(ops::matmul(a16, b32, false, false, DType::f32), Catch::Contains("matmul"));
  CHECK(ops::matmul(a32, b32, false, false, DType::f32).dtype() == DType::f32);
  CHECK(ops::matmul(a16, b16, false, false, DType::bf16).dtype() == DType::bf16);
}

TEST_CASE("matmul: TF32 emulation rounds f32 operands to 10 mantissa bits", "[ops][matmul][tf32]") {
  REQUIRE_FALSE(ops::matmul_tf32());  // off by default
  const int64_t batch = 2, M = 8, N = 10, K = 48;
  uint64_t seed = 400;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      INFO("ta " << ta << " tb " << tb);
      const Tensor a = test::random_tensor(ta ? Shape{batch, K, M} : Shape{batch, M, K}, seed++);
      const Tensor b = test::random_tensor(tb ? Shape{batch, N, K} : Shape{batch, K, N}, seed++);
      const std::vector<double> av = a.to_vector(), bv = b.to_vector();
      const std::vector<double> ref_tf = gemm_ref(to_tf32(av), to_tf32(bv), batch, M, N, K, ta, tb);
      const std::vector<double> ref_fp = gemm_ref(av, bv, batch, M, N, K, ta, tb);
      const std::vector<double> plain = ops::matmul(a, b, ta, tb).to_vector();
      std::vector<double> tf;
      {
        Tf32Scope on(true);
        CHECK(ops::matmul_tf32());
        tf = ops::matmul(a, b, ta, tb).to_vector();
      }
      CHECK_FALSE(ops::matmul_tf32());
      CHECK(worst_f32_half_ulps(tf, ref_tf) <= 1.0);
      CHECK(worst_f32_half_ulps(plain, ref_fp) <= 1.0);
      // TF32 costs about 2^-11 relative per operand: visible against fp32, small overall.
      const double tf_vs_fp = test::rel_err(tf, ref_fp);
      CHECK(tf_vs_fp > 1e-5);
      CHECK(tf_vs_fp < 2e-3);
    }
  // Ties round away from zero; values already in TF32 are unchanged; other dtypes ignore it.
  const Tensor ties = Tensor::from_vector(
      std::vector<double>{1.0 + std::ldexp(1.0, -11), -(1.0 + 3 * std::ldexp(1.0, -11)), 1.0 + std::ldexp(1.0, -10)},
      {1, 3}, DType::f32);
  const Tensor one = Tensor::full({3, 1}, 1.0, DType::f32);
  Tf32Scope on(true);
  const std::vector<double> r = ops::matmul(ties.transpose(0, 1), Tensor::full({1, 1}, 1.0)).to_vector();
  CHECK(r[0] == 1.0 + std::ldexp(1.0, -10));
  CHECK(r[1] == -(1.0 + 2 * std::ldexp(1.0, -10)));
  CHECK(r[2] == 1.0 + std::ldexp(1.0, -10));
  CHECK(ops::matmul(ties, one).item() == ref_tf32(1.0 + std::ldexp(1.0, -11)) +
                                             ref_tf32(-(1.0 + 3 * std::ldexp(1.0, -11))) +
                                             ref_tf32(1.0 + std::ldexp(1.0, -10)));
  const Tensor a64 = test::random_tensor({5, 6}, 450, DType::f64), b64 = test::random_tensor({6, 4}, 451, DType::f64);
  CHECK(test::rel_err(ops::matmul(a64, b64).to_vector(),
                      gemm_ref(a64.to_vector(), b64.to_vector(), 1, 5, 4, 6, false, false)) < 1e-15);
  const Tensor a16 = a64.to(DType::bf16), b16 = b64.to(DType::bf16);
  CHECK(worst_f32_half_ulps(ops::matmul(a16, b16, false, false, DType::f32).to_vector(),
                            gemm_ref(a16.to_vector(), b16.to_vector(), 1, 5, 4, 6, false, false)) <= 1.0);
}
