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

// Loss L = sum o . G + sum ht . Ght (G = dO, Ght = dht), in float64.
double loss(const Problem& p) {
  std::vector<double> o(p.d.token_numel()), ht(p.d.state_numel());
  naive_forward<double>(p.naive_inputs(), o.data(), ht.data());
  double l = 0;
  for (size_t i = 0; i < o.size(); ++i) l += o[i] * p.dO[i];
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
    Problem p(d, 1234 + variant, variant == 0 ? GateKind::kLogSigmoid : GateKind::kNegExp, variant == 0, variant == 0,
              0.7);
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
  auto r = cast_vec<F>(p.r), k = cast_vec<F>(p.k), v = cast_vec<F>(p.v), w = cast_vec<F>(p.w), u = cast_vec<F>(p.u),
       h0 = cast_vec<F>(p.h0), dO = cast_vec<F>(p.dO), dht = cast_vec<F>(p.dht);
  const F* h0p = p.h0.empty() ? nullptr : h0.data();
  const F* dhtp = p.dht.empty() ? nullptr : dht.data();
  const Dims& d = c.d;
  std::vector<F> o(d.token_numel(), NAN), ht(d.state_numel(), NAN);
  chunk_forward_cpu<F>(d, static_cast<F>(p.scale), r.data(), k.data(), v.data(), w.data(), u.data(), h0p, o.data(),
                       ht.data());
  const double eo = rel_err_l2(o, ref.o), eht = rel_err_l2(ht, ref.ht);
  std::printf("rwkv6 twin<%s> B%lld T%lld H%lld D%lld C%lld gate %s h0 %d dht %d: o %.2e ht %.2e\n",
              sizeof(F) == 8 ? "f64" : "f32", (long long)d.B, (long long)d.T, (long long)d.H, (long long)d.D,
              (long long)d.C, c.gate == GateKind::kLogSigmoid ? "logsig" : "-exp", c.h0, c.dht, eo, eht);
  CHECK(eo < tol);
  CHECK(eht < tol);
  for (int fused = 1; fused >= 0; --fused) {
    std::vector<F> dr(d.token_numel(), NAN), dk(d.token_numel(), NAN), dv(d.token_numel(), NAN),
        dw(d.token_numel(), NAN), du(d.H * d.D, NAN), dh0(d.state_numel(), NAN);
    chunk_backward_cpu<F>(d, fused == 1 ? BwdImpl::fused : BwdImpl::fallback, static_cast<F>(p.scale), r.data(),
                          k.data(), v.data(), w.data(), u.data(), h0p, dO.data(), dhtp, dr.data(), dk.data(), dv.data(),
                          dw.data(), du.data(), dh0.data());
    const double e[6] = {rel_err_l2(dr, ref.dr), rel_err_l2(dk, ref.dk), rel_err_l2(dv, ref.dv),
                         rel_err_l2(dw, ref.dw), rel_err_l2(du, ref.du), rel_err_l2(dh0, ref.dh0)};
    std::printf("    %-8s dr %.2e dk %.2e dv %.2e dw %.2e du %.2e dh0 %.2e\n", fused ? "fused" : "fallback", e[0], e[1],
                e[2], e[3], e[4], e[5]);
    for (double x : e) CHECK(x < tol);
  }
}

}  // namespace

TEST_CASE("rwkv6 CPU twins of the fused stages match the naive recurrence (f64)", "[rwkv6]") {
  const TwinCase cases[] = {
      {{1, 1, 1, 8, 16}, GateKind::kLogSigmoid, true, true},    // a single token
      {{2, 50, 2, 8, 16}, GateKind::kLogSigmoid, true, true},   // partial last chunk (50 = 3*16+2)
      {{1, 77, 2, 12, 32}, GateKind::kNegExp, false, true},     // no h0, partial
      {{2, 100, 1, 8, 64}, GateKind::kNegExp, true, false},     // 64-chunks, partial, no dht
      {{1, 128, 2, 8, 64}, GateKind::kLogSigmoid, true, true},  // exact chunks
  };
  uint64_t seed = 99;
  for (const auto& c : cases) check_twins<double>(c, 1e-12, seed++);
}

TEST_CASE("rwkv6 CPU twins in f32 stay within 1e-5 of the f64 recurrence, strong decays included", "[rwkv6]") {
  const TwinCase cases[] = {
      {{1, 90, 2, 16, 64}, GateKind::kNegExp, true, true},  // w down to -20: e^{-Gi} would overflow
      {{2, 70, 1, 16, 32}, GateKind::kLogSigmoid, true, true},
      {{1, 40, 2, 16, 16}, GateKind::kNegExp, true, true},
  };
  uint64_t seed = 7;
  for (const auto& c : cases) check_twins<float>(c, 1e-5, seed++);
}

TEST_CASE("rwkv6 CPU twins of the tensor-core variant (bf16 operands) match the f64 recurrence within 1e-2",
          "[rwkv6][tc]") {
  // Inputs rounded to bf16 (as the bf16 CUDA path sees them); the twins round every MMA
  // operand to bf16 where the tensor-core kernels do and accumulate in F. Expected error
  // ~1e-3 (bf16 operand rounding), gate 1e-2 as for bf16 on the GPU. The strong gates make
  // most diagonal-block columns exceed kSafeRange (elementwise columns) and leave some safe.
  const TwinCase cases[] = {
      {{2, 100, 2, 64, 64}, GateKind::kLogSigmoid, true, true},
      {{1, 90, 2, 64, 64}, GateKind::kStrong, true, true},
      {{1, 77, 1, 32, 32}, GateKind::kNegExp, false, true},
      {{1, 70, 2, 32, 32}, GateKind::kStrong, true, false},
  };
  uint64_t seed = 4242;
  double worst = 0;
  for (const auto& c : cases) {
    for (int prec = 0; prec < 2; ++prec) {
      Problem p(c.d, seed, c.gate, c.h0, c.dht);
      p.round_to_bf16();
      Grads ref = naive_reference(p);
      const Dims& d = c.d;
      std::vector<double> o(d.token_numel(), NAN), ht(d.state_numel(), NAN);
      std::vector<double> g[6];
      for (auto& x : g) x.assign(d.token_numel(), NAN);
      std::vector<double> du(d.H * d.D, NAN), dh0(d.state_numel(), NAN);
      double e[8] = {};
      auto run = [&](auto one) {
        using F = decltype(one);
        auto cv = [](const std::vector<double>& x) { return cast_vec<F>(x); };
        auto r = cv(p.r), k = cv(p.k), v = cv(p.v), w = cv(p.w), u = cv(p.u), h0 = cv(p.h0), dO = cv(p.dO),
             dht = cv(p.dht);
        const F* h0p = p.h0.empty() ? nullptr : h0.data();
        const F* dhtp = p.dht.empty() ? nullptr : dht.data();
        std::vector<F> fo(d.token_numel(), NAN), fht(d.state_numel(), NAN);
        chunk_forward_cpu<F>(d, static_cast<F>(p.scale), r.data(), k.data(), v.data(), w.data(), u.data(), h0p,
                             fo.data(), fht.data(), Variant::tensor_core);
        e[0] = rel_err_l2(fo, ref.o), e[1] = rel_err_l2(fht, ref.ht);
        for (int fused = 1; fused >= 0; --fused) {
          std::vector<F> dr(d.token_numel(), NAN), dk(d.token_numel(), NAN), dv(d.token_numel(), NAN),
              dw(d.token_numel(), NAN), fdu(d.H * d.D, NAN), fdh0(d.state_numel(), NAN);
          chunk_backward_cpu<F>(d, fused == 1 ? BwdImpl::fused : BwdImpl::fallback, static_cast<F>(p.scale), r.data(),
                                k.data(), v.data(), w.data(), u.data(), h0p, dO.data(), dhtp, dr.data(), dk.data(),
                                dv.data(), dw.data(), fdu.data(), fdh0.data(), Variant::tensor_core);
          const double eb[6] = {rel_err_l2(dr, ref.dr), rel_err_l2(dk, ref.dk),  rel_err_l2(dv, ref.dv),
                                rel_err_l2(dw, ref.dw), rel_err_l2(fdu, ref.du), rel_err_l2(fdh0, ref.dh0)};
          for (int i = 0; i < 6; ++i) e[2 + i] = std::max(e[2 + i], eb[i]);
        }
      };
      if (prec == 0) run(double{});
      else run(float{});
      std::printf(
          "rwkv6 tc twin<%s> B%lld T%lld H%lld D%lld C%lld %s: o %.2e ht %.2e dr %.2e dk %.2e dv %.2e "
          "dw %.2e du %.2e dh0 %.2e\n",
          prec == 0 ? "f64" : "f32", (long long)d.B, (long long)d.T, (long long)d.H, (long long)d.D, (long long)d.C,
          gate_name(c.gate), e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
      for (double x : e) {
        CHECK(x < 1e-2);
        worst = std::max(worst, x);
      }
    }
    ++seed;
  }
  std::printf("rwkv6 tc twin worst rel err %.2e\n", worst);
}
