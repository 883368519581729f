// The CPU twin's executor (kernels/cpu/kda/emulator.h) against plain arithmetic: the bf16 tile
// fragments and m16n8k16 products of the block programs (kernels/kda/tiles.h), and the two-term
// bf16 split those programs stage the state with. The CUDA side of the same contract (ldmatrix,
// mma.sync) is tested in tests/kernels/test_mma_cuda.cu.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/kda/emulator.h"
#include "kernels/half.h"
#include "kernels/kda/tiles.h"
#include "tests/support/test_seed.h"

using namespace lt;
using lt::testing::replay_hint;
using lt::testing::test_seed;

TEST_CASE("KDA CPU twin executor: bf16 fragments and m16n8k16 products equal a float64 tile product",
          "[kda][twin][emu]") {
  // C (M x N) = A (M x K, row-major) B, with B stored N x K (frag_b); as a second product B stored
  // K x N (frag_b_t), as a third A stored K x M (frag_a_t); every tile padded to LD columns whose padding is a NaN pattern: a fragment that
  // reads past its tile poisons the result.
  constexpr int M = 32, N = 16, K = 48, LD = K + 8, LDT = N + 8, LDAT = M + 8;
  std::mt19937_64 rng(test_seed() + 11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<uint16_t> A(M * LD, 0x7fc1), B(N * LD, 0x7fc1);
  for (int r = 0; r < M; ++r)
    for (int k = 0; k < K; ++k) A[r * LD + k] = float_to_bf16_bits(u(rng));
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) B[n * LD + k] = float_to_bf16_bits(u(rng));
  std::vector<uint16_t> Bt(K * LDT, 0x7fc1), At(K * LDAT, 0x7fc1);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k) Bt[k * LDT + n] = B[n * LD + k];
  for (int r = 0; r < M; ++r)
    for (int k = 0; k < K; ++k) At[k * LDAT + r] = A[r * LD + k];
  std::vector<float> C(M * N, std::numeric_limits<float>::quiet_NaN()), Ct(C), Ca(C);
  // Two warps; warp w takes the 16 x 8 tiles (mt, nt) with mt = w.
  kda::emu::emulate_grid(1, 64, 0, [&](kda::emu::EmuBlock& blk, int64_t, float*) {
    const int lane = blk.tid() % 32, mt = blk.tid() / 32, g = lane >> 2, t = lane & 3;
    for (int nt = 0; nt < N / 8; ++nt) {
      float acc[4] = {}, acct[4] = {}, acca[4] = {};
      for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[4], at[4], b[2], bt[2];
        blk.frag_a(a, A.data(), LD, 16 * mt, k0);
        blk.frag_a_t(at, At.data(), LDAT, 16 * mt, k0);
        blk.frag_b(b, B.data(), LD, k0, 8 * nt);
        blk.frag_b_t(bt, Bt.data(), LDT, k0, 8 * nt);
        blk.mma_bf16(acc, a, b);
        blk.mma_bf16(acct, a, bt);
        blk.mma_bf16(acca, at, b);
      }
      for (int e = 0; e < 4; ++e) {
        const int i = (16 * mt + g + ((e & 2) ? 8 : 0)) * N + 8 * nt + 2 * t + (e & 1);
        C[i] = acc[e];
        Ct[i] = acct[e];
        Ca[i] = acca[e];
      }
    }
  });
  double worst = 0;
  for (int r = 0; r < M; ++r)
    for (int n = 0; n < N; ++n) {
      double s = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double p = static_cast<double>(bf16_bits_to_float(A[r * LD + k])) * bf16_bits_to_float(B[n * LD + k]);
        s += p;
        mag += std::fabs(p);
      }
      // bf16 x bf16 is exact in fp32; what is left is fp32 accumulation over K terms
      const double err = std::fabs(C[r * N + n] - s) / (mag + 1e-30);
      INFO("C[" << r << "][" << n << "] = " << C[r * N + n] << ", float64 " << s << replay_hint());
      REQUIRE(err < K * 6e-8);
      REQUIRE(Ct[r * N + n] == C[r * N + n]);  // the same products in the same order
      REQUIRE(Ca[r * N + n] == C[r * N + n]);
      worst = std::max(worst, err);
    }
  std::printf("[kda] emulated bf16 m16n8k16 tiles vs float64: worst %.2e of the terms' magnitude\n", worst);
}

TEST_CASE("KDA bf16 tiles: the two-term split x ~ hi + lo keeps x to 2^-16", "[kda][emu]") {
  std::mt19937_64 rng(test_seed() + 12);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-60, 60);
  double worst = 0;
  for (int i = 0; i < 100000; ++i) {
    const float x = (i & 1 ? -1.0f : 1.0f) * std::ldexp(mant(rng), ex(rng));
    const float hi = kda::blocks::bf16_round(x);
    const float lo = bf16_bits_to_float(float_to_bf16_bits(x - hi));  // as the programs store it
    REQUIRE(float_to_bf16_bits(hi) == (float_bits(hi) >> 16));        // hi is a bf16 value
    REQUIRE(std::fabs(x - hi) <= std::ldexp(std::fabs(x), -8));       // nearest: half a bf16 ulp
    const double err = std::fabs(static_cast<double>(x) - hi - lo) / std::fabs(x);
    INFO("x = " << x << replay_hint());
    REQUIRE(err <= std::ldexp(1.0, -16));
    worst = std::max(worst, err);
  }
  std::printf("[kda] two-term bf16 split: worst relative error %.2e (2^-16 = %.2e)\n", worst, std::ldexp(1.0, -16));
}
