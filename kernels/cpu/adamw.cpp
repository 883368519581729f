// AdamW kernels, CPU backend (twin: kernels/cuda/adamw.cu; formulas in kernels/adamw.h).
//   grad_norm: kGradNormPartials contiguous chunks, each summed sequentially in f64, then the
//              partials summed in order; sqrt rounded once to the gradient dtype.
//   update:    every element computed in f64 from its stored values, rounded once on store.
// Both are sequential, so the CPU results are bit-reproducible for a given input.
#include <algorithm>
#include <cmath>

#include "kernels/adamw.h"
#include "kernels/elementwise_ops.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class T>
void grad_norm_loop(const AdamWParams& p) {
  const T* g = static_cast<const T*>(p.grads);
  const int64_t chunk = grad_norm_chunk(p.n);
  for (int64_t b = 0; b < kGradNormPartials; ++b) {
    const int64_t begin = std::min(p.n, b * chunk), end = std::min(p.n, begin + chunk);
    double s = 0.0;
    for (int64_t i = begin; i < end; ++i) {
      const double x = static_cast<double>(g[i]);
      s += x * x;
    }
    p.partials[b] = s;
  }
  double total = 0.0;
  for (int64_t b = 0; b < kGradNormPartials; ++b) total += p.partials[b];
  *static_cast<T*>(p.norm) = static_cast<T>(std::sqrt(total));
}

template <class T>
void update_loop(const AdamWParams& p) {
  const double norm = static_cast<double>(*static_cast<const T*>(p.norm));
  T* params = static_cast<T*>(p.params);
  bfloat16* shadow = static_cast<bfloat16*>(p.shadow);
  const double loss = p.loss ? static_cast<double>(*static_cast<const T*>(p.loss)) : std::nan("");
  SkipCode code = SkipCode::applied;
  if (p.loss && !std::isfinite(loss)) code = SkipCode::nonfinite_loss;
  else if (!std::isfinite(norm)) code = SkipCode::nonfinite_norm;
  else if (p.spike_test && p.spike_sd > 0.0 && (loss - p.spike_mean) / p.spike_sd > p.spike_zscore)
    code = SkipCode::loss_spike;
  if (p.report) {
    p.report[0] = loss;
    p.report[1] = norm;
    p.report[2] = static_cast<double>(code);
  }
  if (code != SkipCode::applied) {
    *p.skipped += 1;
    if (shadow)
      for (int64_t i = 0; i < p.n; ++i) shadow[i] = bfloat16(static_cast<float>(params[i]));
    return;
  }
  const T* grads = static_cast<const T*>(p.grads);
  T* m = static_cast<T*>(p.m);
  T* v = static_cast<T*>(p.v);
  const double scale = p.max_grad_norm > 0.0 ? std::min(1.0, p.max_grad_norm / (norm + 1e-6)) : 1.0;
  for (int64_t i = 0; i < p.n; ++i) {
    const double g = static_cast<double>(grads[i]) * scale;
    const double mi = p.beta1 * static_cast<double>(m[i]) + (1.0 - p.beta1) * g;
    const double vi = p.beta2 * static_cast<double>(v[i]) + (1.0 - p.beta2) * g * g;
    const double pi = static_cast<double>(params[i]);
    double step = (mi / p.bc1) / (std::sqrt(vi / p.bc2) + p.eps);
    if (i < p.decay_end) step += p.weight_decay * pi;
    const T pn = static_cast<T>(pi - p.lr * step);
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    params[i] = pn;
    if (shadow) shadow[i] = bfloat16(static_cast<float>(pn));
  }
}

}  // namespace

void adamw(AdamWOp op, DType dtype, const AdamWParams& p, uintptr_t) {
  auto run = [&](auto t) {
    using T = decltype(t);
    if (op == AdamWOp::grad_norm) grad_norm_loop<T>(p);
    else update_loop<T>(p);
  };
  switch (dtype) {
    case DType::f32: run(float{}); break;
    case DType::f64: run(double{}); break;
    default: unsupported_dtype("cpu", "adamw", dtype);
  }
}

}  // namespace lt::kern::cpu
