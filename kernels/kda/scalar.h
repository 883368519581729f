// KDA block programs: scalar helpers (exp2, the gate, bf16 pairs, loads and stores of one element).
#pragma once
#include "kernels/kda/cfg.h"

namespace lt::kda::KDA_BLOCKS_NS {

// ---- scalar helpers ---------------------------------------------------------------------
// 2^x in one MUFU.EX2 on the GPU (ex2.approx.ftz: ~2 ulp, subnormal results flushed to 0).
// exp2f wraps the same instruction in a subnormal range check and two predicated
// multiplies: 4 instructions where this is 1.
KDA_DEV float exp2_fast(float x) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return exp2f(x);
#endif
}
// a / b without the IEEE division's slow path (__fdividef: ~2 ulp for |b| < 2^126).
KDA_DEV float div_fast(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdividef(a, b);
#else
  return a / b;
#endif
}
KDA_DEV float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

struct GateVal {
  float g;     // log decay (natural)
  float dgdx;  // dg/dx
  float dgda;  // dg/dA_log
};
KDA_DEV GateVal gate_value(float x, float ea, const Gate& gate) {
  if (gate.use_lower_bound) {
    // s (1 - s) = e / (1 + e)^2 with e = e^{-|z|}: the difference 1 - s would keep only
    // eps / (1 - s) of its value where s nears 1, and dg/dx with it
    const float z = ea * x, e = expf(-fabsf(z)), r = 1.0f / (1.0f + e);
    const float s = z >= 0.0f ? r : e * r;
    const float dgdz = gate.lower_bound * (e * r) * r;
    return {gate.lower_bound * s, dgdz * ea, dgdz * ea * x};
  }
  // one exponential serves softplus and its derivative: sigmoid(x) = e^x / (1 + e^x)
  const bool lin = x > 20.0f;
  const float ex = exp2_fast(x * kLog2e);
  const float sp = lin ? x : log1pf(ex);
  const float g = -ea * sp;
  return {g, -ea * (lin ? 1.0f : div_fast(ex, 1.0f + ex)), g};
}

template <class T>
KDA_DEV float ld(const T* p, int64_t i) {
  return static_cast<float>(load_as_compute(p[i]));
}
template <class T>
KDA_DEV void st(T* p, int64_t i, float v) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, bfloat16>) {  // one cvt (RNE, as float_to_bf16_bits) instead of 5
    p[i] = bfloat16::from_bits(tc::bf16_bits_rn(v));
    return;
  }
#endif
  p[i] = store_from_compute<T>(v);
}
// v0 = p[i], v1 = p[i + 1] in one load on the GPU (i even, p aligned to 2 elements).
template <class T>
KDA_DEV void ld2(const T* p, int64_t i, float& v0, float& v1) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, bfloat16>) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(p + i);
    v0 = __uint_as_float(u << 16);
    v1 = __uint_as_float(u & 0xffff0000u);
    return;
  } else if constexpr (std::is_same_v<T, float>) {
    const float2 f = *reinterpret_cast<const float2*>(p + i);
    v0 = f.x;
    v1 = f.y;
    return;
  }
#endif
  v0 = ld(p, i);
  v1 = ld(p, i + 1);
}
// Two adjacent elements of a T array as loaded, not yet converted to float (i even, p aligned
// to 2 elements: one 32-bit (bf16) / 64-bit (fp32) load on the GPU). The backward scan's
// register prefetch holds these: a bf16 pair converted at the load puts an instruction that
// waits for the load right behind it, where the raw pair waits in its register until the next
// step stores it (docs/notes-kda.md, "2026-12-03: where the warps wait"; the forward scan
// measured slower with them at D64 and at D128 C64, and keeps ld2).
// A bf16 pair is one 32-bit word (element i in the low half, as the little-endian load gives
// it): held as two 16-bit values, the compiler splits the word right after the load (PRMT),
// which waits for the load as the conversion did.
template <class T>
struct Pair {
  T v[2];
};
template <>
struct Pair<bfloat16> {
  uint32_t bits;
};
template <class T>
KDA_DEV Pair<T> ld_pair(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bfloat16>) {
#if defined(__CUDA_ARCH__)
    return {*reinterpret_cast<const uint32_t*>(p + i)};
#else
    return {static_cast<uint32_t>(p[i].bits) | (static_cast<uint32_t>(p[i + 1].bits) << 16)};
#endif
  } else {
    static_assert(std::is_same_v<T, float>);
#if defined(__CUDA_ARCH__)
    const float2 f = *reinterpret_cast<const float2*>(p + i);
    return {{f.x, f.y}};
#else
    return {{p[i], p[i + 1]}};
#endif
  }
}
// p[0] = v0, p[1] = v1 (shared memory, p 8-byte aligned): one 64-bit store on the GPU.
KDA_DEV void sts2(float* p, float v0, float v1) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
#else
  p[0] = v0;
  p[1] = v1;
#endif
}
// A loaded bf16 pair to p[0], p[1] as it is (shared memory, p 4-byte aligned): one 32-bit store.
KDA_DEV void sts_bits(bfloat16* p, uint32_t bits) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<uint32_t*>(p) = bits;
#else
  p[0] = bfloat16::from_bits(static_cast<uint16_t>(bits & 0xffffu));
  p[1] = bfloat16::from_bits(static_cast<uint16_t>(bits >> 16));
#endif
}
// A loaded pair, converted, to p[0], p[1] (shared memory, p 8-byte aligned).
template <class T>
KDA_DEV void sts2(float* p, const Pair<T>& x) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    sts2(p, bits_float(x.bits << 16), bits_float(x.bits & 0xffff0000u));
  } else {
    sts2(p, x.v[0], x.v[1]);
  }
}
// dst[0..3] = src[0..3]; both 16-byte aligned: one 128-bit load and store on the GPU.
KDA_DEV void copy4(float* dst, const float* src) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
#else
  for (int u = 0; u < 4; ++u) dst[u] = src[u];
#endif
}
// p[i] = v0, p[i + 1] = v1 in one store on the GPU (i even, p aligned to 2 elements): the two
// adjacent columns an mma C fragment holds per row (c0 c1, c2 c3).
template <class T>
KDA_DEV void st2(T* p, int64_t i, float v0, float v1) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, bfloat16>) {
    *reinterpret_cast<uint32_t*>(p + i) = tc::pack_bf16x2_rn(v0, v1);
    return;
  } else if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float2*>(p + i) = make_float2(v0, v1);
    return;
  }
#endif
  st(p, i, v0);
  st(p, i + 1, v1);
}

// v[0..3] = p[i..i+3] (i a multiple of 4, p aligned to 4 elements): one 64-bit (bf16) or
// 128-bit (fp32) load on the GPU.
template <class T>
KDA_DEV void ld4(const T* p, int64_t i, float* v) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, bfloat16>) {
    const uint2 u = *reinterpret_cast<const uint2*>(p + i);
    v[0] = __uint_as_float(u.x << 16);
    v[1] = __uint_as_float(u.x & 0xffff0000u);
    v[2] = __uint_as_float(u.y << 16);
    v[3] = __uint_as_float(u.y & 0xffff0000u);
    return;
  } else if constexpr (std::is_same_v<T, float>) {
    const float4 f = *reinterpret_cast<const float4*>(p + i);
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
    return;
  } else
#endif
  {
    for (int u = 0; u < 4; ++u) v[u] = ld(p, i + u);
  }
}
// p[i..i+3] = v[0..3] (i a multiple of 4, p aligned to 4 elements): one store on the GPU.
template <class T>
KDA_DEV void st4(T* p, int64_t i, const float* v) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, bfloat16>) {
    *reinterpret_cast<uint2*>(p + i) = make_uint2(tc::pack_bf16x2_rn(v[0], v[1]), tc::pack_bf16x2_rn(v[2], v[3]));
    return;
  } else if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
    return;
  } else
#endif
  {
    for (int u = 0; u < 4; ++u) st(p, i + u, v[u]);
  }
}
// Shared memory, 16-byte aligned: v[0..3] = p[0..3] / p[0..3] = v[0..3] in one 128-bit access.
KDA_DEV void lds4(const float* p, float* v) {
#if defined(__CUDA_ARCH__)
  const float4 f = *reinterpret_cast<const float4*>(p);
  v[0] = f.x;
  v[1] = f.y;
  v[2] = f.z;
  v[3] = f.w;
#else
  for (int u = 0; u < 4; ++u) v[u] = p[u];
#endif
}
KDA_DEV void sts4(float* p, const float* v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
#else
  for (int u = 0; u < 4; ++u) p[u] = v[u];
#endif
}

}  // namespace lt::kda::KDA_BLOCKS_NS
