// Causal depthwise short convolution, CPU backend (twin: kernels/cuda/conv.cu; math and
// layout: kernels/conv.h). Sums in the compute type (double for f64, float otherwise), over
// i ascending; dw per slot over t ascending, then over the slots ascending.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/conv.h"
#include "kernels/elementwise_ops.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

// Pre-activation a[b, t, c] (the row xb = x + b T C; pb: its document positions, or null).
template <class T, class C>
C conv_pre(const T* xb, const C* w, int64_t t, int64_t c, int64_t C_, int64_t W, const int32_t* pb) {
  C a = C(0);
  for (int64_t i = 0; i < W; ++i) {
    const int64_t ts = t - W + 1 + i;
    if (ts >= 0 && conv_tap_ok(pb, t, static_cast<int>(W - 1 - i)))
      a += w[c * W + i] * load_as_compute(xb[ts * C_ + c]);
  }
  return a;
}
const int32_t* pos_row(const ConvParams& p, int64_t b) { return p.pos ? p.pos + b * p.T : nullptr; }

template <class T>
void conv_forward(const ConvParams& p) {
  using C = compute_t<T>;
  const T* x = static_cast<const T*>(p.x);
  const C* w = static_cast<const C*>(p.w);
  T* y = static_cast<T*>(p.y);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t t = 0; t < p.T; ++t)
      for (int64_t c = 0; c < p.C; ++c) {
        const C a = conv_pre(x + b * p.T * p.C, w, t, c, p.C, p.W, pos_row(p, b));
        y[(b * p.T + t) * p.C + c] = store_from_compute<T>(p.silu ? a / (C(1) + std::exp(-a)) : a);
      }
}

template <class T>
void conv_backward(const ConvParams& p) {
  using C = compute_t<T>;
  const T* x = static_cast<const T*>(p.x);
  const T* dy = static_cast<const T*>(p.dy);
  const C* w = static_cast<const C*>(p.w);
  T* dx = static_cast<T*>(p.dx);
  C* dw = static_cast<C*>(p.dw);
  C* scratch = static_cast<C*>(p.scratch);  // [Q, C, W]
  const int64_t T_ = p.T, C_ = p.C, W = p.W;
  std::vector<C> da(static_cast<size_t>(T_ * C_));  // [T, C] of one sequence
  const int64_t ntt = (T_ + kConvTileT - 1) / kConvTileT;
  for (int64_t b = 0; b < p.B; ++b) {
    const T* xb = x + b * T_ * C_;
    const T* dyb = dy + b * T_ * C_;
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t c = 0; c < C_; ++c) {
        const C g = load_as_compute(dyb[t * C_ + c]);
        C d = g;
        if (p.silu) {
          const C a = conv_pre(xb, w, t, c, C_, W, pos_row(p, b));
          const C s = C(1) / (C(1) + std::exp(-a));
          d = g * s * (C(1) + a * (C(1) - s));
        }
        da[t * C_ + c] = d;
      }
    for (int64_t t = 0; t < T_; ++t)
      for (int64_t c = 0; c < C_; ++c) {
        C acc = C(0);
        for (int64_t i = 0; i < W; ++i) {
          const int64_t td = t + W - 1 - i;  // the output that reads x[t] at lag W - 1 - i
          if (td < T_ && conv_tap_ok(pos_row(p, b), td, static_cast<int>(W - 1 - i)))
            acc += w[c * W + i] * da[td * C_ + c];
        }
        dx[(b * T_ + t) * C_ + c] = store_from_compute<T>(acc);
      }
    for (int64_t tile = 0; tile < ntt; ++tile) {
      C* part = scratch + (b * ntt + tile) * C_ * W;  // [C, W]
      for (int64_t k = 0; k < C_ * W; ++k) part[k] = C(0);
      const int64_t t_end = std::min(T_, (tile + 1) * kConvTileT);
      for (int64_t t = tile * kConvTileT; t < t_end; ++t) {
        const int32_t* pb = pos_row(p, b);
        for (int64_t c = 0; c < C_; ++c)
          for (int64_t i = 0; i < W; ++i) {
            const int64_t ts = t - W + 1 + i;
            if (ts >= 0 && conv_tap_ok(pb, t, static_cast<int>(W - 1 - i)))
              part[c * W + i] += da[t * C_ + c] * load_as_compute(xb[ts * C_ + c]);
          }
      }
    }
  }
  const int64_t slots = conv_weight_slots(p.B, T_);
  for (int64_t k = 0; k < C_ * W; ++k) {
    C sum = C(0);
    for (int64_t q = 0; q < slots; ++q) sum += scratch[q * C_ * W + k];
    dw[k] += sum;
  }
}

}  // namespace

void conv(ConvPass pass, DType dtype, const ConvParams& p, uintptr_t) {
  if (p.B * p.T * p.C == 0) return;
  visit_float_dtype(dtype, "cpu", "conv", [&](auto t) {
    using T = decltype(t);
    if (pass == ConvPass::forward) conv_forward<T>(p);
    else conv_backward<T>(p);
  });
}

}  // namespace lt::kern::cpu
