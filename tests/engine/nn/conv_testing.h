// Shared by the short-conv tests (test_short_conv.cpp, test_short_conv_cuda.cpp): the direct
// double-precision formulas of engine/nn/short_conv.h.
#pragma once
#include <cmath>
#include <vector>

#include "engine/tensor.h"

namespace lt::test {

struct RefConv {
  std::vector<double> y, dx, dw;  // dw: this call's gradient only
};

// x [B, T, C], w [C, W]; with dy, also dx and dw.
inline RefConv ref_short_conv(const Tensor& x_t, const Tensor& w_t, bool silu,
                              const std::vector<double>* dy = nullptr) {
  const std::vector<double> x = x_t.to_vector(), w = w_t.to_vector();
  const int64_t B = x_t.size(0), T = x_t.size(1), C = x_t.size(2), W = w_t.size(1);
  auto at = [&](int64_t b, int64_t t, int64_t c) { return (b * T + t) * C + c; };
  RefConv r;
  r.y.resize(x.size());
  std::vector<double> da(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double a = 0;
        for (int64_t i = 0; i < W; ++i)
          if (t - W + 1 + i >= 0) a += w[c * W + i] * x[at(b, t - W + 1 + i, c)];
        const double s = 1.0 / (1.0 + std::exp(-a));
        r.y[at(b, t, c)] = silu ? a * s : a;
        if (dy) da[at(b, t, c)] = (*dy)[at(b, t, c)] * (silu ? s * (1 + a * (1 - s)) : 1.0);
      }
  if (!dy) return r;
  r.dx.assign(x.size(), 0.0);
  r.dw.assign(w.size(), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < W; ++i) {
          const int64_t ts = t - W + 1 + i;  // y[t] reads x[ts] with weight i
          if (ts < 0) continue;
          r.dx[at(b, ts, c)] += w[c * W + i] * da[at(b, t, c)];
          r.dw[c * W + i] += da[at(b, t, c)] * x[at(b, ts, c)];
        }
  return r;
}

}  // namespace lt::test
