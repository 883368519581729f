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

// One element i in [0, n) of each pass; T the tensors' dtype, C its compute type.
template <class T>
struct LerpMath {
  using C = compute_t<T>;
  static LT_HD C ld(const void* p, int64_t i) { return load_as_compute(static_cast<const T*>(p)[i]); }
  static LT_HD C ldc(const void* p, int64_t i) { return static_cast<const C*>(p)[i]; }
  static LT_HD T st(void* p, int64_t i, C v) {
    const T r = store_from_compute<T>(v);
    static_cast<T*>(p)[i] = r;
    return r;
  }

  static LT_HD void shift_mix_forward(const LerpParams& p, int64_t i) {
    const int64_t t = (i / p.d) % p.T, c = i % p.d;
    const C a = ld(p.a, i);
    const bool shifted = t > 0 && (p.pos == nullptr || p.pos[i / p.d] > 0);
    const C prev = shifted ? ld(p.a, i - p.d) : C(0);
    const C delta = load_as_compute(st(p.delta, i, prev - a));
    for (int j = 0; j < p.nmix; ++j) st(p.out[j], i, a + delta * ldc(p.mu[j], c));
  }
  // g at element i: the gradient into delta
  static LT_HD C shift_mix_g(const LerpParams& p, int64_t i) {
    const int64_t c = i % p.d;
    C g = p.ddelta_in ? ld(p.ddelta_in, i) : C(0);
    for (int j = 0; j < p.nmix; ++j) g += ld(p.dout[j], i) * ldc(p.mu[j], c);
    return g;
  }
  static LT_HD void shift_mix_backward(const LerpParams& p, int64_t i) {
    const int64_t t = (i / p.d) % p.T;
    C da = p.da_in ? ld(p.da_in, i) : C(0);
    for (int j = 0; j < p.nmix; ++j) da += ld(p.dout[j], i);
    da -= shift_mix_g(p, i);
    if (t < p.T - 1 && (p.pos == nullptr || p.pos[i / p.d + 1] > 0)) da += shift_mix_g(p, i + p.d);
    st(p.da, i, da);
  }

  static LT_HD void lerp5_forward(const LerpParams& p, int64_t i) {
    const int64_t c = i % p.d;
    const C a = ld(p.a, i), delta = ld(p.delta, i);
    for (int k = 0; k < kLerpSlices; ++k) {
      const int64_t at = k * p.n + i;
      const C m = load_as_compute(st(p.m, at, ld(p.mraw, at) + ldc(p.bias, k * p.d + c)));
      st(p.xl, at, a + delta * m);
    }
  }
  static LT_HD void lerp5_backward(const LerpParams& p, int64_t i) {
    const C delta = ld(p.delta, i);
    C da = C(0), dd = C(0);
    for (int k = 0; k < kLerpSlices; ++k) {
      const int64_t at = k * p.n + i;
      const C g = ld(p.dxl[k], i);
      da += g;
      dd += g * ld(p.m, at);
      st(p.dm, at, g * delta);
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
