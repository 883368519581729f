// KDA on the CPU: the naive recurrence against finite differences (float64), and the CPU
// twins of the fused kernels (the kernels' own block programs on an emulated block)
// against the naive recurrence. Inputs are fresh random draws each run (seed printed;
// LT_TEST_SEED=<n> replays one).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernels/kda.h"
#include "tests/kernels/kda_testing.h"

using namespace lt;
using namespace lt::kda;
using namespace lt::kda::testing;

namespace {

// L = sum o * dO + sum ht * dht, evaluated by the naive forward in float64.
double naive_loss(const Case& c, const Data& x) {
  NaiveInputs<double> in;
  in.dims = c.dims;
  in.q = x.q.data(); in.k = x.k.data(); in.v = x.v.data(); in.f = x.f.data(); in.b = x.b.data();
  in.A_log = x.A_log.data(); in.dt_bias = x.dt_bias.data();
  in.h0 = c.h0 ? x.h0.data() : nullptr;
  in.gate = c.gate;
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
  const size_t tile_elems = wb.tile / dtype_size(c.dtype);
  std::vector<Typed> t;
  for (int i = 0; i < 6; ++i)  // t1, t3 fp32; t[5] = sq
    t.emplace_back(i == 1 || i == 3 ? DType::f32 : c.dtype, i == 1 || i == 3 ? wb.tile_f32 / 4 : tile_elems);
  Typed aqk(c.dtype, wb.aqk / dtype_size(c.dtype));
  std::vector<float> gam(wb.gamma / 4, NAN), dgs(wb.gamma / 4, NAN), parts(wb.partials / 4, NAN);
  std::vector<uint32_t> counters(d.H, 0xFFFFFFFFu);
  for (auto& e : t) e.poison();
  aqk.poison();
  Workspace ws;
  ws.t0 = t[0].data(); ws.t1 = t[1].data(); ws.t2 = t[2].data(); ws.t3 = t[3].data(); ws.t4 = t[4].data();
  ws.sq = t[5].data(); ws.aqk = aqk.data(); ws.gamma = gam.data();

  FusedArgs a;
  a.dims = d; a.dtype = c.dtype; a.gate = c.gate; a.tensor_cores = !c.simt;
  a.q = q.data(); a.k = k.data(); a.v = v.data(); a.f = f.data(); a.b = b.data();
  a.A_log = A_log.data(); a.dt_bias = dt_bias.data(); a.h0 = c.h0 ? h0.data() : nullptr;
  a.o = o.data(); a.ht = ht.data(); a.h = h.data();
  fused_forward_cpu(a, ws);

  // The backward keeps the forward's saved tiles (W, U, scale Q~ as t2, Kbar, A_qk, gamma:
  // kernels/kda.h); everything else it reads must be rebuilt, so the forward-only Qp / Ob and
  // the backward's own scratch are poisoned.
  t[2].poison();
  t[4].poison();
  ws.t2 = t[5].data();
  ws.sq = nullptr;
  ws.dgamma_s = dgs.data(); ws.partials = parts.data(); ws.counters = counters.data();
  a.dO = dO.data(); a.dht = c.dht ? dht.data() : nullptr;
  a.dq = dq.data(); a.dk = dk.data(); a.dv = dv.data(); a.df = df.data(); a.db = db.data();
  a.dA_log = dA_log.data(); a.ddt_bias = ddt.data(); a.dh0 = dh0.data();
  // In two parts as the engine runs it: after aqk_dO the A_qk tile is dead (poisoned here,
  // and its pointer withdrawn: the adjoints must not read it).
  fused_backward_cpu(a, ws, BackwardPart::aqk_dO);
  aqk.poison();
  ws.aqk = nullptr;
  fused_backward_cpu(a, ws, BackwardPart::adjoints);

  Result r;
  r.o = o.to_double(); r.ht = to_f64(ht);
  r.dq = dq.to_double(); r.dk = dk.to_double(); r.dv = dv.to_double(); r.df = df.to_double();
  r.db = db.to_double(); r.dA_log = to_f64(dA_log); r.ddt_bias = to_f64(ddt); r.dh0 = to_f64(dh0);
  return r;
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
    struct G { const char* name; std::vector<double>* input; const std::vector<double>* grad; };
    std::vector<G> gs = {{"dq", &x.q, &r.dq}, {"dk", &x.k, &r.dk}, {"dv", &x.v, &r.dv},
                         {"df", &x.f, &r.df}, {"db", &x.b, &r.db}, {"dA_log", &x.A_log, &r.dA_log},
                         {"ddt_bias", &x.dt_bias, &r.ddt_bias}, {"dh0", &x.h0, &r.dh0}};
    for (auto& g : gs) {
      const std::vector<double> fd = finite_diff(c, x, g.input, eps);
      const double e = rel_err(*g.grad, fd);
      std::printf("[kda] naive vs finite differences (%s, seed %llu): %s rel err %.2e\n",
                  lb ? "lower-bound gate" : "default gate", (unsigned long long)seed, g.name, e);
      INFO(g.name << " seed " << seed);
      CHECK(e < 1e-7);
    }
  }
}

TEST_CASE("KDA naive recurrence: float32 instance agrees with float64", "[kda]") {
  Case c;
  c.dims = Dims{1, 40, 2, 16, 16};
  c.h0 = true;
  c.dht = true;
  const uint64_t seed = test_seed() + 1;
  Data x = make_data(c, seed);
  Result ref = run_naive(c, x);
  NaiveInputs<float> in;
  std::vector<float> q = to_f32(x.q), k = to_f32(x.k), v = to_f32(x.v), f = to_f32(x.f), b = to_f32(x.b),
                     A = to_f32(x.A_log), dt = to_f32(x.dt_bias), h0 = to_f32(x.h0), dO = to_f32(x.dO),
                     dht = to_f32(x.dht);
  in.dims = c.dims; in.q = q.data(); in.k = k.data(); in.v = v.data(); in.f = f.data(); in.b = b.data();
  in.A_log = A.data(); in.dt_bias = dt.data(); in.h0 = h0.data();
  std::vector<float> o(q.size()), ht(h0.size()), dq(q.size()), dk(q.size()), dv(q.size()), df(q.size()),
      db(b.size()), dA(A.size()), ddt(dt.size()), dh0(h0.size());
  naive_forward<float>(in, o.data(), ht.data());
  naive_backward<float>(in, dO.data(), dht.data(),
                        NaiveGrads<float>{dq.data(), dk.data(), dv.data(), df.data(), db.data(), dA.data(), ddt.data(), dh0.data()});
  Result r{to_f64(o), to_f64(ht), to_f64(dq), to_f64(dk), to_f64(dv), to_f64(df), to_f64(db), to_f64(dA), to_f64(ddt), to_f64(dh0)};
  const ErrReport e = compare(r, ref, false, true, true);
  std::printf("[kda] naive f32 vs f64:%s\n", e.str().c_str());
  CHECK(e.worst() < 1e-5);
}

TEST_CASE("KDA fused CPU twins match the naive recurrence", "[kda][twin]") {
  const uint64_t seed = test_seed() + 2;
  std::vector<Case> cases;
  auto add = [&](Dims d, bool h0, bool dht, bool lb, DType dt) {
    Case c;
    c.dims = d; c.h0 = h0; c.dht = dht; c.dtype = dt;
    c.gate.use_lower_bound = lb;
    cases.push_back(c);
  };
  add({1, 37, 2, 64, 16}, false, false, false, DType::f32);   // partial last chunk
  add({2, 50, 1, 64, 32}, true, true, false, DType::f32);     // initial state, dht
  add({1, 70, 1, 64, 64}, true, false, true, DType::f32);     // lower-bound gate, 2 chunks
  add({1, 45, 1, 128, 64}, false, true, false, DType::f32);   // D = 128, one partial chunk
  add({1, 33, 1, 128, 16}, true, true, false, DType::f32);
  add({1, 40, 2, 64, 32}, true, true, false, DType::bf16);    // bf16 inputs
  for (size_t i = 0, n = cases.size(); i < n; ++i) {  // and the fp32 CUDA-core scan variant
    Case c = cases[i];
    c.simt = true;
    cases.push_back(c);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Data x = make_data(c, seed + i % (cases.size() / 2));
    const Result ref = run_naive(c, x);
    const Result got = run_fused_twin(c, x);
    const ErrReport e = compare(got, ref, false, true, true);
    const ErrReport e32 = compare(run_naive_f32(c, x), ref, false, true, true);
    const double tol = c.dtype == DType::bf16 ? 1e-2 : 1e-5;
    const Gated gt = gate_errors(e, e32, tol);
    std::printf("[kda] twin vs naive %-34s worst %.2e:%s%s\n", c.name().c_str(), e.worst(), e.str().c_str(), gt.adapted.c_str());
    INFO(c.name() << " seed " << seed + i % (cases.size() / 2) << e.str() << gt.adapted);
    CHECK(gt.pass);
  }
}

// ---- Tensor-level API: the ops path (CPU) and the fused twins through engine/mixers ------
#include "engine/mixers/kda.h"
#include "engine/ops.h"

namespace {

TensorCase to_tensors(const Case& c, const Data& x, DType dt) {
  const Dims& d = c.dims;
  const Shape s4{d.B, d.T, d.H, d.D}, s3{d.B, d.T, d.H}, ss{d.B, d.H, d.D, d.D};
  const DType pdt = dt == DType::f64 ? DType::f64 : DType::f32;
  TensorCase t;
  t.q = Tensor::from_vector(x.q, s4, dt); t.k = Tensor::from_vector(x.k, s4, dt);
  t.v = Tensor::from_vector(x.v, s4, dt); t.f = Tensor::from_vector(x.f, s4, dt);
  t.b = Tensor::from_vector(x.b, s3, dt); t.dO = Tensor::from_vector(x.dO, s4, dt);
  t.A_log = Tensor::from_vector(x.A_log, {d.H}, pdt);
  t.dt_bias = Tensor::from_vector(x.dt_bias, {d.H, d.D}, pdt);
  if (c.h0) t.h0 = Tensor::from_vector(x.h0, ss, pdt);
  if (c.dht) t.dht = Tensor::from_vector(x.dht, ss, pdt);
  return t;
}


}  // namespace

TEST_CASE("KDA ops path (CPU) matches the naive recurrence", "[kda][ops]") {
  const uint64_t seed = test_seed() + 3;
  struct Row { Dims d; bool h0, dht, lb; DType dt; double tol; };
  const std::vector<Row> rows = {
      {{2, 37, 2, 16, 16}, true, true, false, DType::f64, 1e-10},  // f64: the chunk algorithm itself
      {{1, 45, 2, 8, 8}, false, true, true, DType::f64, 1e-10},    // lower-bound gate, C = 8
      {{2, 50, 1, 32, 32}, true, false, false, DType::f64, 1e-10},
      {{2, 37, 2, 16, 16}, true, true, false, DType::f32, 1e-5},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    Case c;
    c.dims = rows[i].d; c.h0 = rows[i].h0; c.dht = rows[i].dht; c.dtype = rows[i].dt;
    c.gate.use_lower_bound = rows[i].lb;
    const Data x = make_data(c, seed + i);
    const Result ref = run_naive(c, x);
    const Result got = run_mixer(c, to_tensors(c, x, c.dtype), mixers::KdaPath::ops);
    const ErrReport e = compare(got, ref, false, true, c.h0);
    // f32 rows: the adaptive gate (kda_testing.h) against what naive f32 itself costs
    const ErrReport e32 = c.dtype == DType::f64 ? ErrReport{} : compare(run_naive_f32(c, x), ref, false, true, c.h0);
    const Gated gt = gate_errors(e, e32, rows[i].tol);
    std::printf("[kda] ops (CPU) vs naive %-34s worst %.2e:%s%s\n", c.name().c_str(), e.worst(), e.str().c_str(), gt.adapted.c_str());
    INFO(c.name() << " seed " << seed + i << e.str() << gt.adapted);
    CHECK(gt.pass);
  }
}

TEST_CASE("KDA Tensor API: fused (CPU twins) and naive paths agree with ops", "[kda][ops]") {
  const uint64_t seed = test_seed() + 4;
  Case c;
  c.dims = {1, 40, 2, 64, 16};
  c.h0 = true;
  c.dht = true;
  const Data x = make_data(c, seed);
  const TensorCase t = to_tensors(c, x, DType::f32);
  const Result ops_r = run_mixer(c, t, mixers::KdaPath::ops);
  const Result fused_r = run_mixer(c, t, mixers::KdaPath::fused);
  const Result naive_r = run_mixer(c, t, mixers::KdaPath::naive);
  const ErrReport ef = compare(fused_r, ops_r, false, true, true);
  const ErrReport en = compare(naive_r, ops_r, false, true, true);
  const ErrReport e32 = compare(run_naive_f32(c, x), ops_r, false, true, true);  // fp32's own cost
  const Gated gf = gate_errors(ef, e32, 1e-5), gn = gate_errors(en, e32, 1e-5);
  std::printf("[kda] tensor API fused(twin) vs ops %s worst %.2e:%s%s\n", c.name().c_str(), ef.worst(), ef.str().c_str(), gf.adapted.c_str());
  std::printf("[kda] tensor API naive vs ops %s worst %.2e:%s%s\n", c.name().c_str(), en.worst(), en.str().c_str(), gn.adapted.c_str());
  INFO("seed " << seed);
  CHECK(gf.pass);
  CHECK(gn.pass);
}

TEST_CASE("KDA Tensor API: a fused saved state serves one backward, a second one throws", "[kda]") {
  // The fused backward rewrites the forward's saved tiles in place (kernels/kda.h): a second
  // backward on the same saved state must fail loudly, not return wrong gradients.
  Case c;
  c.dims = {1, 20, 1, 64, 16};
  const Data x = make_data(c, test_seed() + 5);
  const TensorCase t = to_tensors(c, x, DType::f32);
  mixers::KdaConfig cfg;
  cfg.chunk = c.dims.C;
  cfg.path = mixers::KdaPath::fused;
  auto out = mixers::kda_forward({t.q, t.k, t.v, t.f, t.b, t.A_log, t.dt_bias, t.h0}, cfg);
  auto saved = out.saved;  // a second reference, as a careless caller would keep
  const mixers::KdaGrads g1 = mixers::kda_backward(saved, t.dO);
  const std::vector<double> dq1 = g1.dq.to_vector();
  bool finite = true;
  for (double v : dq1) finite = finite && std::isfinite(v);
  CHECK(finite);
  try {
    (void)mixers::kda_backward(saved, t.dO);
    FAIL("second backward on a consumed saved state did not throw");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK(msg.find("consumed") != std::string::npos);
  }
}

TEST_CASE("KDA fused backward parts: argument checks name what each part is missing", "[kda]") {
  // The checks run before any kernel, so these pointers are never dereferenced.
  float dummy[4] = {};
  void* p = dummy;
  FusedArgs a;
  a.dims = Dims{1, 20, 1, 64, 16};
  a.dtype = DType::f32;
  a.q = a.k = a.v = a.f = a.b = p;
  a.A_log = a.dt_bias = dummy;
  a.h = dummy;
  a.dO = p;
  Workspace ws;
  ws.t0 = ws.t1 = ws.t2 = ws.t3 = ws.t4 = p;
  ws.gamma = ws.dgamma_s = ws.partials = dummy;
  ws.counters = reinterpret_cast<uint32_t*>(dummy);
  auto message = [&](BackwardPart part) -> std::string {
    try {
      fused_backward_cpu(a, ws, part);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no exception)";
  };
  // aqk_dO needs A_qk; the gradient pointers are not needed yet, so the missing aqk is what it names.
  CHECK(message(BackwardPart::aqk_dO).find("aqk") != std::string::npos);
  // the adjoints need the gradient pointers (and never A_qk)
  CHECK(message(BackwardPart::adjoints).find("gradient pointer") != std::string::npos);
  a.dq = a.dk = a.dv = a.df = a.db = p;
  a.dA_log = a.ddt_bias = dummy;
  ws.partials = nullptr;
  CHECK(message(BackwardPart::adjoints).find("backward tile or scratch") != std::string::npos);
  a.dO = nullptr;
  CHECK(message(BackwardPart::all).find("dO") != std::string::npos);
}
