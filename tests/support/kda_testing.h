// Test helpers for KDA (CPU and CUDA tests): realistic random inputs (as fla's tests),
// the float64 naive reference, typed host copies for the fused path, Tensor inputs for the
// mixer API, per-quantity error reports and the adaptive gate.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/mixers/kda.h"
#include "engine/tensor.h"
#include "kernels/cpu/kda_gate.h"
#include "kernels/half.h"
#include "kernels/kda.h"
#include "kernels/kda/instances.h"
#include "tests/support/compare.h"
#include "tests/support/test_seed.h"

namespace lt::kda::testing {

using lt::testing::replay_hint;  // tests/support/test_seed.h
using lt::testing::test_seed;

struct Case {
  Dims dims;
  bool h0 = false;
  bool dht = false;
  Gate gate;
  DType dtype = DType::f32;
  bool simt = false;                  // fused path: the fp32 CUDA-core variant of the scan kernels
  int split = 0;                      // fused path: FusedArgs::scan_split (inter adjoint V tiles; 0 = default)
  int group = 0;                      // fused path: FusedArgs::scan_group (two-level scan; 0 = default)
  int fwd_group = 0;                  // fused path: FusedArgs::fwd_group (two-level forward scan; 0 = default)
  ScanFirst first = ScanFirst::pick;  // fused path: FusedArgs::scan_first (the two-level scan's first level)
  LeanScan lean = LeanScan::pick;     // fused path: FusedArgs::lean_scan
  // Packed documents: [B, T] token flags, 1 where a segment starts (NaiveInputs::seg_start,
  // KdaInputs::seg_start); empty: none.
  std::vector<uint8_t> seg_start;
  std::string name() const {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "B%lld T%lld H%lld D%d C%d %s%s%s%s%s%s%s%s%s%s", (long long)dims.B,
                  (long long)dims.T, (long long)dims.H, dims.D, dims.C, dtype_name(dtype), h0 ? " h0" : "",
                  dht ? " dht" : "", gate.use_lower_bound ? " lb" : "", simt ? " simt" : "",
                  split > 0 ? (" nv" + std::to_string(split)).c_str() : "",
                  group > 0 ? (" g" + std::to_string(group)).c_str() : "",
                  first == ScanFirst::affine   ? " affine"
                  : first == ScanFirst::serial ? " serial"
                                               : "",
                  fwd_group > 0 ? (" fg" + std::to_string(fwd_group)).c_str() : "",
                  lean == LeanScan::full   ? " full"
                  : lean == LeanScan::lean ? " lean"
                                           : "");
    if (seg_start.empty()) return buf;
    int n = 0;
    for (uint8_t f : seg_start) n += f;
    char tail[32];
    std::snprintf(tail, sizeof(tail), " %d starts", n);
    return std::string(buf) + tail;
  }
};

// A case of the tests' tables: dims, h0 / dht present, lower-bound gate, input dtype, the
// fp32 CUDA-core scan variant.
inline Case make_case(Dims d, bool h0, bool dht, bool lb, DType dt, bool simt = false) {
  Case c;
  c.dims = d;
  c.h0 = h0;
  c.dht = dht;
  c.gate.use_lower_bound = lb;
  c.dtype = dt;
  c.simt = simt;
  return c;
}

// True, after printing a SKIPPED line, when the case's fused variant is not compiled into
// this build (the simt variant without -DLINTRAIN_KDA_SIMT=ON: kernels/kda/instances.def).
inline bool skip_uncompiled(const Case& c) {
  if (lt::kda::instance_compiled(c.dims.D, c.dims.C, c.dtype, !c.simt)) return false;
  std::printf("[kda] SKIPPED %s: the simt variant is not compiled (configure with -DLINTRAIN_KDA_SIMT=ON)\n",
              c.name().c_str());
  return true;
}

// All inputs in double (Data). With dtype bf16 the [B,T,H,*] inputs and dO are rounded to
// bf16 values, so the reference sees exactly what the kernels see. DataOf<float>: the same
// inputs in float32, for the naive float32 recurrence.
template <class Real>
struct DataOf {
  std::vector<Real> q, k, v, f, b, A_log, dt_bias, h0, dO, dht;
};
using Data = DataOf<double>;

inline double round_to(DType dt, double x) {
  if (dt == DType::bf16) return static_cast<float>(bfloat16(static_cast<float>(x)));
  if (dt == DType::f32) return static_cast<float>(x);
  return x;
}

inline Data make_data(const Case& c, uint64_t seed) {
  const Dims& d = c.dims;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nrm(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const size_t n = static_cast<size_t>(d.B * d.T * d.H * d.D);
  auto randn = [&](size_t m, double sd = 1.0) {
    std::vector<double> x(m);
    for (auto& e : x) e = round_to(c.dtype, sd * nrm(rng));
    return x;
  };
  Data x;
  x.q = randn(n);
  x.k = randn(n);
  x.v = randn(n);
  x.f = randn(n);
  x.b = randn(static_cast<size_t>(d.B * d.T * d.H));
  x.dO = randn(n);
  x.A_log.resize(d.H);
  for (auto& e : x.A_log) e = static_cast<float>(std::log(1.0 + 15.0 * uni(rng)));  // log U(1,16)
  x.dt_bias.resize(static_cast<size_t>(d.H * d.D));
  for (auto& e : x.dt_bias) {  // softplus^-1(dt), dt = exp(U(ln 1e-3, ln 0.1)) >= 1e-4
    double dt = std::exp(std::log(1e-3) + uni(rng) * (std::log(0.1) - std::log(1e-3)));
    dt = std::max(dt, 1e-4);
    e = static_cast<float>(dt + std::log(-std::expm1(-dt)));
  }
  const size_t ns = static_cast<size_t>(d.B * d.H * d.D * d.D);
  if (c.h0) {
    x.h0.resize(ns);
    for (auto& e : x.h0) e = static_cast<float>(0.5 * nrm(rng));
  }
  if (c.dht) {
    x.dht.resize(ns);
    for (auto& e : x.dht) e = static_cast<float>(0.5 * nrm(rng));
  }
  return x;
}

struct Result {  // outputs and gradients in double
  std::vector<double> o, ht, dq, dk, dv, df, db, dA_log, ddt_bias, dh0;
  // Reference results only (run_naive): the error scales of the gate gradients, which inherit
  // the cancellation of sums over tokens (df_terms, ddt_bias_terms, dA_log_terms below), and the
  // fp32 rounding floors of df's and ddt_bias's relative errors that follow from them.
  std::vector<double> df_scale, ddt_bias_scale, dA_log_scale;
  double df_floor = 0, ddt_bias_floor = 0;
};

// df_t = (dg/dx)_t dg_t, and the chunk programs form dg_t as the reverse cumsum over t's chunk
// dg_t = sum_{r >= t} dGamma_r (docs: the math's backward stage 8), whose terms can cancel to
// far below their size: measured 400 sum |dGamma_r| / |dg_t| at B1 T70 H1 D64 C64, where the
// fp32 twin erred 1.8e-5 relative on that element (docs/notes-kda.md, "df measured against its
// reverse cumsum's terms"). The forward-error bound of that sum is e sum_{r >= t} |dGamma_r|, so
// df's error is measured against scale_t = |dg/dx|_t sum_{r >= t} |dGamma_r|, the terms rebuilt
// from the reference df (dGamma_r = dg_r - dg_{r+1}, dg past the chunk's last row 0). By the
// triangle inequality scale_t >= |df_t|. The rounding of C fp32 terms and sums bounds the error by
// about C u scale (u = 2^-24), so df's relative error has the floor C u ||scale|| / ||df||
// (cumsum_floor), which gate_errors allows where it measures fp32 arithmetic.
inline std::vector<double> df_terms(const Case& c, const Data& x, const std::vector<double>& df) {
  const Dims& d = c.dims;
  std::vector<double> scale(df.size(), 0.0), dg(static_cast<size_t>(d.C));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int i = 0; i < d.D; ++i)
        for (int64_t t0 = 0; t0 < d.T; t0 += d.C) {
          const int64_t L = std::min<int64_t>(d.C, d.T - t0);
          auto at = [&](int64_t t) { return static_cast<size_t>(((b * d.T + t0 + t) * d.H + h) * d.D + i); };
          std::vector<double> gx(static_cast<size_t>(L));
          for (int64_t t = 0; t < L; ++t) {
            gx[t] =
                gate_eval<double>(x.f[at(t)] + x.dt_bias[static_cast<size_t>(h * d.D + i)], x.A_log[h], c.gate).dg_dx;
            dg[t] = gx[t] != 0.0 ? df[at(t)] / gx[t] : 0.0;
          }
          double sum = 0.0;
          for (int64_t t = L - 1; t >= 0; --t) {
            sum += std::abs(dg[t] - (t + 1 < L ? dg[t + 1] : 0.0));
            // where dg/dx is 0 (underflow) df is 0 too: its scale is its size
            scale[at(t)] = gx[t] != 0.0 ? std::abs(gx[t]) * sum : std::abs(df[at(t)]);
          }
        }
  return scale;
}

// ddt_bias[h, i] = sum over (b, t) of df: each term carries df's error, so its scale is the sum of
// the terms' scales (df_terms).
inline std::vector<double> ddt_bias_terms(const Case& c, const std::vector<double>& df_scale) {
  const Dims& d = c.dims;
  std::vector<double> scale(static_cast<size_t>(d.H * d.D), 0.0);
  for (size_t e = 0; e < df_scale.size(); ++e) scale[e % scale.size()] += df_scale[e];
  return scale;
}

// C u ||scale|| / ||ref||: the relative error that fp32 rounding of C-term chunk sums can reach
// on a quantity with error scale `scale` (df_terms); 0 where ref is 0.
inline double cumsum_floor(const Case& c, const std::vector<double>& scale, const std::vector<double>& ref) {
  double s2 = 0, r2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    s2 += scale[i] * scale[i];
    r2 += ref[i] * ref[i];
  }
  return r2 > 0 ? c.dims.C * std::ldexp(1.0, -24) * std::sqrt(s2 / r2) : 0.0;
}

// dA_log[h] = sum over (b, t, d) of dL/dg * dg/dA_log: a sum of B T D terms of both signs that
// can cancel to far below their size, so its relative error against ||ref|| is unbounded as
// the sum nears zero. Its error is measured instead against the sum of the magnitudes of its
// terms, scale[h] = sum |term|: the forward-error bound of a sum whose terms carry relative
// errors e is e scale, whatever their signs and however their errors correlate (they do: the
// rows of a chunk share the errors of its reverse cumsum and of dgamma_s). Not the root sum
// of squares, which assumes independent errors: a one-head fp32 case measured 1.1e-5 against
// it (docs/notes-kda.md, "dA_log measured against the size of its terms"). The terms come
// from the reference df = dL/dg dg/dx: the term is df (dg/dA_log) / (dg/dx), i.e. df x for the
// lower-bound gate and df softplus(x) / sigmoid(x) for the default gate (x = f + dt_bias).
// signed_sum: the terms summed (= dA_log; a check of the decomposition) instead of the scale.
inline std::vector<double> dA_log_terms(const Case& c, const Data& x, const std::vector<double>& df,
                                        bool signed_sum = false) {
  const Dims& d = c.dims;
  std::vector<double> scale(static_cast<size_t>(d.H), 0.0);
  for (int64_t bt = 0; bt < d.B * d.T; ++bt)
    for (int64_t h = 0; h < d.H; ++h)
      for (int i = 0; i < d.D; ++i) {
        const size_t at = static_cast<size_t>((bt * d.H + h) * d.D + i);
        const double xv = x.f[at] + x.dt_bias[static_cast<size_t>(h * d.D + i)];
        double ratio = xv;  // lower-bound gate: (dg/dA_log) / (dg/dx) = x
        if (!c.gate.use_lower_bound) {
          const double sig = 1.0 / (1.0 + std::exp(-xv));
          const double sp = xv > 20.0 ? xv : std::log1p(std::exp(xv));
          ratio = sig > 0.0 ? sp / sig : 1.0;  // sp / sig -> 1 as x -> -inf
        }
        const double term = df[at] * ratio;
        scale[static_cast<size_t>(h)] += signed_sum ? term : std::abs(term);
      }
  return scale;
}

inline std::vector<float> to_f32(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }
inline std::vector<double> to_f64(const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); }
inline DataOf<float> to_f32(const Data& x) {
  return {to_f32(x.q),     to_f32(x.k),       to_f32(x.v),  to_f32(x.f),  to_f32(x.b),
          to_f32(x.A_log), to_f32(x.dt_bias), to_f32(x.h0), to_f32(x.dO), to_f32(x.dht)};
}

// The naive recurrence's inputs: pointers into x (which must outlive them), the case's gate,
// h0 when the case has one.
template <class Real>
NaiveInputs<Real> naive_inputs(const Case& c, const DataOf<Real>& x) {
  NaiveInputs<Real> in;
  in.dims = c.dims;
  in.q = x.q.data();
  in.k = x.k.data();
  in.v = x.v.data();
  in.f = x.f.data();
  in.b = x.b.data();
  in.A_log = x.A_log.data();
  in.dt_bias = x.dt_bias.data();
  in.h0 = c.h0 ? x.h0.data() : nullptr;
  in.gate = c.gate;
  in.seg_start = c.seg_start.empty() ? nullptr : c.seg_start.data();
  return in;
}

inline Result run_naive(const Case& c, const Data& x) {
  const Dims& d = c.dims;
  const NaiveInputs<double> in = naive_inputs(c, x);
  Result r;
  const size_t n = x.q.size(), ns = static_cast<size_t>(d.B * d.H * d.D * d.D);
  r.o.resize(n);
  r.ht.resize(ns);
  naive_forward<double>(in, r.o.data(), r.ht.data());
  r.dq.resize(n);
  r.dk.resize(n);
  r.dv.resize(n);
  r.df.resize(n);
  r.db.resize(x.b.size());
  r.dA_log.resize(d.H);
  r.ddt_bias.resize(static_cast<size_t>(d.H * d.D));
  r.dh0.resize(ns);
  NaiveGrads<double> g{r.dq.data(), r.dk.data(),     r.dv.data(),       r.df.data(),
                       r.db.data(), r.dA_log.data(), r.ddt_bias.data(), r.dh0.data()};
  naive_backward<double>(in, x.dO.data(), c.dht ? x.dht.data() : nullptr, g);
  r.df_scale = df_terms(c, x, r.df);
  r.ddt_bias_scale = ddt_bias_terms(c, r.df_scale);
  r.df_floor = cumsum_floor(c, r.df_scale, r.df);
  r.ddt_bias_floor = cumsum_floor(c, r.ddt_bias_scale, r.ddt_bias);
  r.dA_log_scale = dA_log_terms(c, x, r.df);
  return r;
}

// The naive recurrence run in float32 on the same (double) inputs: what fp32 arithmetic
// itself costs on this sample. Used to recognise ill-conditioned quantities: dA_log and
// ddt_bias are sums over B, T (and D) whose terms can cancel, so ||ref|| can be far below the
// size of the terms and no fp32 implementation meets a fixed relative tolerance there
// (observed: dA_log = 5.9e-3 from terms of order 1..8, naive f32 error 5.8e-4).
inline Result run_naive_f32(const Case& c, const Data& x) {
  const Dims& d = c.dims;
  const DataOf<float> xf = to_f32(x);
  const NaiveInputs<float> in = naive_inputs(c, xf);
  const size_t n = xf.q.size(), ns = static_cast<size_t>(d.B * d.H * d.D * d.D);
  std::vector<float> o(n), ht(ns), dq(n), dk(n), dv(n), df(n), db(xf.b.size()), dA(xf.A_log.size()),
      ddt(xf.dt_bias.size()), dh0(ns);
  naive_forward<float>(in, o.data(), ht.data());
  naive_backward<float>(in, xf.dO.data(), c.dht ? xf.dht.data() : nullptr,
                        {dq.data(), dk.data(), dv.data(), df.data(), db.data(), dA.data(), ddt.data(), dh0.data()});
  return {to_f64(o),  to_f64(ht),  to_f64(dq),  to_f64(dk), to_f64(dv), to_f64(df), to_f64(db),
          to_f64(dA), to_f64(ddt), to_f64(dh0), {},         {},         {}};
}

using lt::test::rel_err_l2;  // tests/support/compare.h: ||x - ref|| / ||ref||, +inf on a NaN

// Host buffers in the kernel dtype (float or bf16 bits).
struct Typed {
  DType dt;
  std::vector<float> f32;
  std::vector<bfloat16> b16;
  Typed(DType d, const std::vector<double>& x) : dt(d) {
    if (d == DType::bf16) {
      b16.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) b16[i] = bfloat16(static_cast<float>(x[i]));
    } else {
      f32.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) f32[i] = static_cast<float>(x[i]);
    }
  }
  Typed(DType d, size_t n) : dt(d) {  // poisoned with NaN
    if (d == DType::bf16) b16.assign(n, bfloat16::from_bits(0xFFFF));
    else f32.assign(n, NAN);
  }
  void poison() {  // NaN everywhere, storage kept (pointers stay valid)
    std::fill(b16.begin(), b16.end(), bfloat16::from_bits(0xFFFF));
    std::fill(f32.begin(), f32.end(), NAN);
  }
  void* data() { return dt == DType::bf16 ? static_cast<void*>(b16.data()) : static_cast<void*>(f32.data()); }
  size_t bytes() const { return dt == DType::bf16 ? b16.size() * 2 : f32.size() * 4; }
  size_t size() const { return dt == DType::bf16 ? b16.size() : f32.size(); }
  std::vector<double> to_double() const {
    std::vector<double> r(size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = dt == DType::bf16 ? static_cast<float>(b16[i]) : f32[i];
    return r;
  }
};

// The backward's workspace as the engine lays it out over the forward's: it keeps the saved
// tiles (W, sQ, Kbar, Aqk, gamma, and Delta, which the forward scan saved over U) and rewrites
// them in place (X_w over W, X_q over sQ, X_k over Kbar); A_qk^T dO and dDelta share
// `aqkT_dO` (kernels/kda.h).
inline BackwardWorkspace backward_workspace(const ForwardWorkspace& fw, void* aqkT_dO, float* dgamma_s, float* partials,
                                            uint32_t* counters) {
  BackwardWorkspace ws;
  ws.Aqk = fw.Aqk;
  ws.W = fw.W;
  ws.sQ = fw.sQ;
  ws.Kbar = fw.Kbar;
  ws.gamma = fw.gamma;
  ws.AqkT_dO = aqkT_dO;
  ws.Xw = fw.W;
  ws.Delta = fw.U;
  ws.Xq = fw.sQ;
  ws.Xk = fw.Kbar;
  ws.dDelta = aqkT_dO;
  ws.dgamma_s = dgamma_s;
  ws.partials = partials;
  ws.counters = counters;
  return ws;
}

// Per-quantity errors of a result against a reference; prints one line and returns the worst.
struct ErrReport {
  std::vector<std::pair<std::string, double>> items;
  // (name, floor): the fp32 rounding floor of a quantity's relative error (Result::df_floor)
  std::vector<std::pair<std::string, double>> floors;
  double floor_of(const std::string& name) const {
    for (auto& [n, f] : floors)
      if (n == name) return f;
    return 0.0;
  }
  double worst() const {
    double w = 0;
    for (auto& [n, e] : items) {
      if (std::isnan(e)) return NAN;
      w = std::max(w, e);
    }
    return w;
  }
  std::string str() const {
    std::string s;
    char buf[64];
    for (auto& [n, e] : items) {
      std::snprintf(buf, sizeof(buf), " %s %.2e", n.c_str(), e);
      s += buf;
    }
    return s;
  }
};

// The gate: every quantity's error against the float64 reference must be below
// max(tol, 10 x the naive float32 recurrence's own error on it, its fp32 rounding floor in the
// chunk form where the result came from fp32 arithmetic, i.e. `f32` is measured: `got`'s
// floors, Result::df_floor). The second and third terms only matter for cancellation-dominated
// quantities (~1e-7..1e-6 otherwise); `adapted` lists the quantities whose error reached tol.
struct Gated {
  bool pass = true;
  double worst_ratio = 0;  // max over quantities of err / allowed
  std::string adapted;
};
inline Gated gate_errors(const ErrReport& got, const ErrReport& f32, double tol) {
  Gated g;
  for (size_t i = 0; i < got.items.size(); ++i) {
    const double e = got.items[i].second, e32 = i < f32.items.size() ? f32.items[i].second : 0.0;
    // a non-finite fp32 error (a NaN in the fp32 run) widens nothing
    const double floor = f32.items.empty() ? 0.0 : got.floor_of(got.items[i].first);
    const double allowed = std::max({tol, std::isfinite(e32) ? 10.0 * e32 : 0.0, floor});
    if (!(e < allowed)) g.pass = false;
    g.worst_ratio = std::max(g.worst_ratio, std::isnan(e) ? INFINITY : e / allowed);
    if (!(e < tol)) {  // only where the fixed tolerance alone would fail
      char buf[240];
      std::snprintf(buf, sizeof(buf), " [%s: err %.2e >= %.0e; naive-f32 err %.2e, chunk-sum floor %.2e: %s]",
                    got.items[i].first.c_str(), e, tol, e32, floor,
                    e < allowed ? "ill-conditioned, within fp32's own" : "FAIL");
      g.adapted += buf;
    }
  }
  return g;
}

// ||x - ref|| / ||scale|| (L2 over the elements), +inf on a NaN or a size mismatch.
inline double err_against_scale(const std::vector<double>& x, const std::vector<double>& ref,
                                const std::vector<double>& scale) {
  if (x.size() != ref.size() || x.size() != scale.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += scale[i] * scale[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

inline ErrReport compare(const Result& x, const Result& ref, bool fwd_only, bool with_ht, bool with_dh0) {
  ErrReport r;
  r.items.push_back({"o", rel_err_l2(x.o, ref.o)});
  if (with_ht) r.items.push_back({"ht", rel_err_l2(x.ht, ref.ht)});
  if (fwd_only) return r;
  r.items.push_back({"dq", rel_err_l2(x.dq, ref.dq)});
  r.items.push_back({"dk", rel_err_l2(x.dk, ref.dk)});
  r.items.push_back({"dv", rel_err_l2(x.dv, ref.dv)});
  r.items.push_back({"df", rel_err_l2(x.df, ref.df)});
  r.floors.push_back({"df", ref.df_floor});
  r.items.push_back({"db", rel_err_l2(x.db, ref.db)});
  r.items.push_back({"dA_log", ref.dA_log_scale.empty() ? rel_err_l2(x.dA_log, ref.dA_log)
                                                        : err_against_scale(x.dA_log, ref.dA_log, ref.dA_log_scale)});
  r.items.push_back({"ddt_bias", rel_err_l2(x.ddt_bias, ref.ddt_bias)});
  r.floors.push_back({"ddt_bias", ref.ddt_bias_floor});
  if (with_dh0) r.items.push_back({"dh0", rel_err_l2(x.dh0, ref.dh0)});
  return r;
}

// A fused result against the float64 reference, gated by the dtype's tolerance (1e-2 bf16,
// 1e-5 f32) widened where the float32 recurrence itself errs (gate_errors); prints one line
// "[kda] <label> <case> worst ..." and returns the errors and the verdict (the caller CHECKs
// `gated.pass`, with `report.str() + gated.adapted` as the failure context).
struct GatedReport {
  ErrReport report;
  Gated gated;
};
inline GatedReport gate_against_reference(const char* label, const Case& c, const Result& got, const Result& ref,
                                          const ErrReport& f32) {
  GatedReport r{compare(got, ref, false, true, true), {}};
  r.gated = gate_errors(r.report, f32, c.dtype == DType::bf16 ? 1e-2 : 1e-5);
  std::printf("[kda] %s %-38s worst %.2e, %.3f of allowed:%s%s\n", label, c.name().c_str(), r.report.worst(),
              r.gated.worst_ratio, r.report.str().c_str(), r.gated.adapted.c_str());
  return r;
}

// Per output and gradient, how many elements of `got` differ bit for bit from `ref` (all of them
// when the sizes differ): the scan forms (split, two-level) must give the
// results of the plain form exactly.
struct BitDiff {
  const char* name;
  size_t differ, total;
};
inline std::vector<BitDiff> output_bit_diffs(const Result& got, const Result& ref) {
  using Field = std::vector<double> Result::*;
  const std::pair<const char*, Field> grads[] = {
      {"o", &Result::o},    {"ht", &Result::ht},         {"dq", &Result::dq},
      {"dk", &Result::dk},  {"dv", &Result::dv},         {"df", &Result::df},
      {"db", &Result::db},  {"dA_log", &Result::dA_log}, {"ddt_bias", &Result::ddt_bias},
      {"dh0", &Result::dh0}};
  std::vector<BitDiff> out;
  for (const auto& [name, field] : grads) {
    const std::vector<double>& a = got.*field;
    const std::vector<double>& b = ref.*field;
    size_t differ = 0;
    if (a.size() != b.size()) differ = std::max(a.size(), b.size());
    else
      for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(double)) != 0;
    out.push_back({name, differ, a.size()});
  }
  return out;
}

// The Tensor API (engine/mixers/kda.h) on one case: forward with the final state, backward
// with dO (and dht when defined); the results back on the host in double.
struct TensorCase {
  Tensor q, k, v, f, b, A_log, dt_bias, h0, dO, dht;
  Tensor seg_start;  // [B, T] i32 when the case has packed documents
};
// The case's inputs as Tensors on `dev`: q, k, v, f, b, dO in dtype dt; parameters and
// states in f32 (f64 when dt is f64).
inline TensorCase to_tensors(const Case& c, const Data& x, DType dt, Device dev = Device::cpu()) {
  const Dims& d = c.dims;
  const Shape s4{d.B, d.T, d.H, d.D}, s3{d.B, d.T, d.H}, ss{d.B, d.H, d.D, d.D};
  const DType pdt = dt == DType::f64 ? DType::f64 : DType::f32;
  TensorCase t;
  t.q = Tensor::from_vector(x.q, s4, dt, dev);
  t.k = Tensor::from_vector(x.k, s4, dt, dev);
  t.v = Tensor::from_vector(x.v, s4, dt, dev);
  t.f = Tensor::from_vector(x.f, s4, dt, dev);
  t.b = Tensor::from_vector(x.b, s3, dt, dev);
  t.dO = Tensor::from_vector(x.dO, s4, dt, dev);
  t.A_log = Tensor::from_vector(x.A_log, {d.H}, pdt, dev);
  t.dt_bias = Tensor::from_vector(x.dt_bias, {d.H, d.D}, pdt, dev);
  if (c.h0) t.h0 = Tensor::from_vector(x.h0, ss, pdt, dev);
  if (c.dht) t.dht = Tensor::from_vector(x.dht, ss, pdt, dev);
  if (!c.seg_start.empty())
    t.seg_start =
        Tensor::from_vector(std::vector<double>(c.seg_start.begin(), c.seg_start.end()), {d.B, d.T}, DType::i32, dev);
  return t;
}

inline Result run_mixer(const Case& c, const TensorCase& t, mixers::KdaPath path) {
  mixers::KdaConfig cfg;
  cfg.chunk = c.dims.C;
  cfg.gate = c.gate;
  cfg.path = path;
  cfg.output_final_state = true;
  auto out = mixers::kda_forward({t.q, t.k, t.v, t.f, t.b, t.A_log, t.dt_bias, t.h0, t.seg_start}, cfg);
  auto g = mixers::kda_backward(std::move(out.saved), t.dO, t.dht);
  Result r;
  r.o = out.o.to_vector();
  r.ht = out.ht.to_vector();
  r.dq = g.dq.to_vector();
  r.dk = g.dk.to_vector();
  r.dv = g.dv.to_vector();
  r.df = g.df.to_vector();
  r.db = g.db.to_vector();
  r.dA_log = g.dA_log.to_vector();
  r.ddt_bias = g.ddt_bias.to_vector();
  if (g.dh0.defined()) r.dh0 = g.dh0.to_vector();
  return r;
}

}  // namespace lt::kda::testing
