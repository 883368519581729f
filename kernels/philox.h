// Counter-based random numbers shared bit-for-bit by the CPU and CUDA backends.
//
// Generator: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy
// as 1, 2, 3", SC'11): a 128-bit counter and a 64-bit key go through 10 rounds of
//   (c0, c1, c2, c3) -> (hi(M1 c2) ^ c1 ^ k0, lo(M1 c2), hi(M0 c0) ^ c3 ^ k1, lo(M0 c0))
// with M0 = 0xD2511F53, M1 = 0xCD9E8D57 and the key bumped by the Weyl constants
// (0x9E3779B9, 0xBB67AE85) between rounds. Element n of a stream uses
// counter (lo32(n), hi32(n), 0, 0) and key (lo32(seed), hi32(seed)).
//
// Transforms (double arithmetic, then one rounding to the output dtype):
//   uniform  u = top 53 bits of (r0, r1) * 2^-53 in [0, 1)
//   normal   Box-Muller: u1 = (53 bits of (r0, r1) + 1) * 2^-53 in (0, 1],
//            u2 = 53 bits of (r2, r3) * 2^-53, z = sqrt(-2 ln u1) cos(2 pi u2)
// ln and cos are evaluated here with +, *, / and sqrt only (each IEEE correctly rounded on
// both sides), never contracted into FMAs (device: __dmul_rn/__dadd_rn; host: an empty asm
// barrier after each product), so the double result, and hence every rounded element, is
// identical on the CPU and the GPU. Accuracy of ln/cos: a few ulps of double, far below
// what any output dtype can hold.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/half.h"

namespace lt::philox {

struct Key {
  uint32_t k0, k1;
};
struct Block {
  uint32_t r[4];
};

inline constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
inline constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

LT_HD Block philox4x32_10(Block c, Key k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k.k0 += kW0;
      k.k1 += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c.r[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c.r[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = Block{{hi1 ^ c.r[1] ^ k.k0, lo1, hi0 ^ c.r[3] ^ k.k1, lo0}};
  }
  return c;
}

// The 4 words for element n of the stream of `seed`.
LT_HD Block random_block(uint64_t seed, uint64_t n) {
  return philox4x32_10(Block{{static_cast<uint32_t>(n), static_cast<uint32_t>(n >> 32), 0u, 0u}},
                       Key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// ---- uncontracted double arithmetic --------------------------------------------------
LT_HD double rn_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  double p = a * b;
#if defined(__GNUC__)
  __asm__("" : "+m"(p));  // the product is materialised: no FMA contraction with a later add
#endif
  return p;
#endif
}
LT_HD double rn_add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

LT_HD double rn_sqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

LT_HD double bits53_unit(uint32_t hi, uint32_t lo) {  // [0, 1), multiples of 2^-53
  const uint64_t v = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(v) * 0x1p-53;
}

// ln(u) for u in (0, 1] (normal doubles only). u = 2^e m, m in (sqrt(1/2), sqrt(2)];
// ln m = 2 atanh(s) = 2 s sum_k s^2k / (2k + 1), s = (m - 1) / (m + 1), |s| <= 0.1716,
// so 13 terms leave a truncation error below 2^-60.
LT_HD double portable_log(double u) {
  const uint64_t bits = double_bits(u);
  int64_t e = static_cast<int64_t>((bits >> 52) & 0x7ff) - 1023;
  double m = bits_double((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull);  // [1, 2)
  if (m > 1.4142135623730951) {
    m = rn_mul(m, 0.5);
    e += 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double z = rn_mul(s, s);
  double p = 1.0 / 25.0;
  for (int k = 11; k >= 0; --k) p = rn_add(rn_mul(p, z), 1.0 / static_cast<double>(2 * k + 1));
  const double ln2 = 0.69314718055994530942;
  return rn_add(rn_mul(static_cast<double>(e), ln2), rn_mul(rn_mul(2.0, s), p));
}

// Taylor series on [0, pi/4]: 9 terms leave < 2^-60.
LT_HD double cos_series(double x) {
  const double z = rn_mul(x, x);
  double p = 0.0;
  // coefficients (-1)^k / (2k)!, k = 8 .. 0
  double fact = 1.0;
  double coef[9];
  for (int k = 0; k < 9; ++k) {
    coef[k] = (k % 2 ? -1.0 : 1.0) / fact;
    fact *= static_cast<double>((2 * k + 1) * (2 * k + 2));  // exact: 18! < 2^53
  }
  for (int k = 8; k >= 0; --k) p = rn_add(rn_mul(p, z), coef[k]);
  return p;
}
LT_HD double sin_series(double x) {
  const double z = rn_mul(x, x);
  double fact = 1.0;
  double coef[9];
  for (int k = 0; k < 9; ++k) {
    coef[k] = (k % 2 ? -1.0 : 1.0) / fact;
    fact *= static_cast<double>((2 * k + 2) * (2 * k + 3));  // (2k+1)! -> (2k+3)!
  }
  double p = 0.0;
  for (int k = 8; k >= 0; --k) p = rn_add(rn_mul(p, z), coef[k]);
  return rn_mul(x, p);
}
// cos(2 pi t) for t in [0, 1): symmetries reduce to an argument in [0, pi/4]; every
// reduction step (1 - t, 0.5 - t, 0.25 - t) is exact by Sterbenz's lemma.
LT_HD double portable_cos_2pi(double t) {
  if (t >= 0.5) t = 1.0 - t;  // [0, 0.5]
  double sign = 1.0;
  if (t > 0.25) {  // cos(2 pi t) = -cos(2 pi (0.5 - t))
    t = 0.5 - t;
    sign = -1.0;
  }
  const double two_pi = 6.283185307179586477;
  if (t > 0.125) return sign * sin_series(rn_mul(two_pi, 0.25 - t));
  return sign * cos_series(rn_mul(two_pi, t));
}

LT_HD double uniform_double(uint64_t seed, uint64_t n) {
  const Block b = random_block(seed, n);
  return bits53_unit(b.r[0], b.r[1]);
}
LT_HD double normal_double(uint64_t seed, uint64_t n) {
  const Block b = random_block(seed, n);
  const double u1 = rn_add(bits53_unit(b.r[0], b.r[1]), 0x1p-53);  // (0, 1]
  const double u2 = bits53_unit(b.r[2], b.r[3]);
  const double radius = rn_sqrt(rn_mul(-2.0, portable_log(u1)));
  return rn_mul(radius, portable_cos_2pi(u2));
}

}  // namespace lt::philox
