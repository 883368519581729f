// The KDA gate and its derivatives in any real type (kernels/kda.h, Gate): the naive
// recurrence's (kernels/cpu/kda.cpp) and the tests' error scales (tests/support/kda_testing.h).
#pragma once

#include <cmath>

#include "kernels/kda.h"

namespace lt::kda {

template <class Real>
Real sigmoid_r(Real x) {
  return x >= 0 ? Real(1) / (Real(1) + std::exp(-x)) : std::exp(x) / (Real(1) + std::exp(x));
}

// Gate value and its derivatives with respect to x = f + dt_bias and a = A_log.
template <class Real>
struct GateEval {
  Real g, dg_dx, dg_da;
};
template <class Real>
GateEval<Real> gate_eval(Real x, Real a, const Gate& gate) {
  const Real ea = std::exp(a);
  if (gate.use_lower_bound) {
    const Real lb = static_cast<Real>(gate.lower_bound);
    const Real z = ea * x;
    // s (1 - s) = e / (1 + e)^2, e = e^{-|z|}: no cancelling 1 - s where s nears 1
    const Real e = std::exp(-std::abs(z)), r = Real(1) / (Real(1) + e);
    const Real s = z >= 0 ? r : e * r;
    const Real dg_dz = lb * (e * r) * r;
    return {lb * s, dg_dz * ea, dg_dz * ea * x};
  }
  const Real sp = x > Real(20) ? x : std::log1p(std::exp(x));
  const Real dsp = x > Real(20) ? Real(1) : sigmoid_r(x);
  const Real g = -ea * sp;
  return {g, -ea * dsp, g};
}

}  // namespace lt::kda
