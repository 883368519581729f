// The warp-level tensor-core helpers of the mixer kernels (kernels/cuda/mma.cuh): every
// ldmatrix loader (A as stored / transposed, B stored N x K / K x N, one or two n8 tiles)
// feeding mma.m16n8k16 (bf16), and mma.m16n8k8 (TF32) fed by the fragment layout the header
// states, each against a float64 product of the same rounded values on random inputs; the
// outputs are NaN-poisoned first. A wrong fragment layout shows up here by name.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma.cuh"

namespace {

namespace tc = lt::tc;
using tc::bf16;
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
    if (v == 0 || v == 2) tc::load_a(a, a_s, kLd, 0, 0);
    else tc::load_a_trans(a, at_s, kLd, 0, 0);
    uint32_t b0[2], b1[2];
    if (v == 0) tc::load_b_2n(b0, b1, b_nk, kLd, 0, 0);
    if (v == 1) tc::load_b_trans_2n(b0, b1, b_kn, kLd, 0, 0);
    if (v == 2) tc::load_b(b0, b_nk, kLd, 0, 0), tc::load_b(b1, b_nk, kLd, 0, 8);
    if (v == 3) tc::load_b_trans(b0, b_kn, kLd, 0, 0), tc::load_b_trans(b1, b_kn, kLd, 0, 8);
    tc::mma(acc[0], a, b0);
    tc::mma(acc[1], a, b1);
    for (int nt = 0; nt < 2; ++nt)
      for (int e = 0; e < 4; ++e) out[v * 256 + (g + 8 * (e >> 1)) * 16 + 8 * nt + 2 * t + (e & 1)] = acc[nt][e];
  }
}

// A [16][8], B [8][8] (K x N) in global fp32, each value exactly a TF32 number. out[16][8] = A B
// through one mma_tf32 with the fragments of the m16n8k8 .tf32 layout:
//   a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4];  b0 = B[t][g], b1 = B[t+4][g].
__global__ void mma_tf32_product(const float* A, const float* B, float* out) {
  const int l = threadIdx.x, g = l >> 2, t = l & 3;
  const uint32_t a[4] = {__float_as_uint(A[g * 8 + t]), __float_as_uint(A[(g + 8) * 8 + t]),
                         __float_as_uint(A[g * 8 + t + 4]), __float_as_uint(A[(g + 8) * 8 + t + 4])};
  const uint32_t b[2] = {__float_as_uint(B[t * 8 + g]), __float_as_uint(B[(t + 4) * 8 + g])};
  float acc[4] = {};
  tc::mma_tf32(acc, a, b);
  for (int e = 0; e < 4; ++e) out[(g + 8 * (e >> 1)) * 8 + 2 * t + (e & 1)] = acc[e];
}

// x with the low 13 mantissa bits cleared: a TF32 value, which the tensor core reads exactly.
float tf32_truncate(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u &= 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
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

TEST_CASE("tensor-core helpers: every ldmatrix loader + mma.m16n8k16 matches a float64 product", "[rwkv6][cuda][mma]") {
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
    std::printf("mma.m16n8k16 %-32s rel err %.2e\n", names[v], err);
    CHECK(err < 1e-6);
  }
}

TEST_CASE("tensor-core helpers: mma.m16n8k8 TF32 matches a float64 product", "[kda][cuda][mma]") {
  std::mt19937 rng(78);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> A(128), B(64);
  for (auto& x : A) x = tf32_truncate(nd(rng));
  for (auto& x : B) x = tf32_truncate(nd(rng));
  float *dA, *dB, *dO;
  LT_CUDA_CHECK(cudaMalloc(&dA, A.size() * 4));
  LT_CUDA_CHECK(cudaMalloc(&dB, B.size() * 4));
  LT_CUDA_CHECK(cudaMalloc(&dO, 128 * 4));
  LT_CUDA_CHECK(cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice));
  LT_CUDA_CHECK(cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice));
  LT_CUDA_CHECK(cudaMemset(dO, 0xFF, 128 * 4));
  mma_tf32_product<<<1, 32>>>(dA, dB, dO);
  LT_CUDA_CHECK(cudaGetLastError());
  std::vector<float> out(128);
  LT_CUDA_CHECK(cudaMemcpy(out.data(), dO, out.size() * 4, cudaMemcpyDeviceToHost));
  LT_CUDA_CHECK(cudaFree(dA));
  LT_CUDA_CHECK(cudaFree(dB));
  LT_CUDA_CHECK(cudaFree(dO));
  double num = 0, den = 0;
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double ref = 0;
      for (int k = 0; k < 8; ++k) ref += double(A[m * 8 + k]) * double(B[k * 8 + n]);
      const double x = out[m * 8 + n];
      num += (x - ref) * (x - ref);
      den += ref * ref;
    }
  const double err = std::isnan(num) ? INFINITY : std::sqrt(num / den);
  std::printf("mma.m16n8k8 tf32 rel err %.2e\n", err);
  CHECK(err < 1e-6);
}
