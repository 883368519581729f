// Packed documents in the naive recurrences (the ground truth for issue-34's segment starts):
// one row holding several documents with seg_start set equals each document run as its own
// sequence (outputs, final state, every gradient), and a start at t = 0 drops h0 (dh0 = 0).
// Fresh random inputs per run (LINTRAIN_TEST_SEED replays one).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/kda.h"
#include "kernels/rwkv6.h"
#include "tests/support/test_seed.h"

using namespace lt;

namespace {

constexpr int64_t kT = 13, kH = 2;
constexpr int kD = 4;
// documents [0, 5), [5, 6) (one token), [6, 13); with a start at 0 or not
const std::vector<int64_t> kStarts = {5, 6};

std::vector<double> randn(size_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> nd(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = nd(rng);
  return v;
}

// Rows [t0, t1) of a [1, T, H, D] (or [1, T, H]) array as a [1, t1 - t0, ...] array.
std::vector<double> rows(const std::vector<double>& a, int64_t t0, int64_t t1, int64_t per_token) {
  return std::vector<double>(a.begin() + t0 * per_token, a.begin() + t1 * per_token);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

template <class Run>
void check_packed_once(Run run, const uint8_t* starts, bool start_at_zero) {
  const auto packed = run(0, kT, true, true, starts);
  std::vector<int64_t> bounds = {0};
  bounds.insert(bounds.end(), kStarts.begin(), kStarts.end());
  bounds.push_back(kT);
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int64_t t0 = bounds[s], t1 = bounds[s + 1];
    const bool first = s == 0;
    const bool last = s + 2 == bounds.size();
    const auto doc = run(t0, t1, first && !start_at_zero, last, nullptr);
    INFO("document [" << t0 << ", " << t1 << ")" << lt::testing::replay_hint());
    for (size_t part = 0; part < packed.per_token.size(); ++part) {
      INFO("part " << part);
      const int64_t per = static_cast<int64_t>(packed.per_token[part].size()) / kT;
      CHECK(max_abs_diff(rows(packed.per_token[part], t0, t1, per), doc.per_token[part]) < 1e-12);
    }
    if (last) CHECK(max_abs_diff(packed.ht, doc.ht) < 1e-12);  // the last document's state
    if (first && !start_at_zero) CHECK(max_abs_diff(packed.dh0, doc.dh0) < 1e-12);
  }
  if (start_at_zero)
    for (double x : packed.dh0) CHECK(x == 0.0);
}

// Checks a mixer's packed run against per-document runs, with and without a document start at
// t = 0. Run(t0, t1, use_h0, use_dht, seg_start) returns {o and the per-token grads, ht, dh0} of
// tokens [t0, t1) (seg_start non-null: the whole row, packed); dht, the gradient of the row's
// final state, reaches only the last document.
template <class Run>
void check_packed(Run run) {
  for (bool start_at_zero : {false, true}) {
    INFO("start at t = 0: " << start_at_zero);
    std::vector<uint8_t> starts(kT, 0);
    for (int64_t s : kStarts) starts[s] = 1;
    starts[0] = start_at_zero;
    check_packed_once(run, starts.data(), start_at_zero);
  }
}

struct Out {
  std::vector<std::vector<double>> per_token;  // o and the per-token gradients
  std::vector<double> ht, dh0;
};

}  // namespace

TEST_CASE("kda naive: packed documents equal separate sequences", "[kernels][kda][segments]") {
  std::mt19937_64 rng(lt::testing::test_seed() + 301);
  const size_t n = kT * kH * kD;
  const auto q = randn(n, rng), k = randn(n, rng), v = randn(n, rng), f = randn(n, rng), dO = randn(n, rng);
  const auto b = randn(kT * kH, rng), A_log = randn(kH, rng, 0.5), dt_bias = randn(kH * kD, rng, 0.5);
  const auto h0 = randn(kH * kD * kD, rng), dht = randn(kH * kD * kD, rng);
  auto run = [&](int64_t t0, int64_t t1, bool use_h0, bool use_dht, const uint8_t* seg_start) {
    const int64_t T = t1 - t0, per = kH * kD;
    const auto q_ = rows(q, t0, t1, per), k_ = rows(k, t0, t1, per), v_ = rows(v, t0, t1, per);
    const auto f_ = rows(f, t0, t1, per), dO_ = rows(dO, t0, t1, per), b_ = rows(b, t0, t1, kH);
    kda::NaiveInputs<double> in;
    in.dims.B = 1, in.dims.T = T, in.dims.H = kH, in.dims.D = kD;
    in.q = q_.data(), in.k = k_.data(), in.v = v_.data(), in.f = f_.data(), in.b = b_.data();
    in.A_log = A_log.data(), in.dt_bias = dt_bias.data(), in.h0 = use_h0 ? h0.data() : nullptr;
    in.seg_start = seg_start;
    Out r;
    std::vector<double> o(T * per), dq(T * per), dk(T * per), dv(T * per), df(T * per), db(T * kH);
    std::vector<double> dA(kH), ddt(kH * kD);
    r.ht.resize(kH * kD * kD);
    r.dh0.assign(kH * kD * kD, 0.0);
    kda::naive_forward<double>(in, o.data(), r.ht.data());
    kda::NaiveGrads<double> g{dq.data(), dk.data(), dv.data(),  df.data(),
                              db.data(), dA.data(), ddt.data(), r.dh0.data()};
    kda::naive_backward<double>(in, dO_.data(), use_dht ? dht.data() : nullptr, g);
    r.per_token = {o, dq, dk, dv, df, db};
    return r;
  };
  check_packed(run);
}

TEST_CASE("rwkv6 naive: packed documents equal separate sequences", "[kernels][rwkv6][segments]") {
  std::mt19937_64 rng(lt::testing::test_seed() + 302);
  const size_t n = kT * kH * kD;
  const auto r_ = randn(n, rng), k = randn(n, rng), v = randn(n, rng), dO = randn(n, rng);
  auto w = randn(n, rng, 0.5);
  for (double& x : w) x = -std::exp(x);  // log decays < 0
  const auto u = randn(kH * kD, rng), h0 = randn(kH * kD * kD, rng), dht = randn(kH * kD * kD, rng);
  auto run = [&](int64_t t0, int64_t t1, bool use_h0, bool use_dht, const uint8_t* seg_start) {
    const int64_t T = t1 - t0, per = kH * kD;
    const auto rr = rows(r_, t0, t1, per), kk = rows(k, t0, t1, per), vv = rows(v, t0, t1, per);
    const auto ww = rows(w, t0, t1, per), dOO = rows(dO, t0, t1, per);
    rwkv6::NaiveInputs<double> in;
    in.dims.B = 1, in.dims.T = T, in.dims.H = kH, in.dims.D = kD;
    in.r = rr.data(), in.k = kk.data(), in.v = vv.data(), in.w = ww.data(), in.u = u.data();
    in.h0 = use_h0 ? h0.data() : nullptr;
    in.seg_start = seg_start;
    Out o_;
    std::vector<double> o(T * per), dr(T * per), dk(T * per), dv(T * per), dw(T * per), du(kH * kD);
    o_.ht.resize(kH * kD * kD);
    o_.dh0.assign(kH * kD * kD, 0.0);
    rwkv6::naive_forward<double>(in, o.data(), o_.ht.data());
    rwkv6::NaiveGrads<double> g{dr.data(), dk.data(), dv.data(), dw.data(), du.data(), o_.dh0.data()};
    rwkv6::naive_backward<double>(in, dOO.data(), use_dht ? dht.data() : nullptr, g);
    o_.per_token = {o, dr, dk, dv, dw};
    return o_;
  };
  check_packed(run);
}
