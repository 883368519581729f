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
      std::vector<double> o(d.tokens_numel(), NAN), ht(d.state_numel(), NAN);
      std::vector<double> g[6];
      for (auto& x : g) x.assign(d.tokens_numel(), NAN);
      std::vector<double> du(d.H * d.D, NAN), dh0(d.state_numel(), NAN);
      double e[8] = {};
      auto run = [&](auto one) {
        using F = decltype(one);
        auto cv = [](const std::vector<double>& x) { return cast_vec<F>(x); };
        auto r = cv(p.r), k = cv(p.k), v = cv(p.v), w = cv(p.w), u = cv(p.u), h0 = cv(p.h0), dout = cv(p.dout),
             dht = cv(p.dht);
        const F* h0p = p.h0.empty() ? nullptr : h0.data();
        const F* dhtp = p.dht.empty() ? nullptr : dht.data();
        std::vector<F> fo(d.tokens_numel(), NAN), fht(d.state_numel(), NAN);
        chunk_forward_cpu<F>(d, static_cast<F>(p.scale), r.data(), k.data(), v.data(), w.data(), u.data(), h0p,
                             fo.data(), fht.data(), Variant::kTensorCore);
        e[0] = rel_err(fo, ref.o), e[1] = rel_err(fht, ref.ht);
        for (int fused = 1; fused >= 0; --fused) {
          std::vector<F> dr(d.tokens_numel(), NAN), dk(d.tokens_numel(), NAN), dv(d.tokens_numel(), NAN),
              dw(d.tokens_numel(), NAN), fdu(d.H * d.D, NAN), fdh0(d.state_numel(), NAN);
          chunk_backward_cpu<F>(d, fused == 1, static_cast<F>(p.scale), r.data(), k.data(), v.data(), w.data(),
                                u.data(), h0p, dout.data(), dhtp, dr.data(), dk.data(), dv.data(), dw.data(),
                                fdu.data(), fdh0.data(), Variant::kTensorCore);
          const double eb[6] = {rel_err(dr, ref.dr), rel_err(dk, ref.dk), rel_err(dv, ref.dv),
                                rel_err(dw, ref.dw), rel_err(fdu, ref.du), rel_err(fdh0, ref.dh0)};
          for (int i = 0; i < 6; ++i) e[2 + i] = std::max(e[2 + i], eb[i]);
        }
      };
      if (prec == 0) run(double{});
      else run(float{});
      std::printf("rwkv6 tc twin<%s> B%lld T%lld H%lld D%lld C%lld %s: o %.2e ht %.2e dr %.2e dk %.2e dv %.2e "
                  "dw %.2e du %.2e dh0 %.2e\n",
                  prec == 0 ? "f64" : "f32", (long long)d.B, (long long)d.T, (long long)d.H, (long long)d.D,
                  (long long)d.chunk, gate_name(c.gate), e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
      for (double x : e) {
        CHECK(x < 1e-2);
        worst = std::max(worst, x);
      }
    }
    ++seed;
  }
  std::printf("rwkv6 tc twin worst rel err %.2e\n", worst);
}

// ---------------------------------------------------------------------------------------
// The Tensor-level API (engine/mixers/rwkv6.h): the ops path on the CPU.
#include "engine/mixers/rwkv6.h"
#include "engine/ops.h"

namespace {

using lt::Tensor;
using lt::mixers::Rwkv6Options;
using lt::mixers::Rwkv6Path;

struct TensorInputs {
  Tensor r, k, v, w, u, h0, dout, dht;
  TensorInputs(const Problem& p, lt::DType dt) {
    const Dims& d = p.d;
    const lt::Shape tok{d.B, d.T, d.H, d.D}, st{d.B, d.H, d.D, d.D};
    r = Tensor::from_vector(p.r, tok, dt), k = Tensor::from_vector(p.k, tok, dt);
    v = Tensor::from_vector(p.v, tok, dt), w = Tensor::from_vector(p.w, tok, dt);
    u = Tensor::from_vector(p.u, {d.H, d.D}, dt);
    dout = Tensor::from_vector(p.dout, tok, dt);
    if (!p.h0.empty()) h0 = Tensor::from_vector(p.h0, st, dt);
    if (!p.dht.empty()) dht = Tensor::from_vector(p.dht, st, dt);
  }
};

// Loss of the ops path forward (f64): sum o . G + sum ht . Ght.
double ops_loss(const Problem& p, const Rwkv6Options& opt) {
  TensorInputs in(p, lt::DType::f64);
  auto out = lt::mixers::rwkv6_forward(in.r, in.k, in.v, in.w, in.u, in.h0, opt);
  std::vector<double> o = out.o.to_vector(), ht = out.ht.to_vector();
  double l = 0;
  for (size_t i = 0; i < o.size(); ++i) l += o[i] * p.dout[i];
  if (!p.dht.empty())
    for (size_t i = 0; i < ht.size(); ++i) l += ht[i] * p.dht[i];
  return l;
}

}  // namespace

TEST_CASE("rwkv6 ops path (f64, CPU) matches the naive recurrence", "[rwkv6][ops]") {
  const TwinCase cases[] = {
      {{2, 50, 2, 8, 16}, GateKind::kLogSigmoid, true, true},   // partial last chunk
      {{1, 77, 2, 12, 32}, GateKind::kNegExp, false, true},
      {{1, 100, 1, 8, 64}, GateKind::kNegExp, true, false},
  };
  uint64_t seed = 4242;
  for (const auto& c : cases) {
    Problem p(c.d, seed++, c.gate, c.h0, c.dht);
    Grads ref = naive_reference(p);
    TensorInputs in(p, lt::DType::f64);
    Rwkv6Options opt;
    opt.chunk = c.d.chunk;
    opt.scale = p.scale;
    opt.path = Rwkv6Path::ops;
    auto out = lt::mixers::rwkv6_forward(in.r, in.k, in.v, in.w, in.u, in.h0, opt);
    auto g = lt::mixers::rwkv6_backward(in.r, in.k, in.v, in.w, in.u, in.h0, in.dout, in.dht, opt);
    const double e[8] = {rel_err(out.o.to_vector(), ref.o),  rel_err(out.ht.to_vector(), ref.ht),
                         rel_err(g.dr.to_vector(), ref.dr),  rel_err(g.dk.to_vector(), ref.dk),
                         rel_err(g.dv.to_vector(), ref.dv),  rel_err(g.dw.to_vector(), ref.dw),
                         rel_err(g.du.to_vector(), ref.du),  rel_err(g.dh0.to_vector(), ref.dh0)};
    std::printf("rwkv6 ops f64 T%lld D%lld C%lld: o %.1e ht %.1e dr %.1e dk %.1e dv %.1e dw %.1e du %.1e dh0 %.1e\n",
                (long long)c.d.T, (long long)c.d.D, (long long)c.d.chunk, e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
    // ht and dh0 leave as fp32 (the state dtype), everything else stays f64.
    for (int i = 0; i < 8; ++i) CHECK(e[i] < (i == 1 || i == 7 ? 1e-6 : 1e-12));
  }
}

TEST_CASE("rwkv6 ops path gradients match finite differences of the ops forward (f64)", "[rwkv6][ops]") {
  Dims d{1, 19, 2, 3, 16};  // partial second chunk
  Problem p(d, 777, GateKind::kNegExp, true, false, 0.8);
  Rwkv6Options opt;
  opt.chunk = 16;
  opt.scale = p.scale;
  opt.path = Rwkv6Path::ops;
  TensorInputs in(p, lt::DType::f64);
  auto g = lt::mixers::rwkv6_backward(in.r, in.k, in.v, in.w, in.u, in.h0, in.dout, in.dht, opt);
  struct Item { std::vector<double>* x; std::vector<double> g; const char* name; };
  Item items[] = {{&p.r, g.dr.to_vector(), "dr"}, {&p.k, g.dk.to_vector(), "dk"}, {&p.v, g.dv.to_vector(), "dv"},
                  {&p.w, g.dw.to_vector(), "dw"}, {&p.u, g.du.to_vector(), "du"}};
  const double eps = 1e-6;
  for (auto& it : items) {
    double worst = 0;
    for (size_t i = 0; i < it.x->size(); ++i) {
      const double keep = (*it.x)[i];
      (*it.x)[i] = keep + eps;
      const double lp = ops_loss(p, opt);
      (*it.x)[i] = keep - eps;
      const double lm = ops_loss(p, opt);
      (*it.x)[i] = keep;
      worst = std::max(worst, std::abs((lp - lm) / (2 * eps) - it.g[i]) / std::max(1.0, std::abs(it.g[i])));
    }
    std::printf("  ops fd %-3s worst %.2e\n", it.name, worst);
    CHECK(worst < 1e-7);
  }
}

TEST_CASE("rwkv6 Tensor API on the CPU: naive, fused and fallback twins agree (f32 vs f64 naive)", "[rwkv6][ops]") {
  Dims d{2, 45, 2, 16, 32};
  Problem p(d, 31337, GateKind::kLogSigmoid, true, true);
  Grads ref = naive_reference(p);
  TensorInputs in(p, lt::DType::f32);
  for (Rwkv6Path path : {Rwkv6Path::naive, Rwkv6Path::fused, Rwkv6Path::fallback, Rwkv6Path::ops}) {
    Rwkv6Options opt;
    opt.chunk = d.chunk;
    opt.path = path;
    auto out = lt::mixers::rwkv6_forward(in.r, in.k, in.v, in.w, in.u, in.h0, opt);
    auto g = lt::mixers::rwkv6_backward(in.r, in.k, in.v, in.w, in.u, in.h0, in.dout, in.dht, opt);
    CHECK(out.o.dtype() == lt::DType::f32);
    CHECK(g.dr.shape() == in.r.shape());
    const double e[8] = {rel_err(out.o.to_vector(), ref.o),  rel_err(out.ht.to_vector(), ref.ht),
                         rel_err(g.dr.to_vector(), ref.dr),  rel_err(g.dk.to_vector(), ref.dk),
                         rel_err(g.dv.to_vector(), ref.dv),  rel_err(g.dw.to_vector(), ref.dw),
                         rel_err(g.du.to_vector(), ref.du),  rel_err(g.dh0.to_vector(), ref.dh0)};
    double worst = 0;
    for (double x : e) worst = std::max(worst, x);
    std::printf("rwkv6 api cpu f32 path %-8s worst rel err %.2e (dw %.2e)\n", lt::mixers::rwkv6_path_name(path), worst,
                e[5]);
    CHECK(worst < 1e-5);
  }
  CHECK_THROWS_AS(lt::mixers::parse_rwkv6_path("nope"), std::invalid_argument);
  Rwkv6Options bad;
  bad.chunk = 48;
  CHECK_THROWS_AS(lt::mixers::rwkv6_forward(in.r, in.k, in.v, in.w, in.u, in.h0, bad), std::invalid_argument);
}
