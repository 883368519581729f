// Row normalisation, CPU backend (twin: kernels/cuda/norm.cu; math and layout: kernels/norm.h).
// One row at a time, every sum sequential over j in the compute type (double for f64, float
// otherwise). Weight gradients: each slot's rows in ascending order into the scratch, then
// the slots of a head in ascending order into dw, db (kernels/norm.h), so the result depends
// on the shape only.
#include <cmath>

#include "kernels/elementwise_ops.h"
#include "kernels/norm.h"
#include "kernels/table.h"

namespace lt::kern::cpu {
namespace {

template <class C>
C sigmoid(C v) {
  return C(1) / (C(1) + std::exp(-v));
}

template <class T>
void norm_forward(const NormParams& p) {
  using C = compute_t<T>;
  const T* x = static_cast<const T*>(p.x);
  const T* g = static_cast<const T*>(p.g);
  const C* w = static_cast<const C*>(p.w);
  const C* b = static_cast<const C*>(p.b);
  T* y = static_cast<T*>(p.y);
  C* mean = static_cast<C*>(p.mean);
  C* rstd = static_cast<C*>(p.rstd);
  const int64_t L = p.len;
  const C inv_len = C(1) / static_cast<C>(L);
  for (int64_t r = 0; r < p.rows; ++r) {
    const T* xr = x + r * L;  // [L]
    const int64_t h = r % p.period;
    C mu = C(0);
    if (p.center) {
      for (int64_t j = 0; j < L; ++j) mu += load_as_compute(xr[j]);
      mu *= inv_len;
    }
    C ss = C(0);
    for (int64_t j = 0; j < L; ++j) {
      const C v = load_as_compute(xr[j]) - mu;
      ss += v * v;
    }
    const C rs = C(1) / std::sqrt(ss * inv_len + static_cast<C>(p.eps));
    if (p.center) mean[r] = mu;
    rstd[r] = rs;
    for (int64_t j = 0; j < L; ++j) {
      C v = (load_as_compute(xr[j]) - mu) * rs * w[h * L + j];
      if (p.bias) v += b[h * L + j];
      if (p.gate) v *= sigmoid(load_as_compute(g[r * L + j]));
      y[r * L + j] = store_from_compute<T>(v);
    }
  }
}

template <class T>
void norm_backward(const NormParams& p) {
  using C = compute_t<T>;
  const T* x = static_cast<const T*>(p.x);
  const T* g = static_cast<const T*>(p.g);
  const T* dy = static_cast<const T*>(p.dy);
  const C* w = static_cast<const C*>(p.w);
  const C* b = static_cast<const C*>(p.b);
  const C* mean = static_cast<const C*>(p.mean);
  const C* rstd = static_cast<const C*>(p.rstd);
  T* dx = static_cast<T*>(p.dx);
  const T* dres = static_cast<const T*>(p.dres);
  T* dg = static_cast<T*>(p.dg);
  C* scratch = static_cast<C*>(p.scratch);  // [G, acc, L]
  const int64_t L = p.len, P = p.period;
  const int64_t nacc = p.bias ? 2 : 1;
  const int64_t S = norm_slices_per_head(p.rows, P);
  const int64_t per_head = p.rows / P;
  const C inv_len = C(1) / static_cast<C>(L);

  for (int64_t slot = 0; slot < S * P; ++slot) {
    const int64_t h = slot % P, s = slot / P;
    C* acc_w = scratch + slot * nacc * L;  // [L]
    C* acc_b = acc_w + L;                  // [L] (bias)
    for (int64_t j = 0; j < nacc * L; ++j) acc_w[j] = C(0);
    const int64_t m_end = norm_slice_begin(per_head, S, s + 1);
    for (int64_t m = norm_slice_begin(per_head, S, s); m < m_end; ++m) {
      const int64_t r = h + P * m;
      const T* xr = x + r * L;
      const T* dyr = dy + r * L;
      const C* wh = w + h * L;
      const C mu = p.center ? mean[r] : C(0);
      const C rs = rstd[r];
      // pass 1: the two row means, dg, and the weight-gradient sums
      C sum_d = C(0), sum_dxh = C(0);
      for (int64_t j = 0; j < L; ++j) {
        const C xh = (load_as_compute(xr[j]) - mu) * rs;
        C e = load_as_compute(dyr[j]);
        if (p.gate) {
          const C sg = sigmoid(load_as_compute(g[r * L + j]));
          const C pre = xh * wh[j] + (p.bias ? b[h * L + j] : C(0));
          dg[r * L + j] = store_from_compute<T>(e * pre * sg * (C(1) - sg));
          e *= sg;
        }
        const C d = e * wh[j];
        sum_d += d;
        sum_dxh += d * xh;
        acc_w[j] += e * xh;
        if (p.bias) acc_b[j] += e;
      }
      const C c1 = p.center ? sum_d * inv_len : C(0);
      const C c2 = sum_dxh * inv_len;
      // pass 2: dx
      for (int64_t j = 0; j < L; ++j) {
        const C xh = (load_as_compute(xr[j]) - mu) * rs;
        C e = load_as_compute(dyr[j]);
        if (p.gate) e *= sigmoid(load_as_compute(g[r * L + j]));
        const C res = dres ? load_as_compute(dres[r * L + j]) : C(0);
        dx[r * L + j] = store_from_compute<T>(rs * (e * wh[j] - c1 - xh * c2) + res);
      }
    }
  }
  // ordered pass: dw[h] += sum_s scratch[s P + h]
  C* dw = static_cast<C*>(p.dw);
  C* db = static_cast<C*>(p.db);
  for (int64_t a = 0; a < nacc; ++a) {
    C* out = a == 0 ? dw : db;
    for (int64_t h = 0; h < P; ++h)
      for (int64_t j = 0; j < L; ++j) {
        C sum = C(0);
        for (int64_t s = 0; s < S; ++s) sum += scratch[((s * P + h) * nacc + a) * L + j];
        out[h * L + j] += sum;
      }
  }
}

}  // namespace

void norm(NormPass pass, DType dtype, const NormParams& p, uintptr_t) {
  if (p.rows == 0) return;
  visit_float_dtype(dtype, "cpu", "norm", [&](auto t) {
    using T = decltype(t);
    if (pass == NormPass::forward) norm_forward<T>(p);
    else norm_backward<T>(p);
  });
}

}  // namespace lt::kern::cpu
