// RWKV6's token-shift interpolations, fused (engine: engine/nn/lerp.h; CPU:
// kernels/cpu/lerp.cpp, CUDA: kernels/cuda/lerp.cu; the per-element math below is the one
// both run). a is [R, T, d] (R sequences of T tokens of width d), N = R * T tokens,
// n = N * d elements; k < 5 counts the five data-dependent lerps (r, w, k, v, g).
//
//   op         forward                                          backward
//   shift_mix  delta = shift(a) - a  (shift(a)_t = a_{t-1},     g = ddelta_in + sum_j dout_j mu_j
//              a_{-1} = 0);  out_j = a + delta mu_j, j < nmix    da = da_in + sum_j dout_j - g_t + g_{t+1}
//                                                                (g_T = 0)
//              packed documents (pos, optional, [N] i32: positions in the documents): shift(a)_t
//              = 0 where a document starts (pos 0); then g_t does not reach a_{t-1}
//   lerp5      m_k = mraw_k + bias_k;  xl_k = a + delta m_k      da = sum_k dxl_k, ddelta = sum_k dxl_k m_k,
//                                                                dm_k = dxl_k delta
// Layouts: a, delta, out_j, da, ddelta, dout_j, dxl_k, ddelta_in, da_in: [N, d];
// mraw, m, xl, dm: [5, N, d] (slice k contiguous; m may be the same buffer as mraw);
// mu_j [d], bias [5, d] in the compute type (f32; f64 for f64 tensors), the rest in one
// float dtype. Computed in the compute type and rounded once per output; out_j and xl_k use
// delta and m as stored (rounded), the values the backward differentiates. Outputs are
// written (=); ddelta_in and da_in may be null (zero). The parameter gradients
// (sum over tokens of dout_j delta, of dm_k) are the engine's reductions.
#pragma once
#include <cstdint>

#include "kernels/elementwise_ops.h"

namespace lt::kern {

enum class LerpOp : uint8_t { shift_mix, lerp5 };
constexpr int kLerpSlices = 5;
constexpr int kMaxMix = 2;

struct LerpParams {
  int64_t n = 0;         // elements of a: N * d
  int64_t T = 1, d = 1;  // tokens per sequence, width
  bool backward = false;
  int nmix = 1;                  // shift_mix: 1 or 2 interpolations
  const int32_t* pos = nullptr;  // shift_mix: [N] positions in the packed documents (0: no shift), or null
  // shift_mix forward
  const void* a = nullptr;
  const void* mu[kMaxMix] = {};  // [d] each, compute type
  void* delta = nullptr;         // output (shift_mix forward); input (lerp5)
  void* out[kMaxMix] = {};
  // shift_mix backward
  const void* dout[kMaxMix] = {};
  const void* ddelta_in = nullptr;
  const void* da_in = nullptr;
  void* da = nullptr;  // output of both backwards
  // lerp5
  const void* mraw = nullptr;  // [5, N, d]
  const void* bias = nullptr;  // [5, d], compute type
  void* m = nullptr;           // [5, N, d]: output (forward), input (backward)
  void* xl = nullptr;          // [5, N, d]
  const void* dxl[kLerpSlices] = {};
  void* ddelta = nullptr;  // [N, d]
  void* dm = nullptr;      // [5, N, d]
};

// W consecutive elements [i, i + W) of each pass (i a multiple of W, W dividing d, so one
// token's row): W = 1 on the CPU and for unaligned operands, a 16-byte pack on CUDA. T the
// tensors' dtype, C its compute type; every element takes the same arithmetic for any W.
template <class T, int W = 1>
struct LerpMath {
  using C = compute_t<T>;
  struct alignas(sizeof(T) * W) Pack {
    T v[W];
  };
  using Vals = C[W];
  static LT_HD void ld(const void* p, int64_t i, Vals& out) {
    const Pack q = *reinterpret_cast<const Pack*>(static_cast<const T*>(p) + i);
    for (int e = 0; e < W; ++e) out[e] = load_as_compute(q.v[e]);
  }
  static LT_HD C ldc(const void* p, int64_t i) { return static_cast<const C*>(p)[i]; }
  // Stores v rounded to T and returns the rounded values in v.
  static LT_HD void st(void* p, int64_t i, Vals& v) {
    Pack q;
    for (int e = 0; e < W; ++e) {
      q.v[e] = store_from_compute<T>(v[e]);
      v[e] = load_as_compute(q.v[e]);
    }
    *reinterpret_cast<Pack*>(static_cast<T*>(p) + i) = q;
  }

  static LT_HD void shift_mix_forward(const LerpParams& p, int64_t i) {
    const int64_t t = (i / p.d) % p.T, c = i % p.d;
    Vals a, delta, out;
    ld(p.a, i, a);
    const bool shifted = t > 0 && (p.pos == nullptr || p.pos[i / p.d] > 0);
    if (shifted) ld(p.a, i - p.d, delta);
    for (int e = 0; e < W; ++e) delta[e] = (shifted ? delta[e] : C(0)) - a[e];
    st(p.delta, i, delta);
    for (int j = 0; j < p.nmix; ++j) {
      for (int e = 0; e < W; ++e) out[e] = a[e] + delta[e] * ldc(p.mu[j], c + e);
      st(p.out[j], i, out);
    }
  }
  // g at elements [i, i + W): the gradient into delta
  static LT_HD void shift_mix_g(const LerpParams& p, int64_t i, Vals& g) {
    const int64_t c = i % p.d;
    if (p.ddelta_in) ld(p.ddelta_in, i, g);
    else
      for (int e = 0; e < W; ++e) g[e] = C(0);
    Vals dout;
    for (int j = 0; j < p.nmix; ++j) {
      ld(p.dout[j], i, dout);
      for (int e = 0; e < W; ++e) g[e] += dout[e] * ldc(p.mu[j], c + e);
    }
  }
  static LT_HD void shift_mix_backward(const LerpParams& p, int64_t i) {
    const int64_t t = (i / p.d) % p.T;
    Vals da, v;
    if (p.da_in) ld(p.da_in, i, da);
    else
      for (int e = 0; e < W; ++e) da[e] = C(0);
    for (int j = 0; j < p.nmix; ++j) {
      ld(p.dout[j], i, v);
      for (int e = 0; e < W; ++e) da[e] += v[e];
    }
    shift_mix_g(p, i, v);
    for (int e = 0; e < W; ++e) da[e] -= v[e];
    if (t < p.T - 1 && (p.pos == nullptr || p.pos[i / p.d + 1] > 0)) {
      shift_mix_g(p, i + p.d, v);
      for (int e = 0; e < W; ++e) da[e] += v[e];
    }
    st(p.da, i, da);
  }

  static LT_HD void lerp5_forward(const LerpParams& p, int64_t i) {
    const int64_t c = i % p.d;
    Vals a, delta, m;
    ld(p.a, i, a);
    ld(p.delta, i, delta);
    for (int k = 0; k < kLerpSlices; ++k) {
      const int64_t at = k * p.n + i;
      ld(p.mraw, at, m);
      for (int e = 0; e < W; ++e) m[e] += ldc(p.bias, k * p.d + c + e);
      st(p.m, at, m);
      for (int e = 0; e < W; ++e) m[e] = a[e] + delta[e] * m[e];
      st(p.xl, at, m);
    }
  }
  static LT_HD void lerp5_backward(const LerpParams& p, int64_t i) {
    Vals delta, da, dd, g, m;
    ld(p.delta, i, delta);
    for (int e = 0; e < W; ++e) da[e] = dd[e] = C(0);
    for (int k = 0; k < kLerpSlices; ++k) {
      const int64_t at = k * p.n + i;
      ld(p.dxl[k], i, g);
      ld(p.m, at, m);
      for (int e = 0; e < W; ++e) {
        da[e] += g[e];
        dd[e] += g[e] * m[e];
        g[e] *= delta[e];
      }
      st(p.dm, at, g);
    }
    st(p.da, i, da);
    st(p.ddelta, i, dd);
  }

  static LT_HD void element(LerpOp op, const LerpParams& p, int64_t i) {
    if (op == LerpOp::shift_mix) {
      if (p.backward) shift_mix_backward(p, i);
      else shift_mix_forward(p, i);
    } else {
      if (p.backward) lerp5_backward(p, i);
      else lerp5_forward(p, i);
    }
  }
};

}  // namespace lt::kern
