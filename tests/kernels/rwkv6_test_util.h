// Shared helpers of the RWKV6 tests (CPU and CUDA): fla-style random inputs and the
// relative norm error ||x - ref|| / ||ref||.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>
#include "tests/support/compare.h"

#include "kernels/half.h"
#include "kernels/rwkv6.h"

namespace lt::rwkv6::test {

// kLogSigmoid: w = logsigmoid(z) (fla's tests); kNegExp: w = -exp(z) clamped at -20 (RWKV6's
// own parametrisation); kStrong: w = -exp(z + 1.5) clamped at -20, mean ~7 nats per row, so
// most 16-row blocks decay by more than kSafeRange (the tensor-core variant's elementwise
// columns) and some do not.
enum class GateKind { kLogSigmoid, kNegExp, kStrong };

// Inputs of one problem, in double (the reference precision). For bf16 runs the token
// inputs are rounded to bf16 values first (round_to_bf16), so every implementation sees
// exactly the same numbers.
struct Problem {
  Dims d;
  double scale = 1.0;
  std::vector<double> r, k, v, w, u, h0, dO, dht;  // h0 / dht empty when absent
  std::vector<uint8_t> seg_start;                  // [B, T] packed-document starts; empty: none

  Problem(const Dims& dims, uint64_t seed, GateKind gate = GateKind::kLogSigmoid, bool with_h0 = true,
          bool with_dht = true, double scale_ = -1.0)
      : d(dims) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    const int64_t n = d.token_numel();
    auto fill = [&](std::vector<double>& x, int64_t count, double s) {
      x.resize(count);
      for (auto& e : x) e = s * nd(rng);
    };
    fill(r, n, 1.0);
    fill(k, n, 1.0);
    fill(v, n, 1.0);
    w.resize(n);
    for (auto& e : w) {
      const double z = nd(rng);
      if (gate == GateKind::kLogSigmoid) e = -std::log1p(std::exp(-z));       // logsigmoid(z)
      else if (gate == GateKind::kNegExp) e = std::max(-std::exp(z), -20.0);  // -exp(z), clamped
      else e = std::max(-std::exp(z + 1.5), -20.0);
    }
    fill(u, d.H * d.D, 1.0);
    if (with_h0) fill(h0, d.state_numel(), 1.0);
    fill(dO, n, 1.0);
    if (with_dht) fill(dht, d.state_numel(), 1.0);
    scale = scale_ > 0 ? scale_ : 1.0 / std::sqrt(static_cast<double>(d.D));
  }

  void round_to_bf16() {
    auto rb = [](std::vector<double>& x) {
      for (auto& e : x) e = static_cast<double>(static_cast<float>(bfloat16(static_cast<float>(e))));
    };
    rb(r), rb(k), rb(v), rb(w), rb(dO);
  }
  const double* h0p() const { return h0.empty() ? nullptr : h0.data(); }
  const double* dhtp() const { return dht.empty() ? nullptr : dht.data(); }
  NaiveInputs<double> naive_inputs() const {
    return {d,        r.data(), k.data(),
            v.data(), w.data(), u.data(),
            h0p(),    scale,    seg_start.empty() ? nullptr : seg_start.data()};
  }
};

struct Grads {
  std::vector<double> o, ht, dr, dk, dv, dw, du, dh0;
  explicit Grads(const Dims& d)
      : o(d.token_numel()), ht(d.state_numel()), dr(d.token_numel()), dk(d.token_numel()), dv(d.token_numel()),
        dw(d.token_numel()), du(d.H * d.D), dh0(d.state_numel()) {}
};

inline const char* gate_name(GateKind g) {
  return g == GateKind::kLogSigmoid ? "logsig" : g == GateKind::kNegExp ? "-exp" : "strong";
}

inline Grads naive_reference(const Problem& p) {
  Grads g(p.d);
  naive_forward<double>(p.naive_inputs(), g.o.data(), g.ht.data());
  naive_backward<double>(p.naive_inputs(), p.dO.data(), p.dhtp(),
                         {g.dr.data(), g.dk.data(), g.dv.data(), g.dw.data(), g.du.data(), g.dh0.data()});
  return g;
}

// Errors are relative 2-norms (tests/support/compare.h: NaN anywhere gives +infinity).
using lt::test::rel_err_l2;

template <class T>
std::vector<T> cast_vec(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

}  // namespace lt::rwkv6::test
