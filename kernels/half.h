// 16-bit float types and the element conversions every kernel uses, one definition for
// the CPU and CUDA backends (LT_HD = __host__ __device__ under nvcc), so both round the
// same way bit for bit.
//
//   f32 -> bf16   round to nearest even on the upper 16 bits; NaN -> quiet NaN (sign kept)
//   f32 -> f16    round to nearest even, subnormals kept, |x| >= 65520 -> inf, NaN -> 0x7e00
//   bf16/f16 -> f32, f32 -> f64: exact
//   f64 -> bf16/f16: through f32 (two roundings, as PyTorch does)
//   float -> int: truncation toward zero (values out of range: unspecified)
// Compute types: f64 computes in double, every other float dtype in float.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/dtype.h"

#if defined(__CUDACC__)
#define LT_HD __host__ __device__ __forceinline__
#else
#define LT_HD inline
#endif

namespace lt {

LT_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
LT_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
LT_HD uint64_t double_bits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
#endif
}
LT_HD double bits_double(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, 8);
  return d;
#endif
}

LT_HD uint16_t float_to_bf16_bits(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to the even upper half
  return static_cast<uint16_t>(u >> 16);
}
LT_HD float bf16_bits_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// After F. Giesen's float_to_half_fast3_rtne: normal results round by integer carry
// (adding 0xfff + the odd bit), subnormal results by one float add of 0.5f, whose RNE
// rounding drops exactly the bits below 2^-24.
LT_HD uint16_t float_to_f16_bits(float f) {
  uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  uint32_t o;
  if (x >= 0x47800000u) {  // >= 65536, inf or NaN
    o = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (x < 0x38800000u) {                   // below 2^-14: f16 subnormal or zero
    const float magic = bits_float(0x3f000000u);  // 0.5f = 2^-1, ulp 2^-24
    o = float_bits(bits_float(x) + magic) - 0x3f000000u;
  } else {
    const uint32_t mant_odd = (x >> 13) & 1u;
    x += 0xc8000fffu + mant_odd;  // rebias exponent by (15 - 127) << 23, round
    o = x >> 13;                  // 65520..65535 carry into 0x7c00 = inf
  }
  return static_cast<uint16_t>(o | sign);
}
LT_HD float f16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // subnormal: mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * bits_float(0x33800000u);
    return bits_float(float_bits(v) | sign);
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

struct bfloat16 {
  uint16_t bits;
  bfloat16() = default;
  LT_HD explicit bfloat16(float f) : bits(float_to_bf16_bits(f)) {}
  LT_HD explicit operator float() const { return bf16_bits_to_float(bits); }
  LT_HD static bfloat16 from_bits(uint16_t b) {
    bfloat16 r;
    r.bits = b;
    return r;
  }
};
struct float16 {
  uint16_t bits;
  float16() = default;
  LT_HD explicit float16(float f) : bits(float_to_f16_bits(f)) {}
  LT_HD explicit operator float() const { return f16_bits_to_float(bits); }
  LT_HD static float16 from_bits(uint16_t b) {
    float16 r;
    r.bits = b;
    return r;
  }
};
static_assert(sizeof(bfloat16) == 2 && sizeof(float16) == 2);

// C++ element type of a DType.
template <DType D>
struct dtype_traits;
template <>
struct dtype_traits<DType::f32> {
  using type = float;
};
template <>
struct dtype_traits<DType::f64> {
  using type = double;
};
template <>
struct dtype_traits<DType::bf16> {
  using type = bfloat16;
};
template <>
struct dtype_traits<DType::f16> {
  using type = float16;
};
template <>
struct dtype_traits<DType::i32> {
  using type = int32_t;
};
template <>
struct dtype_traits<DType::i64> {
  using type = int64_t;
};
template <>
struct dtype_traits<DType::u16> {
  using type = uint16_t;
};
template <DType D>
using dtype_t = typename dtype_traits<D>::type;

// Arithmetic type a float element computes in.
template <class T>
struct compute_type {
  using type = float;
};
template <>
struct compute_type<double> {
  using type = double;
};
template <class T>
using compute_t = typename compute_type<T>::type;

template <class T>
constexpr bool is_half_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// Load an element as its compute type / store a compute value with the dtype's rounding.
template <class T>
LT_HD compute_t<T> load_as_compute(T v) {
  if constexpr (is_half_v<T>) return static_cast<float>(v);
  else return static_cast<compute_t<T>>(v);
}
template <class T, class C>
LT_HD T store_from_compute(C v) {
  if constexpr (is_half_v<T>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

// Any element to/from double (the convert kernel's hub; exact for every dtype except
// i64 beyond 2^53). double -> half goes through float.
template <class T>
LT_HD double element_to_double(T v) {
  if constexpr (is_half_v<T>) return static_cast<double>(static_cast<float>(v));
  else return static_cast<double>(v);
}
template <class T>
LT_HD T element_from_double(double v) {
  if constexpr (is_half_v<T>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

}  // namespace lt
