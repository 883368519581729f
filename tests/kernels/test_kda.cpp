// KDA on the CPU: the naive recurrence against finite differences (float64), and the CPU
// twins of the fused kernels (the kernels' own block programs on an emulated block)
// against the naive recurrence. Inputs are fresh random draws each run (seed printed;
// LINTRAIN_TEST_SEED=<n> replays one). The mixer's Tensor API is tested in
// tests/engine/mixers/test_kda_mixer.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <type_traits>
#include <vector>

#include "kernels/kda.h"
#include "kernels/kda/instances.h"
#include "kernels/kda/scalar.h"
#include "tests/support/kda_testing.h"

using namespace lt;
using namespace lt::kda;
using namespace lt::kda::testing;

namespace {

// L = sum o * dO + sum ht * dht, evaluated by the naive forward in float64.
double naive_loss(const Case& c, const Data& x) {
  const NaiveInputs<double> in = naive_inputs(c, x);
  std::vector<double> o(x.q.size()), ht(static_cast<size_t>(c.dims.B * c.dims.H * c.dims.D * c.dims.D));
  naive_forward<double>(in, o.data(), ht.data());
  double L = 0;
  for (size_t i = 0; i < o.size(); ++i) L += o[i] * x.dO[i];
  if (c.dht)
    for (size_t i = 0; i < ht.size(); ++i) L += ht[i] * x.dht[i];
  return L;
}

// Central differences of naive_loss with respect to every element of *p.
std::vector<double> finite_diff(const Case& c, Data& x, std::vector<double>* p, double eps) {
  std::vector<double> g(p->size());
  for (size_t i = 0; i < p->size(); ++i) {
    const double keep = (*p)[i];
    (*p)[i] = keep + eps;
    const double lp = naive_loss(c, x);
    (*p)[i] = keep - eps;
    const double lm = naive_loss(c, x);
    (*p)[i] = keep;
    g[i] = (lp - lm) / (2 * eps);
  }
  return g;
}

Result run_fused_twin(const Case& c, const Data& x) {
  const Dims& d = c.dims;
  const size_t n = x.q.size(), nb = x.b.size(), ns = static_cast<size_t>(d.B * d.H * d.D * d.D);
  Typed q(c.dtype, x.q), k(c.dtype, x.k), v(c.dtype, x.v), f(c.dtype, x.f), b(c.dtype, x.b), dO(c.dtype, x.dO);
  std::vector<float> A_log = to_f32(x.A_log), dt_bias = to_f32(x.dt_bias), h0 = to_f32(x.h0), dht = to_f32(x.dht);
  Typed o(c.dtype, n), dq(c.dtype, n), dk(c.dtype, n), dv(c.dtype, n), df(c.dtype, n), db(c.dtype, nb);
  std::vector<float> ht(ns, NAN), h(trajectory_bytes(d) / 4, NAN), dA_log(d.H, NAN), ddt(d.H * d.D, NAN), dh0(ns, NAN);
  const WorkspaceBytes wb = workspace_bytes(d, c.dtype);
  const size_t tile_elems = wb.tile / dtype_size(c.dtype), tile_f32_elems = wb.tile_f32 / 4;
  // every buffer poisoned with NaN (Typed(dtype, n) and the NAN fills)
  Typed W(c.dtype, tile_elems), sQ(c.dtype, tile_elems), Qp(c.dtype, tile_elems), Ob(c.dtype, tile_elems);
  Typed U(DType::f32, tile_f32_elems), Kbar(DType::f32, tile_f32_elems);
  Typed aqk(c.dtype, wb.aqk / dtype_size(c.dtype));
  std::vector<float> gam(wb.gamma / 4, NAN), dgs(wb.gamma / 4, NAN), parts(wb.partials / 4, NAN);
  std::vector<uint32_t> counters(wb.counters / sizeof(uint32_t), 0xFFFFFFFFu);
  ForwardWorkspace fw;
  fw.W = W.data();
  fw.U = static_cast<float*>(U.data());
  fw.sQ = sQ.data();
  fw.Kbar = static_cast<float*>(Kbar.data());
  fw.Aqk = aqk.data();
  fw.gamma = gam.data();
  fw.Qp = Qp.data();
  fw.Ob = Ob.data();
  fw.counters = counters.data();  // poisoned: the intra zeroes the forward's

  FusedArgs a;
  a.dims = d;
  a.dtype = c.dtype;
  a.gate = c.gate;
  a.tensor_cores = !c.simt;
  a.scan_split = c.split;
  a.scan_group = c.group;
  a.fwd_group = c.fwd_group;
  a.scan_first = c.first;
  a.lean_scan = c.lean;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.f = f.data();
  a.b = b.data();
  a.A_log = A_log.data();
  a.dt_bias = dt_bias.data();
  a.h0 = c.h0 ? h0.data() : nullptr;
  a.o = o.data();
  a.ht = ht.data();
  a.h = h.data();
  fused_forward_cpu(a, fw);

  // The backward keeps the forward's saved tiles (W, Delta over U, sQ, Kbar, Aqk, gamma:
  // kernels/kda.h) and rewrites them in place, as the engine runs it (Xw over W, Xq over sQ,
  // Xk over Kbar); everything else it reads must be rebuilt, so the forward-only Qp / Ob are
  // poisoned and Ob's storage serves as AqkT_dO / dDelta.
  Qp.poison();
  Ob.poison();
  BackwardWorkspace ws = backward_workspace(fw, Ob.data(), dgs.data(), parts.data(), counters.data());
  a.dO = dO.data();
  a.dht = c.dht ? dht.data() : nullptr;
  a.dq = dq.data();
  a.dk = dk.data();
  a.dv = dv.data();
  a.df = df.data();
  a.db = db.data();
  a.dA_log = dA_log.data();
  a.ddt_bias = ddt.data();
  a.dh0 = dh0.data();
  // In two parts as the engine runs it: after aqk_dO the A_qk tile is dead (poisoned here,
  // and its pointer withdrawn: the adjoints must not read it).
  fused_backward_cpu(a, ws, BackwardLaunches::aqk_dO);
  aqk.poison();
  ws.Aqk = nullptr;
  fused_backward_cpu(a, ws, BackwardLaunches::adjoints);

  Result r;
  r.o = o.to_double();
  r.ht = to_f64(ht);
  r.dq = dq.to_double();
  r.dk = dk.to_double();
  r.dv = dv.to_double();
  r.df = df.to_double();
  r.db = db.to_double();
  r.dA_log = to_f64(dA_log);
  r.ddt_bias = to_f64(ddt);
  r.dh0 = to_f64(dh0);
  return r;
}

// The twin on case c against the naive recurrence, gated as every twin test is; returns the twin's result.
Result check_twin_against_naive(const Case& c, const Data& x, uint64_t seed) {
  Result got = run_fused_twin(c, x);
  const Result ref = run_naive(c, x);
  const GatedReport g =
      gate_against_reference("twin vs naive", c, got, ref, compare(run_naive_f32(c, x), ref, false, true, true));
  INFO(c.name() << " seed " << seed << g.report.str() << g.gated.adapted << replay_hint());
  CHECK(g.gated.pass);
  return got;
}

// A scan form (split, two-level) against the naive recurrence and, bit for bit, against `one`:
// the single-block lean scan on the same data (they form every product alike).
void check_scan_form(const Case& c, const Data& x, uint64_t seed, const Result& one, const char* base) {
  const Result got = check_twin_against_naive(c, x, seed);
  for (const BitDiff& b : output_bit_diffs(got, one)) {
    INFO(b.name << ": " << b.differ << " of " << b.total << " elements differ from " << base);
    CHECK(b.differ == 0);
  }
}

// Two-level scan cases on the twins (backward group, forward group; 0: one level), each gated
// against the naive recurrence with the backward scan's first level `first`.
struct TwoLevelCase {
  Dims d;
  bool h0, dht, lb;
  DType dt;
  int group, fwd_group;
};
void check_two_level_cases(const std::vector<TwoLevelCase>& cases, uint64_t seed, ScanFirst first) {
  for (size_t i = 0; i < cases.size(); ++i) {
    const TwoLevelCase& s = cases[i];
    Case c = make_case(s.d, s.h0, s.dht, s.lb, s.dt, false);
    if (skip_uncompiled(c)) continue;
    const Data x = make_data(c, seed + i);
    c.group = s.group;
    c.fwd_group = s.fwd_group;
    c.first = first;
    check_twin_against_naive(c, x, seed + i);
  }
}

}  // namespace

TEST_CASE("KDA naive recurrence: gradients match finite differences (float64)", "[kda]") {
  const uint64_t seed = test_seed();
  for (bool lb : {false, true}) {
    Case c;
    c.dims = Dims{2, 6, 2, 4, 16};
    c.h0 = true;
    c.dht = true;
    c.dtype = DType::f64;
    c.gate.use_lower_bound = lb;
    c.gate.lower_bound = -3.0f;
    Data x = make_data(c, seed);
    // Sizeable gates and states so every term matters.
    for (auto& e : x.dt_bias) e += 3.0;
    Result r = run_naive(c, x);
    const double eps = 1e-6;
    struct G {
      const char* name;
      std::vector<double>* input;
      const std::vector<double>* grad;
    };
    std::vector<G> gs = {{"dq", &x.q, &r.dq},
                         {"dk", &x.k, &r.dk},
                         {"dv", &x.v, &r.dv},
                         {"df", &x.f, &r.df},
                         {"db", &x.b, &r.db},
                         {"dA_log", &x.A_log, &r.dA_log},
                         {"ddt_bias", &x.dt_bias, &r.ddt_bias},
                         {"dh0", &x.h0, &r.dh0}};
    for (auto& g : gs) {
      const std::vector<double> fd = finite_diff(c, x, g.input, eps);
      const double e = rel_err_l2(*g.grad, fd);
      std::printf("[kda] naive vs finite differences (%s, seed %llu): %s rel err %.2e\n",
                  lb ? "lower-bound gate" : "default gate", (unsigned long long)seed, g.name, e);
      INFO(g.name << " seed " << seed << replay_hint());
      CHECK(e < 1e-7);
    }
  }
}

TEST_CASE("KDA naive recurrence: the gate gradients' error scales bound them; dA_log is the sum of its terms",
          "[kda]") {
  // tests/support/kda_testing.h measures dA_log's error against the sum of the magnitudes of
  // its terms per head, with the terms rebuilt from df; their signed sum must give dA_log back.
  const uint64_t seed = test_seed() + 4;
  for (bool lb : {false, true}) {
    Case c;
    c.dims = Dims{2, 30, 3, 16, 16};
    c.h0 = true;
    c.dht = true;
    c.gate.use_lower_bound = lb;
    const Data x = make_data(c, seed);
    const Result r = run_naive(c, x);
    const std::vector<double> sum = dA_log_terms(c, x, r.df, true);
    for (int64_t h = 0; h < c.dims.H; ++h) {
      INFO((lb ? "lower-bound gate" : "default gate") << " head " << h << " dA_log " << r.dA_log[h] << " terms' sum "
                                                      << sum[h] << " scale " << r.dA_log_scale[h] << replay_hint());
      CHECK(r.dA_log_scale[h] > std::abs(r.dA_log[h]));
      CHECK(std::abs(sum[h] - r.dA_log[h]) < 1e-12 * r.dA_log_scale[h]);
    }
    // df's and ddt_bias's scales bound their sizes (the triangle inequality over the cumsum's terms)
    size_t below = 0;
    for (size_t i = 0; i < r.df.size(); ++i) below += r.df_scale[i] < std::abs(r.df[i]) * (1 - 1e-12);
    for (size_t i = 0; i < r.ddt_bias.size(); ++i) below += r.ddt_bias_scale[i] < std::abs(r.ddt_bias[i]) * (1 - 1e-12);
    CHECK(below == 0);
  }
}

TEST_CASE("KDA gate (block programs): the lower-bound gate keeps fp32 accuracy where its sigmoid saturates",
          "[kda][gate]") {
  // g = lb s, dg/dx = lb s (1 - s) e^A, dg/dA_log = dg/dx x with s = sigmoid(e^A x): against
  // float64 over z = e^A x in [-40, 40], where 1 - s falls to 4e-18. Formed as a difference,
  // 1 - s keeps eps / (1 - s) of its value (1e-4 relative at z = 8).
  Gate gate;
  gate.use_lower_bound = true;
  double worst[3] = {0, 0, 0};
  for (int i = -4000; i <= 4000; ++i) {
    for (const float ea : {1.0f, 4.5f, 16.0f}) {
      const float x = static_cast<float>(i) / 100.0f / ea;
      const blocks::GateVal v = blocks::gate_value(x, ea, gate);
      // z as the program forms it (fp32): e^{-|z|} turns that rounding into |z| eps relative
      const double z = static_cast<double>(ea * x), s = 1.0 / (1.0 + std::exp(-z));
      const double ds = std::exp(-std::abs(z)) / ((1.0 + std::exp(-std::abs(z))) * (1.0 + std::exp(-std::abs(z))));
      const double ref[3] = {gate.lower_bound * s, gate.lower_bound * ds * ea, gate.lower_bound * ds * ea * x};
      const float got[3] = {v.g, v.dgdx, v.dgda};
      for (int q = 0; q < 3; ++q)
        if (ref[q] != 0.0) worst[q] = std::max(worst[q], std::abs(got[q] - ref[q]) / std::abs(ref[q]));
    }
  }
  INFO("worst relative errors: g " << worst[0] << ", dg/dx " << worst[1] << ", dg/dA_log " << worst[2]);
  CHECK(worst[0] < 1e-6);
  CHECK(worst[1] < 1e-6);
  CHECK(worst[2] < 1e-6);
}

TEST_CASE("KDA naive recurrence: float32 instance agrees with float64", "[kda]") {
  Case c;
  c.dims = Dims{1, 40, 2, 16, 16};
  c.h0 = true;
  c.dht = true;
  const uint64_t seed = test_seed() + 1;
  const Data x = make_data(c, seed);
  const Result ref = run_naive(c, x);
  const Result r = run_naive_f32(c, x);
  const ErrReport e = compare(r, ref, false, true, true);
  std::printf("[kda] naive f32 vs f64:%s\n", e.str().c_str());
  CHECK(e.worst() < 1e-5);
}

TEST_CASE("KDA fused CPU twins match the naive recurrence", "[kda][twin]") {
  const uint64_t seed = test_seed() + 2;
  std::vector<Case> cases;
  auto add = [&](Dims d, bool h0, bool dht, bool lb, DType dt) { cases.push_back(make_case(d, h0, dht, lb, dt)); };
  add({1, 37, 2, 64, 16}, false, false, false, DType::f32);  // partial last chunk
  add({2, 50, 1, 64, 32}, true, true, false, DType::f32);    // initial state, dht
  add({1, 70, 1, 64, 64}, true, false, true, DType::f32);    // lower-bound gate, 2 chunks
  add({1, 45, 1, 128, 64}, false, true, false, DType::f32);  // D = 128, one partial chunk
  add({1, 33, 1, 128, 16}, true, true, false, DType::f32);
  add({1, 70, 1, 128, 32}, true, false, false, DType::bf16);  // D = 128, C = 32: 32-column scan tiles
  add({1, 40, 2, 64, 32}, true, true, false, DType::bf16);    // bf16 inputs
  for (size_t i = 0, n = cases.size(); i < n; ++i) {          // and the fp32 CUDA-core scan variant
    Case c = cases[i];
    c.simt = true;
    cases.push_back(c);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (skip_uncompiled(c)) continue;
    const Data x = make_data(c, seed + i % (cases.size() / 2));
    const Result ref = run_naive(c, x);
    const Result got = run_fused_twin(c, x);
    const ErrReport e = compare(got, ref, false, true, true);
    const ErrReport e32 = compare(run_naive_f32(c, x), ref, false, true, true);
    const double tol = c.dtype == DType::bf16 ? 1e-2 : 1e-5;
    const Gated gt = gate_errors(e, e32, tol);
    std::printf("[kda] twin vs naive %-34s worst %.2e, %.3f of allowed:%s%s\n", c.name().c_str(), e.worst(),
                gt.worst_ratio, e.str().c_str(), gt.adapted.c_str());
    INFO(c.name() << " seed " << seed + i % (cases.size() / 2) << e.str() << gt.adapted << replay_hint());
    CHECK(gt.pass);
  }
}

TEST_CASE("KDA fused backward parts: argument checks name what each part is missing", "[kda]") {
  // The checks run before any kernel, so these pointers are never dereferenced.
  alignas(16) float dummy[4] = {};
  void* p = dummy;
  FusedArgs a;
  a.dims = Dims{1, 20, 1, 64, 16};
  a.dtype = DType::f32;
  a.q = a.k = a.v = a.f = a.b = p;
  a.A_log = a.dt_bias = dummy;
  a.h = dummy;
  a.dO = p;
  BackwardWorkspace ws;
  ws.W = ws.sQ = ws.AqkT_dO = ws.Xw = ws.Xq = ws.dDelta = p;
  ws.Kbar = ws.gamma = dummy;
  ws.Delta = ws.Xk = ws.dgamma_s = ws.partials = dummy;
  ws.counters = reinterpret_cast<uint32_t*>(dummy);
  auto message = [&](BackwardLaunches part) -> std::string {
    try {
      fused_backward_cpu(a, ws, part);
    } catch (const std::invalid_argument& e) { return e.what(); }
    return "(no exception)";
  };
  // aqk_dO needs A_qk; the gradient pointers are not needed yet, so the missing Aqk is what it names.
  CHECK(message(BackwardLaunches::aqk_dO).find("Aqk") != std::string::npos);
  // the adjoints need the gradient pointers (and never A_qk)
  CHECK(message(BackwardLaunches::adjoints).find("gradient pointer") != std::string::npos);
  a.dq = a.dk = a.dv = a.df = a.db = p;
  a.dA_log = a.ddt_bias = dummy;
  ws.partials = nullptr;
  CHECK(message(BackwardLaunches::adjoints).find("partials") != std::string::npos);
  a.dO = nullptr;
  CHECK(message(BackwardLaunches::all).find("dO") != std::string::npos);
}

TEST_CASE("KDA fused: an input the chunk programs cannot load four columns at a time is named", "[kda]") {
  // The checks run before any kernel, so these pointers are never dereferenced.
  alignas(16) float buf[8] = {};
  FusedArgs a;
  a.dims = Dims{1, 20, 1, 64, 16};
  a.dtype = DType::bf16;
  a.q = a.k = a.v = a.f = a.b = buf;
  a.A_log = a.dt_bias = a.h = buf;
  a.o = buf;
  ForwardWorkspace fw;
  auto message = [&]() -> std::string {
    try {
      fused_forward_cpu(a, fw);
    } catch (const std::invalid_argument& e) { return e.what(); }
    return "(no exception)";
  };
  a.k = reinterpret_cast<char*>(buf) + 2;  // one bf16 element off: 8-byte loads need 8
  CHECK(message().find("k must be aligned to 8 bytes") != std::string::npos);
  a.k = reinterpret_cast<char*>(buf) + 8;
  a.dt_bias = buf + 1;
  CHECK(message().find("dt_bias must be aligned to 16 bytes") != std::string::npos);
}

TEST_CASE(
    "KDA fused CPU twins: the lean scan (Delta in aqk_dO, X_q and X_w in the intra adjoint) matches the naive "
    "recurrence",
    "[kda][twin][lean]") {
  // The default on the CPU is the full scan (the other twin cases); here the single-block scan
  // runs lean (LeanScan::lean), so aqk_dO's Delta product and the intra adjoint's P0
  // are checked against the float64 recurrence, outputs NaN-poisoned, every chunk size and
  // head dim, partial chunks, h0 / dht, both gates, both dtypes and the CUDA-core variant.
  const uint64_t seed = test_seed() + 5;
  struct Sc {
    Dims d;
    bool h0, dht, lb;
    DType dt;
    bool simt;
  };
  const std::vector<Sc> cases = {
      {{1, 37, 2, 64, 16}, true, true, false, DType::f32, false},     // partial last chunk
      {{2, 50, 1, 64, 32}, true, true, false, DType::f32, false},     // two sequences
      {{1, 70, 1, 64, 64}, false, true, true, DType::f32, false},     // lower-bound gate, 32-row blocks
      {{1, 45, 1, 128, 64}, false, true, false, DType::f32, false},   // D = 128
      {{1, 33, 1, 128, 16}, true, true, false, DType::f32, true},     // D = 128 C16 (16-row K blocks), CUDA cores
      {{1, 70, 1, 128, 32}, true, false, false, DType::bf16, false},  // bf16 inputs
      {{1, 40, 2, 64, 32}, true, true, false, DType::bf16, true},     // bf16, CUDA cores
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Sc& s = cases[i];
    Case c = make_case(s.d, s.h0, s.dht, s.lb, s.dt, s.simt);
    if (skip_uncompiled(c)) continue;
    c.lean = LeanScan::lean;
    check_twin_against_naive(c, make_data(c, seed + i), seed + i);
  }
}

TEST_CASE(
    "KDA fused CPU twins: the inter adjoint split over V tiles (clusters) matches the naive recurrence "
    "and the single-block scan bit for bit",
    "[kda][twin][split]") {
  // The split program computes every output element in one block with the single-block
  // program's operands and order, so its results are bit-identical to split 1.
  const uint64_t seed = test_seed() + 3;
  struct Sc {
    Dims d;
    bool h0, dht, lb;
    DType dt;
    bool simt;
    int nv;
  };
  const std::vector<Sc> cases = {
      {{1, 37, 1, 64, 16}, true, true, false, DType::f32, false, 4},   // partial last chunk, 16-column tiles
      {{1, 70, 1, 64, 64}, false, true, true, DType::f32, false, 2},   // lower-bound gate, 32-row blocks
      {{1, 33, 1, 128, 16}, true, true, false, DType::f32, false, 2},  // D = 128: 64-column tiles
      {{1, 40, 1, 128, 32}, false, true, false, DType::f32, true, 4},  // fp32 CUDA-core variant
      {{1, 40, 2, 64, 32}, true, true, false, DType::bf16, false, 4},  // bf16 inputs, 32-row blocks
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Sc& s = cases[i];
    Case c = make_case(s.d, s.h0, s.dht, s.lb, s.dt, s.simt);
    if (skip_uncompiled(c)) continue;
    const Data x = make_data(c, seed + i);
    c.split = 1;
    c.lean = LeanScan::lean;  // a split scan is lean: the single-block scan in the same form
    const Result one = run_fused_twin(c, x);
    c.split = s.nv;
    check_scan_form(c, x, seed + i, one, "split 1");
  }
}

TEST_CASE(
    "KDA fused CPU twins: the two-level backward scan matches the naive recurrence and the single-block "
    "scan bit for bit",
    "[kda][twin][group]") {
  // The first level forms S' as the single-block scan does (the same tiles in the same k order)
  // and the second level is that scan over each group from the first level's boundary state, so
  // every output is bit-identical to the one-level lean scan.
  const uint64_t seed = test_seed() + 5;
  struct Sc {
    Dims d;
    bool h0, dht, lb;
    DType dt;
    int group;
  };
  const std::vector<Sc> cases = {
      {{1, 100, 1, 64, 16}, true, true, false, DType::f32, 2},    // 7 chunks, 4 groups, the last short
      {{1, 100, 1, 64, 32}, false, true, true, DType::bf16, 2},   // partial last chunk, lower-bound gate
      {{1, 140, 1, 64, 64}, true, false, false, DType::bf16, 1},  // a group a chunk, no dht
      {{1, 70, 1, 128, 32}, true, true, false, DType::bf16, 2},   // D = 128: two S' tiles a warp
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Sc& s = cases[i];
    Case c = make_case(s.d, s.h0, s.dht, s.lb, s.dt, false);
    if (skip_uncompiled(c)) continue;
    const Data x = make_data(c, seed + i);
    c.split = 1;
    c.lean = LeanScan::lean;  // the two-level scan is lean: the single-block scan in the same form
    const Result one = run_fused_twin(c, x);
    c.group = s.group;
    check_scan_form(c, x, seed + i, one, "the one-level scan");
  }
}

TEST_CASE("KDA fused CPU twins: the two-level scan's arguments are checked", "[kda][twin][group]") {
  Case c = make_case({1, 100, 1, 64, 16}, false, false, false, DType::f32, false);
  const Data x = make_data(c, test_seed() + 6);
  c.group = 2;
  c.split = 4;  // a two-level scan runs unsplit
  CHECK_THROWS_WITH(run_fused_twin(c, x), Catch::Contains("runs unsplit"));
  c.split = 0;
  c.lean = LeanScan::full;
  CHECK_THROWS_WITH(run_fused_twin(c, x), Catch::Contains("always lean"));
  c.lean = LeanScan::pick;
  c.simt = true;
  CHECK_THROWS_WITH(run_fused_twin(c, x), Catch::Contains("needs tensor_cores"));
  // bf16 D128: a boundary state fills 256 gradient rows, a group of one 16-row chunk has 64
  Case c2 = make_case({1, 40, 1, 128, 16}, false, false, false, DType::bf16, false);
  c2.group = 1;
  CHECK_THROWS_WITH(run_fused_twin(c2, make_data(c2, test_seed() + 7)), Catch::Contains("scan_group * chunk >= D / 2"));
}

TEST_CASE("KDA fused CPU twins: the affine first level of the two-level backward scan matches the naive recurrence",
          "[kda][twin][affine]") {
  // S' crosses a group as M'_g S' + local'_g (kernels/kda/state_adjoint.h), not step by step, so
  // the backward is not bit-identical to the one-level scan: every gradient is gated against the
  // naive recurrence as the one-level twin is.
  const std::vector<TwoLevelCase> cases = {
      {{1, 200, 1, 64, 16}, true, true, false, DType::f32, 3, 0},      // 13 chunks, 5 groups, the last of one
      {{1, 300, 1, 64, 32}, false, true, true, DType::bf16, 3, 0},     // partial last chunk, lower-bound gate
      {{2, 260, 2, 128, 32}, true, true, false, DType::bf16, 6, 0},    // D = 128, B*H 4, two groups
      {{1, 500, 1, 128, 64}, false, true, false, DType::f32, 2, 0},    // D = 128, C = 64
      {{1, 420, 1, 128, 16}, false, true, false, DType::bf16, 12, 0},  // D = 128, C = 16
      {{1, 400, 1, 64, 32}, true, true, false, DType::bf16, 4, 2},     // with the two-level forward scan
  };
  check_two_level_cases(cases, test_seed() + 10, ScanFirst::affine);
}

TEST_CASE("KDA fused CPU twins: the affine first level's arguments are checked", "[kda][twin][affine]") {
  // bf16 D64: three states need 3 * 64 * 2 bytes a row of four rows a chunk row: group * 32 >= 96
  Case c = make_case({1, 300, 1, 64, 32}, false, false, false, DType::bf16, false);
  const Data x = make_data(c, test_seed() + 11);
  c.group = 2;
  c.first = ScanFirst::affine;
  CHECK_THROWS_WITH(run_fused_twin(c, x), Catch::Contains("affine first level (three states a group) needs "
                                                          "scan_group * chunk >= 3 D / 2"));
  c.first = ScanFirst::serial;  // one state fits
  CHECK_NOTHROW(run_fused_twin(c, x));
  c.first = static_cast<ScanFirst>(3);
  CHECK_THROWS_WITH(run_fused_twin(c, x),
                    Catch::Contains("scan_first must be pick (0), serial (1) or affine (2), got 3"));
}

TEST_CASE("KDA fused CPU twins: the two-level forward scan matches the naive recurrence", "[kda][twin][fwdgroup]") {
  // The state crosses a group as M_g S + local_g (kernels/kda/scan.h), not step by step, so the
  // forward is not bit-identical to the one-level scan: every output and gradient (the backward
  // runs on its h) is gated against the naive recurrence as the one-level twin is.
  const std::vector<TwoLevelCase> cases = {
      {{1, 100, 1, 64, 16}, true, true, false, DType::f32, 0, 2},    // 7 chunks, 4 groups, the last of one
      {{1, 100, 1, 64, 32}, false, true, true, DType::bf16, 0, 2},   // partial last chunk, lower-bound gate
      {{2, 200, 2, 64, 16}, true, false, false, DType::bf16, 0, 3},  // 13 chunks, groups of 3, B*H 4
      {{1, 70, 1, 128, 32}, true, true, false, DType::bf16, 0, 2},   // D = 128: 32-column tiles
      {{1, 140, 1, 128, 16}, false, true, false, DType::f32, 0, 4},  // D = 128, C = 16: 8 V tiles
      {{1, 250, 1, 128, 64}, true, false, false, DType::f32, 0, 2},  // D = 128, C = 64, short last group
      {{1, 160, 1, 64, 16}, true, true, false, DType::bf16, 2, 3},   // with the two-level backward scan
  };
  check_two_level_cases(cases, test_seed() + 8, ScanFirst::pick);
}

TEST_CASE("KDA fused CPU twins: the two-level forward scan's arguments are checked", "[kda][twin][fwdgroup]") {
  Case c = make_case({1, 100, 1, 64, 16}, false, false, false, DType::f32, false);
  const Data x = make_data(c, test_seed() + 9);
  c.fwd_group = 1;  // a group's transition lives in its second chunk's state row
  CHECK_THROWS_WITH(run_fused_twin(c, x), Catch::Contains("fwd_group must be >= 2, got 1"));
  c.fwd_group = 2;
  c.simt = true;
  CHECK_THROWS_WITH(run_fused_twin(c, x),
                    Catch::Contains("two-level forward scan (fwd_group < NT) needs tensor_cores"));
  c.fwd_group = -1;
  c.simt = false;
  CHECK_THROWS_WITH(run_fused_twin(c, x), Catch::Contains("fwd_group must be >= 0, got -1"));
}

TEST_CASE("KDA instances: every configuration the engine can ask for is compiled, and the dispatch finds it",
          "[kda][instances]") {
  using lt::kda::dispatch_instance;
  using lt::kda::instance_compiled;
  using lt::kda::kInstances;
  // Each (D, C, dtype) the argument checks accept, with tensor-core scans (what the engine
  // launches): compiled, and the dispatch calls the instance with those template arguments.
  for (int D : {64, 128})
    for (int C : {16, 32, 64})
      for (DType dt : {DType::f32, DType::bf16}) {
        INFO("D " << D << " C " << C << " " << dtype_name(dt));
        CHECK(instance_compiled(D, C, dt, true));
        int calls = 0;
        const bool found = dispatch_instance(D, C, dt, true, [&]<int D_, int C_, class T, bool kTC>() {
          ++calls;
          CHECK(D_ == D);
          CHECK(C_ == C);
          CHECK((std::is_same_v<T, float> ? DType::f32 : DType::bf16) == dt);
          CHECK(kTC);
        });
        CHECK(found);
        CHECK(calls == 1);
      }
  // The chunk the engine picks (fused_chunk) over the shapes it meets is always one of them.
  for (int64_t bh : {1, 4, 8, 9, 96, 4096})
    for (int64_t T : {1, 16, 17, 32, 33, 512, 32768})
      for (int D : {64, 128})
        for (DType dt : {DType::f32, DType::bf16})
          CHECK(instance_compiled(D, lt::kda::fused_chunk(bh, T, D, dt), dt, true));
  // Not compiled: the dispatch calls nothing; the entry points refuse with the reason.
  CHECK_FALSE(instance_compiled(96, 32, DType::f32, true));
  CHECK_FALSE(dispatch_instance(96, 32, DType::f32, true, [&]<int, int, class, bool>() { FAIL("called"); }));
  int simt_lines = 0;
  for (const auto& i : kInstances) simt_lines += i.tensor_cores ? 0 : 1;
  CHECK(simt_lines == 12);
  Case c = make_case({1, 20, 1, 64, 16}, false, false, false, DType::f32, true);
  if (!instance_compiled(64, 16, DType::f32, false)) {
    const Data x = make_data(c, 1);
    CHECK_THROWS_WITH(run_fused_twin(c, x), Catch::Contains("LINTRAIN_KDA_SIMT=ON"));
  }
}
