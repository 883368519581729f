// RWKV6 on the CPU: the naive recurrence against finite differences (float64), and the
// CPU twins of the fused CUDA stages (fused and fallback backward) against the naive
// recurrence, in float64 and float32, including a partial last chunk, an initial state, a
// final-state gradient, every chunk size and strong decays that would overflow a naive
// factorisation e^{-Gi}.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <functional>

#include "tests/kernels/rwkv6_test_util.h"

using namespace lt::rwkv6;
using namespace lt::rwkv6::test;

namespace {

// Loss L = sum o . G + sum ht . Ght (G = dout, Ght = dht), in float64.
double loss(const Problem& p) {
  std::vector<double> o(p.d.tokens_numel()), ht(p.d.state_numel());
  naive_forward<double>(p.d, p.scale, p.r.data(), p.k.data(), p.v.data(), p.w.data(), p.u.data(), p.h0p(),
                        o.data(), ht.data());
  double l = 0;
  for (size_t i = 0; i < o.size(); ++i) l += o[i] * p.dout[i];
  if (!p.dht.empty())
    for (size_t i = 0; i < ht.size(); ++i) l += ht[i] * p.dht[i];
  return l;
}

// Central differences of every element of `x` against the analytic gradient `g`.
double fd_check(Problem& p, std::vector<double>& x, const std::vector<double>& g, const char* name) {
  const double eps = 1e-6;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double lp = loss(p);
    x[i] = keep - eps;
    const double lm = loss(p);
    x[i] = keep;
    const double fd = (lp - lm) / (2 * eps);
    const double err = std::abs(fd - g[i]) / std::max(1.0, std::abs(g[i]));
    worst = std::max(worst, err);
  }
  std::printf("  fd %-4s worst err %.3e\n", name, worst);
  return worst;
}

}  // namespace

TEST_CASE("rwkv6 naive backward matches finite differences (f64)", "[rwkv6]") {
  for (int variant = 0; variant < 2; ++variant) {
    Dims d{2, 7, 2, 3, 16};
    Problem p(d, 1234 + variant, variant == 0 ? GateKind::kLogSigmoid : GateKind::kNegExp, variant == 0,
              variant == 0, 0.7);
    Grads g = naive_reference(p);
    std::printf("rwkv6 fd variant %d (h0/dht %s)\n", variant, variant == 0 ? "on" : "off");
    CHECK(fd_check(p, p.r, g.dr, "dr") < 1e-7);
    CHECK(fd_check(p, p.k, g.dk, "dk") < 1e-7);
    CHECK(fd_check(p, p.v, g.dv, "dv") < 1e-7);
    CHECK(fd_check(p, p.w, g.dw, "dw") < 1e-7);
    CHECK(fd_check(p, p.u, g.du, "du") < 1e-7);
    if (variant == 0) CHECK(fd_check(p, p.h0, g.dh0, "dh0") < 1e-7);
  }
}

namespace {

struct TwinCase {
  Dims d;
  GateKind gate;
  bool h0, dht;
};

template <class F>
void check_twins(const TwinCase& c, double tol, uint64_t seed) {
  Problem p(c.d, seed, c.gate, c.h0, c.dht);
  Grads ref = naive_reference(p);
  auto r = cast_vec<F>(p.r), k = cast_vec<F>(p.k), v = cast_vec<F>(p.v), w = cast_vec<F>(p.w),
       u = cast_vec<F>(p.u), h0 = cast_vec<F>(p.h0), dout = cast_vec<F>(p.dout), dht = cast_vec<F>(p.dht);
  const F* h0p = p.h0.empty() ? nullptr : h0.data();
  const F* dhtp = p.dht.empty() ? nullptr : dht.data();
  const Dims& d = c.d;
  std::vector<F> o(d.tokens_numel(), NAN), ht(d.state_numel(), NAN);
  chunk_forward_cpu<F>(d, static_cast<F>(p.scale), r.data(), k.data(), v.data(), w.data(), u.data(), h0p,
                       o.data(), ht.data());
  const double eo = rel_err(o, ref.o), eht = rel_err(ht, ref.ht);
  std::printf("rwkv6 twin<%s> B%lld T%lld H%lld D%lld C%lld gate %s h0 %d dht %d: o %.2e ht %.2e\n",
              sizeof(F) == 8 ? "f64" : "f32", (long long)d.B, (long long)d.T, (long long)d.H, (long long)d.D,
              (long long)d.chunk, c.gate == GateKind::kLogSigmoid ? "logsig" : "-exp", c.h0, c.dht, eo, eht);
  CHECK(eo < tol);
  CHECK(eht < tol);
  for (int fused = 1; fused >= 0; --fused) {
    std::vector<F> dr(d.tokens_numel(), NAN), dk(d.tokens_numel(), NAN), dv(d.tokens_numel(), NAN),
        dw(d.tokens_numel(), NAN), du(d.H * d.D, NAN), dh0(d.state_numel(), NAN);
    chunk_backward_cpu<F>(d, fused == 1, static_cast<F>(p.scale), r.data(), k.data(), v.data(), w.data(),
                          u.data(), h0p, dout.data(), dhtp, dr.data(), dk.data(), dv.data(), dw.data(),
                          du.data(), dh0.data());
    const double e[6] = {rel_err(dr, ref.dr), rel_err(dk, ref.dk), rel_err(dv, ref.dv),
                         rel_err(dw, ref.dw), rel_err(du, ref.du), rel_err(dh0, ref.dh0)};
    std::printf("    %-8s dr %.2e dk %.2e dv %.2e dw %.2e du %.2e dh0 %.2e\n", fused ? "fused" : "fallback", e[0],
                e[1], e[2], e[3], e[4], e[5]);
    for (double x : e) CHECK(x < tol);
  }
}

}  // namespace

TEST_CASE("rwkv6 CPU twins of the fused stages match the naive recurrence (f64)", "[rwkv6]") {
  const TwinCase cases[] = {
      {{1, 1, 1, 8, 16}, GateKind::kLogSigmoid, true, true},     // a single token
      {{2, 50, 2, 8, 16}, GateKind::kLogSigmoid, true, true},    // partial last chunk (50 = 3*16+2)
      {{1, 77, 2, 12, 32}, GateKind::kNegExp, false, true},      // no h0, partial
      {{2, 100, 1, 8, 64}, GateKind::kNegExp, true, false},      // 64-chunks, partial, no dht
      {{1, 128, 2, 8, 64}, GateKind::kLogSigmoid, true, true},   // exact chunks
  };
  uint64_t seed = 99;
  for (const auto& c : cases) check_twins<double>(c, 1e-12, seed++);
}

TEST_CASE("rwkv6 CPU twins in f32 stay within 1e-5 of the f64 recurrence, strong decays included", "[rwkv6]") {
  const TwinCase cases[] = {
      {{1, 90, 2, 16, 64}, GateKind::kNegExp, true, true},     // w down to -20: e^{-Gi} would overflow
      {{2, 70, 1, 16, 32}, GateKind::kLogSigmoid, true, true},
      {{1, 40, 2, 16, 16}, GateKind::kNegExp, true, true},
  };
  uint64_t seed = 7;
  for (const auto& c : cases) check_twins<float>(c, 1e-5, seed++);
}
