// The warp-level tensor-core helpers of the RWKV6 kernels (kernels/cuda/rwkv6_mma.cuh): every
// ldmatrix loader (A as stored / transposed, B stored N x K / K x N, one or two n8 tiles)
// feeding mma.m16n8k16, against a float64 product of the same bf16 values on random
// inputs; the output is NaN-poisoned first. A wrong fragment layout shows up here by name.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/rwkv6_mma.cuh"

namespace {

using lt::rwkv6::tc::bf16;
constexpr int kLd = 72;

// A [16][16], B [16][16] (K x N) in global fp32. out[v][16][16]: D = A B by variant v:
//   0: load_a + load_b_2n (B stored N x K)      1: load_a_trans (A stored K x M) + load_b_trans_2n
//   2: load_a + load_b x2 per n8 tile           3: load_a_trans + load_b_trans x2 per n8 tile
__global__ void mma_variants(const float* A, const float* B, float* out) {
  __shared__ __align__(16) bf16 a_s[16 * kLd], at_s[16 * kLd], b_kn[16 * kLd], b_nk[16 * kLd];
  const int l = threadIdx.x;
  for (int i = l; i < 256; i += 32) {
    const int r = i / 16, c = i % 16;
    a_s[r * kLd + c] = __float2bfloat16_rn(A[i]);   // A[m=r][k=c]
    at_s[c * kLd + r] = __float2bfloat16_rn(A[i]);  // A^T stored: row k, col m
    b_kn[r * kLd + c] = __float2bfloat16_rn(B[i]);  // B[k=r][n=c]
    b_nk[c * kLd + r] = __float2bfloat16_rn(B[i]);  // B stored N x K
  }
  __syncwarp();
  const int g = l >> 2, t = l & 3;
  for (int v = 0; v < 4; ++v) {
    float acc[2][4] = {};
    uint32_t a[4];
    if (v == 0 || v == 2) lt::rwkv6::tc::load_a(a, a_s, kLd, 0, 0);
    else lt::rwkv6::tc::load_a_trans(a, at_s, kLd, 0, 0);
    uint32_t b0[2], b1[2];
    if (v == 0) lt::rwkv6::tc::load_b_2n(b0, b1, b_nk, kLd, 0, 0);
    if (v == 1) lt::rwkv6::tc::load_b_trans_2n(b0, b1, b_kn, kLd, 0, 0);
    if (v == 2) lt::rwkv6::tc::load_b(b0, b_nk, kLd, 0, 0), lt::rwkv6::tc::load_b(b1, b_nk, kLd, 0, 8);
    if (v == 3) lt::rwkv6::tc::load_b_trans(b0, b_kn, kLd, 0, 0), lt::rwkv6::tc::load_b_trans(b1, b_kn, kLd, 0, 8);
    lt::rwkv6::tc::mma(acc[0], a, b0);
    lt::rwkv6::tc::mma(acc[1], a, b1);
    for (int nt = 0; nt < 2; ++nt)
      for (int e = 0; e < 4; ++e) out[v * 256 + (g + 8 * (e >> 1)) * 16 + 8 * nt + 2 * t + (e & 1)] = acc[nt][e];
  }
}

float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace

TEST_CASE("rwkv6 tensor-core helpers: every ldmatrix loader + mma.m16n8k16 matches a float64 product",
          "[rwkv6][cuda][mma]") {
  std::mt19937 rng(77);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> A(256), B(256);
  for (auto& x : A) x = nd(rng);
  for (auto& x : B) x = nd(rng);
  float *dA, *dB, *dO;
  LT_CUDA_CHECK(cudaMalloc(&dA, 256 * 4));
  LT_CUDA_CHECK(cudaMalloc(&dB, 256 * 4));
  LT_CUDA_CHECK(cudaMalloc(&dO, 4 * 256 * 4));
  LT_CUDA_CHECK(cudaMemcpy(dA, A.data(), 256 * 4, cudaMemcpyHostToDevice));
  LT_CUDA_CHECK(cudaMemcpy(dB, B.data(), 256 * 4, cudaMemcpyHostToDevice));
  LT_CUDA_CHECK(cudaMemset(dO, 0xFF, 4 * 256 * 4));
  mma_variants<<<1, 32>>>(dA, dB, dO);
  LT_CUDA_CHECK(cudaGetLastError());
  std::vector<float> out(4 * 256);
  LT_CUDA_CHECK(cudaMemcpy(out.data(), dO, out.size() * 4, cudaMemcpyDeviceToHost));
  LT_CUDA_CHECK(cudaFree(dA));
  LT_CUDA_CHECK(cudaFree(dB));
  LT_CUDA_CHECK(cudaFree(dO));
  const char* names[4] = {"load_a + load_b_2n", "load_a_trans + load_b_trans_2n", "load_a + load_b",
                          "load_a_trans + load_b_trans"};
  for (int v = 0; v < 4; ++v) {
    double num = 0, den = 0;
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        double ref = 0;
        for (int k = 0; k < 16; ++k) ref += double(bf16_round(A[m * 16 + k])) * double(bf16_round(B[k * 16 + n]));
        const double x = out[v * 256 + m * 16 + n];
        num += (x - ref) * (x - ref);
        den += ref * ref;
      }
    const double err = std::isnan(num) ? INFINITY : std::sqrt(num / den);
    std::printf("rwkv6 mma %-32s rel err %.2e\n", names[v], err);
    CHECK(err < 1e-6);
  }
}
