// Shared by the norm tests (test_norm.cpp, test_norm_cuda.cpp): the four norm forms behind one
// interface, random inputs (never zeros), and the direct double-precision formulas.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "engine/nn/norm.h"
#include "engine/tensor.h"
#include "tests/engine/engine_test_util.h"

namespace lt::test {

enum class NormForm { rms, layer, group, gated };
inline const NormForm kAllNormForms[] = {NormForm::rms, NormForm::layer, NormForm::group, NormForm::gated};

inline const char* form_name(NormForm f) {
  switch (f) {
    case NormForm::rms: return "rms_norm";
    case NormForm::layer: return "layer_norm";
    case NormForm::group: return "group_norm";
    case NormForm::gated: return "gated_rms_norm";
  }
  return "?";
}
inline bool has_bias(NormForm f) { return f == NormForm::layer || f == NormForm::group; }
inline bool has_gate(NormForm f) { return f == NormForm::gated; }
inline bool centers(NormForm f) { return f == NormForm::layer || f == NormForm::group; }

// Weight shape for x: [H, D] (group: x's last two dims) or [L].
inline Shape norm_weight_shape(NormForm f, const Shape& x) {
  if (f == NormForm::group) return {x[x.size() - 2], x.back()};
  return {x.back()};
}

struct NormInputs {
  Tensor x, g, w, b;  // g, b undefined where the form has none
};

// x, g: shifted normals in `dtype`; w in [0.5, 1.5]; b normal * 0.3 (parameter dtype).
inline NormInputs make_norm_inputs(NormForm f, const Shape& xs, DType dtype, uint64_t seed,
                                   Device dev = Device::cpu()) {
  const DType pd = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Shape ws = norm_weight_shape(f, xs);
  NormInputs in;
  in.x = random_tensor(xs, seed, dtype, dev);
  in.w = uniform_tensor(ws, seed + 1, 0.5, 1.5, pd, dev);
  if (has_bias(f)) in.b = (random_tensor(ws, seed + 2, pd) * 0.3).to(dev);
  if (has_gate(f)) in.g = random_tensor(xs, seed + 3, dtype, dev);
  return in;
}

inline NormInputs norm_inputs_to(const NormInputs& in, Device dev) {
  NormInputs r;
  r.x = in.x.to(dev);
  r.w = in.w.to(dev);
  if (in.b.defined()) r.b = in.b.to(dev);
  if (in.g.defined()) r.g = in.g.to(dev);
  return r;
}

inline nn::NormOut norm_forward(NormForm f, const NormInputs& in, double eps) {
  switch (f) {
    case NormForm::rms: return nn::rms_norm_forward(in.x, in.w, eps);
    case NormForm::layer: return nn::layer_norm_forward(in.x, in.w, in.b, eps);
    case NormForm::group: return nn::group_norm_forward(in.x, in.w, in.b, eps);
    case NormForm::gated: return nn::gated_rms_norm_forward(in.x, in.g, in.w, eps);
  }
  return {};
}

struct NormGrads {
  Tensor dx, dg;
};
// dw (and db for the biased forms) are accumulated.
// dres: a residual gradient added into dx (the RMS and LayerNorm forms only).
inline NormGrads norm_backward(NormForm f, const Tensor& dy, const NormInputs& in, const nn::NormStats& s, Tensor& dw,
                               Tensor& db, const Tensor& dres = Tensor()) {
  NormGrads r;
  switch (f) {
    case NormForm::rms: r.dx = nn::rms_norm_backward(dy, in.x, in.w, s, dw, dres); break;
    case NormForm::layer: r.dx = nn::layer_norm_backward(dy, in.x, in.w, s, dw, db, dres); break;
    case NormForm::group: r.dx = nn::group_norm_backward(dy, in.x, in.w, s, dw, db); break;
    case NormForm::gated: {
      nn::GatedNormGrads gg = nn::gated_rms_norm_backward(dy, in.x, in.g, in.w, s, dw);
      r.dx = gg.dx;
      r.dg = gg.dg;
      break;
    }
  }
  return r;
}

// ---- direct formulas in double -----------------------------------------------------------
struct RefNorm {
  std::vector<double> y, mean, rstd;   // forward
  std::vector<double> dx, dg, dw, db;  // backward (dw, db: this call's gradient only)
};

inline double ref_sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// Rows of L, head r % P; y and the statistics; with dy, also the gradients.
inline RefNorm ref_norm(NormForm f, const NormInputs& in, double eps, const std::vector<double>* dy = nullptr) {
  const std::vector<double> x = in.x.to_vector(), w = in.w.to_vector();
  const std::vector<double> b = in.b.defined() ? in.b.to_vector() : std::vector<double>();
  const std::vector<double> g = in.g.defined() ? in.g.to_vector() : std::vector<double>();
  const int64_t L = in.x.size(-1);
  const int64_t P = f == NormForm::group ? in.x.size(-2) : 1;
  const int64_t N = in.x.numel() / L;
  RefNorm r;
  r.y.resize(x.size());
  r.mean.resize(N);
  r.rstd.resize(N);
  if (dy) {
    r.dx.resize(x.size());
    if (has_gate(f)) r.dg.resize(x.size());
    r.dw.assign(w.size(), 0.0);
    if (has_bias(f)) r.db.assign(w.size(), 0.0);
  }
  for (int64_t row = 0; row < N; ++row) {
    const int64_t h = row % P, o = row * L;
    double mu = 0;
    if (centers(f)) {
      for (int64_t j = 0; j < L; ++j) mu += x[o + j];
      mu /= L;
    }
    double var = 0;
    for (int64_t j = 0; j < L; ++j) var += (x[o + j] - mu) * (x[o + j] - mu);
    var /= L;
    const double rs = 1.0 / std::sqrt(var + eps);
    r.mean[row] = mu;
    r.rstd[row] = rs;
    std::vector<double> xh(L), d(L);
    double mean_d = 0, mean_dxh = 0;
    for (int64_t j = 0; j < L; ++j) {
      xh[j] = (x[o + j] - mu) * rs;
      const double pre = xh[j] * w[h * L + j] + (has_bias(f) ? b[h * L + j] : 0.0);
      const double s = has_gate(f) ? ref_sigmoid(g[o + j]) : 1.0;
      r.y[o + j] = pre * s;
      if (!dy) continue;
      const double e = (*dy)[o + j] * s;
      if (has_gate(f)) r.dg[o + j] = (*dy)[o + j] * pre * s * (1 - s);
      d[j] = e * w[h * L + j];
      mean_d += d[j] / L;
      mean_dxh += d[j] * xh[j] / L;
      r.dw[h * L + j] += e * xh[j];
      if (has_bias(f)) r.db[h * L + j] += e;
    }
    if (!dy) continue;
    for (int64_t j = 0; j < L; ++j) r.dx[o + j] = rs * (d[j] - (centers(f) ? mean_d : 0.0) - xh[j] * mean_dxh);
  }
  return r;
}

}  // namespace lt::test
