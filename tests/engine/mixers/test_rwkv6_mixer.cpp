// The RWKV6 mixer at the Tensor level (engine/mixers/rwkv6.h) on the CPU: the ops path
// against the float64 naive recurrence and against finite differences of its own forward;
// the naive, fused-twin (fused and fallback backward) and ops paths in f32 against the f64
// recurrence; the contract (saved state reused, optional ht / dh0, argument errors).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "engine/mixers/rwkv6.h"
#include "engine/ops.h"
#include "tests/kernels/rwkv6_test_util.h"

using namespace lt::rwkv6;
using namespace lt::rwkv6::test;

namespace {

using lt::Tensor;
using lt::mixers::Rwkv6Config;
using lt::mixers::Rwkv6Path;

struct TensorInputs {
  Tensor r, k, v, w, u, h0, dO, dht;
  TensorInputs(const Problem& p, lt::DType dt) {
    const Dims& d = p.d;
    const lt::Shape tok{d.B, d.T, d.H, d.D}, st{d.B, d.H, d.D, d.D};
    r = Tensor::from_vector(p.r, tok, dt), k = Tensor::from_vector(p.k, tok, dt);
    v = Tensor::from_vector(p.v, tok, dt), w = Tensor::from_vector(p.w, tok, dt);
    u = Tensor::from_vector(p.u, {d.H, d.D}, dt);
    dO = Tensor::from_vector(p.dO, tok, dt);
    if (!p.h0.empty()) h0 = Tensor::from_vector(p.h0, st, dt);
    if (!p.dht.empty()) dht = Tensor::from_vector(p.dht, st, dt);
  }
  lt::mixers::Rwkv6Inputs inputs() const { return {r, k, v, w, u, h0, Tensor()}; }
};

// Loss of the ops path forward (f64): sum o . G + sum ht . Ght.
double ops_loss(const Problem& p, Rwkv6Config cfg) {
  TensorInputs in(p, lt::DType::f64);
  cfg.output_final_state = true;
  auto out = lt::mixers::rwkv6_forward(in.inputs(), cfg);
  std::vector<double> o = out.o.to_vector(), ht = out.ht.to_vector();
  double l = 0;
  for (size_t i = 0; i < o.size(); ++i) l += o[i] * p.dO[i];
  if (!p.dht.empty())
    for (size_t i = 0; i < ht.size(); ++i) l += ht[i] * p.dht[i];
  return l;
}

struct ApiCase {
  Dims d;
  GateKind gate;
  bool h0, dht;
};

}  // namespace

TEST_CASE("rwkv6 mixer ops path (f64, CPU) matches the naive recurrence", "[rwkv6][mixer][ops]") {
  const ApiCase cases[] = {
      {{2, 50, 2, 8, 16}, GateKind::kLogSigmoid, true, true},  // partial last chunk
      {{1, 77, 2, 12, 32}, GateKind::kNegExp, true, true},
      {{1, 100, 1, 8, 64}, GateKind::kNegExp, true, false},
      {{1, 29, 2, 4, 8}, GateKind::kLogSigmoid, true, true},  // the ops path takes any chunk
  };
  uint64_t seed = 4242;
  for (const auto& c : cases) {
    Problem p(c.d, seed++, c.gate, c.h0, c.dht);
    Grads ref = naive_reference(p);
    TensorInputs in(p, lt::DType::f64);
    Rwkv6Config cfg;
    cfg.chunk = static_cast<int>(c.d.C);
    cfg.scale = p.scale;
    cfg.path = Rwkv6Path::ops;
    cfg.output_final_state = true;
    auto out = lt::mixers::rwkv6_forward(in.inputs(), cfg);
    auto g = lt::mixers::rwkv6_backward(std::move(out.saved), in.dO, in.dht);
    REQUIRE(out.ht.dtype() == lt::DType::f64);
    REQUIRE(g.dh0.dtype() == lt::DType::f64);
    const double e[8] = {rel_err_l2(out.o.to_vector(), ref.o), rel_err_l2(out.ht.to_vector(), ref.ht),
                         rel_err_l2(g.dr.to_vector(), ref.dr), rel_err_l2(g.dk.to_vector(), ref.dk),
                         rel_err_l2(g.dv.to_vector(), ref.dv), rel_err_l2(g.dw.to_vector(), ref.dw),
                         rel_err_l2(g.du.to_vector(), ref.du), rel_err_l2(g.dh0.to_vector(), ref.dh0)};
    std::printf(
        "rwkv6 mixer ops f64 T%lld D%lld C%lld: o %.1e ht %.1e dr %.1e dk %.1e dv %.1e dw %.1e du %.1e "
        "dh0 %.1e\n",
        (long long)c.d.T, (long long)c.d.D, (long long)c.d.C, e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
    for (double x : e) CHECK(x < 1e-12);
  }
}

TEST_CASE("rwkv6 mixer ops path gradients match finite differences of the ops forward (f64)", "[rwkv6][mixer][ops]") {
  Dims d{1, 19, 2, 3, 16};  // partial second chunk
  Problem p(d, 777, GateKind::kNegExp, true, false, 0.8);
  Rwkv6Config cfg;
  cfg.chunk = 16;
  cfg.scale = p.scale;
  cfg.path = Rwkv6Path::ops;
  TensorInputs in(p, lt::DType::f64);
  auto out = lt::mixers::rwkv6_forward(in.inputs(), cfg);
  auto g = lt::mixers::rwkv6_backward(out.saved, in.dO);
  struct Item {
    std::vector<double>* x;
    std::vector<double> g;
    const char* name;
  };
  Item items[] = {{&p.r, g.dr.to_vector(), "dr"}, {&p.k, g.dk.to_vector(), "dk"}, {&p.v, g.dv.to_vector(), "dv"},
                  {&p.w, g.dw.to_vector(), "dw"}, {&p.u, g.du.to_vector(), "du"}, {&p.h0, g.dh0.to_vector(), "dh0"}};
  const double eps = 1e-6;
  for (auto& it : items) {
    double worst = 0;
    for (size_t i = 0; i < it.x->size(); ++i) {
      const double keep = (*it.x)[i];
      (*it.x)[i] = keep + eps;
      const double lp = ops_loss(p, cfg);
      (*it.x)[i] = keep - eps;
      const double lm = ops_loss(p, cfg);
      (*it.x)[i] = keep;
      worst = std::max(worst, std::abs((lp - lm) / (2 * eps) - it.g[i]) / std::max(1.0, std::abs(it.g[i])));
    }
    std::printf("  rwkv6 mixer ops fd %-3s worst %.2e\n", it.name, worst);
    CHECK(worst < 1e-7);
  }
}

TEST_CASE("rwkv6 mixer on the CPU: naive, fused twins (both backwards) and ops agree (f32 vs f64 naive)",
          "[rwkv6][mixer]") {
  Dims d{2, 45, 2, 16, 32};
  Problem p(d, 31337, GateKind::kLogSigmoid, true, true);
  Grads ref = naive_reference(p);
  TensorInputs in(p, lt::DType::f32);
  struct Run {
    Rwkv6Path path;
    BwdImpl backward;
  };
  for (const Run& run : {Run{Rwkv6Path::naive, BwdImpl::fused}, Run{Rwkv6Path::fused, BwdImpl::fused},
                         Run{Rwkv6Path::fused, BwdImpl::fallback}, Run{Rwkv6Path::ops, BwdImpl::fused}}) {
    Rwkv6Config cfg;
    cfg.chunk = static_cast<int>(d.C);
    cfg.path = run.path;
    cfg.backward = run.backward;
    cfg.output_final_state = true;
    auto out = lt::mixers::rwkv6_forward(in.inputs(), cfg);
    auto g = lt::mixers::rwkv6_backward(std::move(out.saved), in.dO, in.dht);
    CHECK(out.o.dtype() == lt::DType::f32);
    CHECK(out.ht.dtype() == lt::DType::f32);
    CHECK(g.dr.shape() == in.r.shape());
    CHECK(g.du.dtype() == lt::DType::f32);
    const double e[8] = {rel_err_l2(out.o.to_vector(), ref.o), rel_err_l2(out.ht.to_vector(), ref.ht),
                         rel_err_l2(g.dr.to_vector(), ref.dr), rel_err_l2(g.dk.to_vector(), ref.dk),
                         rel_err_l2(g.dv.to_vector(), ref.dv), rel_err_l2(g.dw.to_vector(), ref.dw),
                         rel_err_l2(g.du.to_vector(), ref.du), rel_err_l2(g.dh0.to_vector(), ref.dh0)};
    double worst = 0;
    for (double x : e) worst = std::max(worst, x);
    std::printf("rwkv6 mixer cpu f32 path %-6s backward %-8s worst rel err %.2e (dw %.2e)\n",
                lt::mixers::rwkv6_path_name(run.path), bwd_impl_name(run.backward), worst, e[5]);
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("rwkv6 mixer contract: optional ht and dh0, a saved state serves two backwards, errors name the problem",
          "[rwkv6][mixer]") {
  Dims d{1, 21, 2, 8, 16};
  Problem p(d, 99, GateKind::kNegExp, false, false);
  TensorInputs in(p, lt::DType::f64);
  for (Rwkv6Path path : {Rwkv6Path::naive, Rwkv6Path::ops, Rwkv6Path::fused}) {
    Rwkv6Config cfg;
    cfg.chunk = 16;
    cfg.path = path;
    auto out = lt::mixers::rwkv6_forward(in.inputs(), cfg);
    CHECK_FALSE(out.ht.defined());  // output_final_state is off
    auto g1 = lt::mixers::rwkv6_backward(out.saved, in.dO);
    auto g2 = lt::mixers::rwkv6_backward(out.saved, in.dO);
    CHECK_FALSE(g1.dh0.defined());  // no h0 given
    CHECK(rel_err_l2(g1.dw.to_vector(), g2.dw.to_vector()) == 0.0);
    CHECK(rel_err_l2(g1.du.to_vector(), g2.du.to_vector()) == 0.0);
  }
  CHECK(lt::mixers::parse_rwkv6_path("ops") == Rwkv6Path::ops);
  CHECK_THROWS_AS(lt::mixers::parse_rwkv6_path("autotune"), std::invalid_argument);
  CHECK(parse_bwd_impl("fallback") == BwdImpl::fallback);
  CHECK_THROWS_AS(parse_bwd_impl("fastest"), std::invalid_argument);
  Rwkv6Config bad;
  bad.chunk = 48;  // the fused path takes 16, 32, 64
  CHECK_THROWS_AS(lt::mixers::rwkv6_forward(in.inputs(), bad), std::invalid_argument);
  Rwkv6Config ok;
  ok.chunk = 16;
  auto out = lt::mixers::rwkv6_forward(in.inputs(), ok);
  CHECK_THROWS_AS(lt::mixers::rwkv6_backward(out.saved, in.r.narrow(1, 0, 5)), std::invalid_argument);
  CHECK_THROWS_AS(lt::mixers::rwkv6_backward(nullptr, in.dO), std::invalid_argument);
  lt::mixers::Rwkv6Inputs wrong_u = in.inputs();
  wrong_u.u = Tensor::zeros({d.H + 1, d.D}, lt::DType::f64);
  CHECK_THROWS_AS(lt::mixers::rwkv6_forward(wrong_u, ok), std::invalid_argument);
}
