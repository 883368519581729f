// KDA at the Tensor level: the naive, ops and fused paths (see engine/mixers/kda.h).
//
// The ops path, in chunked layout X[B, H, NT, C, D] (T padded to NT*C; padded rows have
// q = k = v = 0 and g = 0, so they change nothing and gamma = Gamma of the last valid row):
//   q^, k^ = l2norm;  beta = sigmoid(b);  g = gate(f + dt_bias) * valid;  Gamma = cumsum_C(g)
//   E[r,s,d] = exp(min(Gamma_r - Gamma_s, 0)) (s <= r; exact, never overflows)
//   P(x,y) = sum_d x_r y_s E;  A_qk = scale tril(P(q^,k^));  A = beta_r tril(P(k^,k^), -1)
//   W = (I+A)^{-1} beta K~,  U = (I+A)^{-1} beta V    (solve_unit_lower; Tm never formed)
//   scan over n:  h[n] = S;  Delta = U - W S;  O = scale Q~ S + A_qk Delta;
//                 S <- e^gamma S + Kbar^T Delta
// Backward (reverse scan, then everything batched over chunks):
//   dDelta = A_qk^T dO + Kbar S';  dh[n] = S';  S' <- e^gamma S' + scale Q~^T dO - W^T dDelta
//   X_q = dO h^T, dW = -dDelta h^T, dKbar = Delta dh^T, dgamma += e^gamma sum_v h dh
//   Y_U = (I+A)^{-T} dDelta, Y_W = (I+A)^{-T} dW;  dA = -tril(Y_U U^T + Y_W W^T, -1)
//   (= -Tm^T dTm Tm^T with dTm = dU (beta V)^T + dW (beta K~)^T), dbeta, P adjoints through
//   E, chunk-decay terms, reverse cumsum, gate / L2-norm / sigmoid backward.
#include "engine/mixers/kda.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/mixers/segments.h"
#include "engine/ops.h"

namespace lt::mixers {

using Tensor = lt::Tensor;

// Saved state of one forward call.
struct KdaSaved {
  KdaConfig cfg;
  KdaInputs in;  // the caller's tensors (refcounted, no copies)
  kda::Dims dims;
  bool has_h0 = false;
  // fused: the state trajectory and the forward's intra-chunk tiles (kernels/kda.h,
  // ForwardWorkspace: W, U, sQ, Kbar, Aqk, gamma). The backward rewrites the tiles in
  // place, so they serve one backward: a second one on the same saved state throws. It
  // releases A_qk after its first launch (the gradients reuse that memory).
  Tensor h;  // [B,H,NT,D,D] f32 state trajectory
  Tensor W, U, sQ, Kbar, Aqk, gamma;
  bool consumed = false;
  // ops (chunked layout, compute dtype)
  struct Ops {
    Tensor qh, kh, rq, rk, beta, v, x, g, Gam, gam, Pkk, A, Aqk, W, U, Kt, Qt, Kb, h, Delta, valid;
  } ops;
};

namespace {

kda::Dims dims_of(const KdaInputs& in, const KdaConfig& cfg) {
  if (!in.q.defined() || in.q.dim() != 4) throw std::invalid_argument("kda: q must be [B, T, H, D]");
  const int chunk = kda_chunk(cfg, in.q.shape(), in.q.dtype());
  kda::Dims d;
  d.B = in.q.size(0);
  d.T = in.q.size(1);
  d.H = in.q.size(2);
  d.D = static_cast<int>(in.q.size(3));
  d.C = chunk;
  const Shape x = in.q.shape();
  for (const Tensor* t : {&in.k, &in.v, &in.f})
    if (!t->defined() || t->shape() != x)
      throw std::invalid_argument("kda: q, k, v, f must share the shape " + shape_str(x));
  if (!in.b.defined() || in.b.shape() != Shape{d.B, d.T, d.H})
    throw std::invalid_argument("kda: b must be [B, T, H] = " + shape_str({d.B, d.T, d.H}));
  if (!in.A_log.defined() || in.A_log.numel() != d.H) throw std::invalid_argument("kda: A_log must have H elements");
  if (!in.dt_bias.defined() || in.dt_bias.numel() != d.H * d.D)
    throw std::invalid_argument("kda: dt_bias must have H*D elements");
  if (in.h0.defined() && in.h0.shape() != Shape{d.B, d.H, d.D, d.D})
    throw std::invalid_argument("kda: h0 must be [B, H, D, D]");
  for (const Tensor* t : {&in.k, &in.v, &in.f, &in.b})
    if (t->dtype() != in.q.dtype()) throw std::invalid_argument("kda: q, k, v, f, b must share one dtype");
  if (chunk < 1) throw std::invalid_argument("kda: chunk must be >= 1 (or 0: auto), got " + std::to_string(cfg.chunk));
  if (in.seg_start.defined() && (in.seg_start.shape() != Shape{d.B, d.T} || in.seg_start.dtype() != DType::i32 ||
                                 !(in.seg_start.device() == in.q.device())))
    throw std::invalid_argument("kda: seg_start must be [B, T] = " + shape_str({d.B, d.T}) +
                                " i32 on q's device, got " + shape_str(in.seg_start.shape()) + " " +
                                dtype_name(in.seg_start.dtype()));
  return d;
}

double resolved_scale(const KdaConfig& cfg, int D) { return mixer::resolved_scale(cfg.scale, D); }

// seg_start [B, T] i32 (or undefined: empty) as the naive recurrence's flags.
std::vector<uint8_t> token_starts(const Tensor& seg_start) {
  if (!seg_start.defined()) return {};
  const std::vector<double> v = seg_start.contiguous().to_vector();
  std::vector<uint8_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i] != 0.0 ? 1 : 0;
  return out;
}

// ---- naive -----------------------------------------------------------------------------
std::vector<double> host(const Tensor& t) { return t.defined() ? t.contiguous().to_vector() : std::vector<double>{}; }

KdaOutput naive_forward_path(const KdaInputs& in, const KdaConfig& cfg, const kda::Dims& d) {
  const std::vector<double> q = host(in.q), k = host(in.k), v = host(in.v), f = host(in.f), b = host(in.b),
                            A = host(in.A_log), dt = host(in.dt_bias), h0 = host(in.h0);
  kda::NaiveInputs<double> ni;
  ni.dims = d;
  ni.q = q.data();
  ni.k = k.data();
  ni.v = v.data();
  ni.f = f.data();
  ni.b = b.data();
  ni.A_log = A.data();
  ni.dt_bias = dt.data();
  ni.h0 = in.h0.defined() ? h0.data() : nullptr;
  const std::vector<uint8_t> starts = token_starts(in.seg_start);
  ni.seg_start = starts.empty() ? nullptr : starts.data();
  ni.scale = cfg.scale;
  ni.gate = cfg.gate;
  std::vector<double> o(q.size()), ht(static_cast<size_t>(d.B * d.H * d.D * d.D));
  kda::naive_forward<double>(ni, o.data(), ht.data());
  KdaOutput out;
  const DType sdt = in.q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  out.o = Tensor::from_vector(o, in.q.shape(), in.q.dtype(), in.q.device());
  if (cfg.output_final_state) out.ht = Tensor::from_vector(ht, {d.B, d.H, d.D, d.D}, sdt, in.q.device());
  return out;
}

KdaGrads naive_backward_path(const KdaSaved& s, const Tensor& dO, const Tensor& dht) {
  const KdaInputs& in = s.in;
  const kda::Dims& d = s.dims;
  const std::vector<double> q = host(in.q), k = host(in.k), v = host(in.v), f = host(in.f), b = host(in.b),
                            A = host(in.A_log), dt = host(in.dt_bias), h0 = host(in.h0), dOh = host(dO),
                            dhth = host(dht);
  kda::NaiveInputs<double> ni;
  ni.dims = d;
  ni.q = q.data();
  ni.k = k.data();
  ni.v = v.data();
  ni.f = f.data();
  ni.b = b.data();
  ni.A_log = A.data();
  ni.dt_bias = dt.data();
  ni.h0 = s.has_h0 ? h0.data() : nullptr;
  const std::vector<uint8_t> starts = token_starts(in.seg_start);
  ni.seg_start = starts.empty() ? nullptr : starts.data();
  ni.scale = s.cfg.scale;
  ni.gate = s.cfg.gate;
  std::vector<double> dq(q.size()), dk(q.size()), dv(q.size()), df(q.size()), db(b.size()), dA(A.size()),
      ddt(dt.size()), dh0(static_cast<size_t>(d.B * d.H * d.D * d.D));
  kda::naive_backward<double>(
      ni, dOh.data(), dht.defined() ? dhth.data() : nullptr,
      {dq.data(), dk.data(), dv.data(), df.data(), db.data(), dA.data(), ddt.data(), dh0.data()});
  const Device dev = in.q.device();
  const DType dt_in = in.q.dtype(), sdt = dt_in == DType::f64 ? DType::f64 : DType::f32;
  KdaGrads g;
  g.dq = Tensor::from_vector(dq, in.q.shape(), dt_in, dev);
  g.dk = Tensor::from_vector(dk, in.q.shape(), dt_in, dev);
  g.dv = Tensor::from_vector(dv, in.q.shape(), dt_in, dev);
  g.df = Tensor::from_vector(df, in.q.shape(), dt_in, dev);
  g.db = Tensor::from_vector(db, in.b.shape(), dt_in, dev);
  g.dA_log = Tensor::from_vector(dA, in.A_log.shape(), sdt, dev);
  g.ddt_bias = Tensor::from_vector(ddt, in.dt_bias.shape(), sdt, dev);
  if (s.has_h0) g.dh0 = Tensor::from_vector(dh0, {d.B, d.H, d.D, d.D}, sdt, dev);
  return g;
}

// ---- ops -------------------------------------------------------------------------------
// [B,T,H,X] -> [B,H,NT,C,X] (T zero-padded to NT*C)
Tensor to_chunks(const Tensor& x, const kda::Dims& d) {
  const int64_t X = x.size(3);
  Tensor p = ops::pad(x, 1, 0, d.Tp() - d.T);
  return p.view({d.B, d.NT(), d.C, d.H, X}).permute({0, 3, 1, 2, 4}).contiguous();
}
// [B,H,NT,C,X] -> [B,T,H,X]
Tensor from_chunks(const Tensor& y, const kda::Dims& d) {
  const int64_t X = y.size(4);
  return y.permute({0, 2, 3, 1, 4}).reshape({d.B, d.Tp(), d.H, X}).narrow(1, 0, d.T).contiguous();
}

// E[b,h,n,r,s,d] = exp(min(Gamma_r - Gamma_s, 0)) for s <= r, 0 above the diagonal.
Tensor gate_ratio(const Tensor& Gam, const Tensor& mask_le) {
  Tensor diff = ops::sub(Gam.unsqueeze(4), Gam.unsqueeze(3));  // [B,H,NT,C,C,D]
  const double lo = Gam.dtype() == DType::f64 ? -1e300 : -3e38;
  return ops::mul(ops::exp(ops::clamp(diff, lo, 0.0)), mask_le);
}

// P(x,y)[r,s] = sum_d x_r y_s E[r,s]
Tensor scores(const Tensor& x, const Tensor& y, const Tensor& E) {
  return ops::sum(ops::mul(ops::mul(x.unsqueeze(4), y.unsqueeze(3)), E), -1);
}

KdaOutput ops_forward_path(const KdaInputs& in, const KdaConfig& cfg, const kda::Dims& d, KdaSaved& sv) {
  const DType cdt = in.q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Device dev = in.q.device();
  const int64_t B = d.B, H = d.H, NT = d.NT(), C = d.C, D = d.D;
  const double scale = resolved_scale(cfg, d.D);
  auto& S = sv.ops;
  // 1 for the T real tokens of the chunked sequence, 0 for the padding (filled on the device:
  // no host upload, so a CUDA graph can capture the path).
  Tensor valid = Tensor::zeros({NT * C}, cdt, dev);
  valid.narrow(0, 0, d.T).fill_(1.0);
  S.valid = valid.view({1, 1, NT, C, 1});

  auto [qh, rq] = ops::l2norm(to_chunks(in.q.to(cdt), d), 1e-6);
  auto [kh, rk] = ops::l2norm(to_chunks(in.k.to(cdt), d), 1e-6);
  S.qh = qh;
  S.kh = kh;
  S.rq = rq;
  S.rk = rk;
  S.v = to_chunks(in.v.to(cdt), d);
  S.beta = ops::sigmoid(to_chunks(in.b.to(cdt).unsqueeze(3), d));  // [B,H,NT,C,1]
  S.x = ops::add(to_chunks(in.f.to(cdt), d), in.dt_bias.to(cdt).reshape({1, H, 1, 1, D}));
  const Tensor ea = ops::exp(in.A_log.to(cdt).reshape({1, H, 1, 1, 1}));
  if (cfg.gate.use_lower_bound) S.g = ops::mul_scalar(ops::sigmoid(ops::mul(ea, S.x)), cfg.gate.lower_bound);
  else S.g = ops::neg(ops::mul(ea, ops::softplus(S.x)));
  S.g = ops::mul(S.g, S.valid);
  if (in.seg_start.defined()) {  // a packed document's first token: kSegmentStartGate (kernels/kda.h)
    const Tensor restart = ops::pad(ops::mul_scalar(in.seg_start.to(cdt), kda::kSegmentStartGate), 1, 0, NT * C - d.T);
    S.Gam = ops::cumsum(ops::add(S.g, restart.view({B, 1, NT, C, 1})), 3);
  } else {
    S.Gam = ops::cumsum(S.g, 3);
  }
  S.gam = S.Gam.narrow(3, C - 1, 1);  // [B,H,NT,1,D]

  const Tensor mask_le = ops::tril(Tensor::full({C, C}, 1.0, cdt, dev), 0).view({C, C, 1});
  const Tensor E = gate_ratio(S.Gam, mask_le);
  S.Pkk = ops::tril(scores(kh, kh, E), -1);
  S.A = ops::mul(S.Pkk, S.beta);  // beta_r P (s < r)
  S.Aqk = ops::mul_scalar(ops::tril(scores(qh, kh, E), 0), scale);
  const Tensor eG = ops::exp(S.Gam);
  S.Kt = ops::mul(kh, eG);
  S.Qt = ops::mul(qh, eG);
  S.Kb = ops::mul(kh, ops::exp(ops::sub(S.gam, S.Gam)));
  S.W = ops::solve_unit_lower(S.A, ops::mul(S.beta, S.Kt));
  S.U = ops::solve_unit_lower(S.A, ops::mul(S.beta, S.v));

  Tensor St = in.h0.defined() ? in.h0.to(cdt).contiguous() : Tensor::zeros({B, H, D, D}, cdt, dev);
  std::vector<Tensor> hs, deltas, outs;
  for (int64_t n = 0; n < NT; ++n) {
    hs.push_back(St.unsqueeze(2));
    const Tensor Wn = S.W.select(2, n), Un = S.U.select(2, n), Qn = S.Qt.select(2, n), Kn = S.Kb.select(2, n);
    const Tensor Dn = ops::sub(Un, ops::matmul(Wn, St));
    Tensor On = ops::matmul(Qn, St);
    ops::matmul_out(On, S.Aqk.select(2, n), Dn, false, false, 1.0, scale);  // A_qk Delta + scale Q~ S
    deltas.push_back(Dn.unsqueeze(2));
    outs.push_back(On.unsqueeze(2));
    const Tensor eg = ops::exp(S.gam.select(2, n)).transpose(2, 3);  // [B,H,D,1]
    Tensor next = ops::mul(St, eg);
    ops::matmul_out(next, Kn, Dn, true, false, 1.0, 1.0);
    St = next;
  }
  S.h = ops::cat(hs, 2);
  S.Delta = ops::cat(deltas, 2);
  KdaOutput out;
  out.o = from_chunks(ops::cat(outs, 2), d).to(in.q.dtype());
  if (cfg.output_final_state) out.ht = St;
  return out;
}

KdaGrads ops_backward_path(const KdaSaved& sv, const Tensor& dO, const Tensor& dht) {
  const kda::Dims& d = sv.dims;
  const auto& S = sv.ops;
  const KdaInputs& in = sv.in;
  const DType cdt = S.qh.dtype();
  const Device dev = in.q.device();
  const int64_t B = d.B, H = d.H, NT = d.NT(), C = d.C, D = d.D;
  const double scale = resolved_scale(sv.cfg, d.D);

  const Tensor dOc = to_chunks(dO.to(cdt), d);
  Tensor Sp = dht.defined() ? dht.to(cdt).contiguous() : Tensor::zeros({B, H, D, D}, cdt, dev);
  std::vector<Tensor> dDs(static_cast<size_t>(NT)), dhs(static_cast<size_t>(NT));
  for (int64_t n = NT - 1; n >= 0; --n) {
    const Tensor dOn = dOc.select(2, n);
    Tensor dDn = ops::matmul(S.Aqk.select(2, n), dOn, true, false);
    ops::matmul_out(dDn, S.Kb.select(2, n), Sp, false, false, 1.0, 1.0);
    dDs[n] = dDn.unsqueeze(2);
    dhs[n] = Sp.unsqueeze(2);
    const Tensor eg = ops::exp(S.gam.select(2, n)).transpose(2, 3);
    Tensor next = ops::mul(Sp, eg);
    ops::matmul_out(next, S.Qt.select(2, n), dOn, true, false, scale, 1.0);
    ops::matmul_out(next, S.W.select(2, n), dDn, true, false, -1.0, 1.0);
    Sp = next;
  }
  const Tensor dDelta = ops::cat(dDs, 2), dh = ops::cat(dhs, 2);

  const Tensor dQt = ops::mul_scalar(ops::matmul(dOc, S.h, false, true), scale);
  const Tensor dW = ops::neg(ops::matmul(dDelta, S.h, false, true));
  const Tensor dKb = ops::matmul(S.Delta, dh, false, true);
  const Tensor egam = ops::exp(S.gam);
  const Tensor dgam_s = ops::mul(ops::sum(ops::mul(S.h, dh), -1).unsqueeze(3), egam);  // [B,H,NT,1,D]
  const Tensor dAqk = ops::tril(ops::matmul(dOc, S.Delta, false, true), 0);
  const Tensor YU = ops::solve_unit_lower(S.A, dDelta, true);
  const Tensor YW = ops::solve_unit_lower(S.A, dW, true);
  const Tensor dv = ops::mul(S.beta, YU);
  Tensor dbeta = ops::add(ops::sum(ops::mul(YU, S.v), -1, true), ops::sum(ops::mul(YW, S.Kt), -1, true));
  const Tensor dKt = ops::mul(S.beta, YW);
  Tensor dAm = ops::matmul(YU, S.U, false, true);
  ops::matmul_out(dAm, YW, S.W, false, true, 1.0, 1.0);
  const Tensor dA = ops::neg(ops::tril(dAm, -1));
  dbeta = ops::add(dbeta, ops::sum(ops::mul(dA, S.Pkk), -1, true));
  const Tensor dPkk = ops::mul(dA, S.beta);
  const Tensor dPqk = ops::mul_scalar(dAqk, scale);

  const Tensor mask_le = ops::tril(Tensor::full({C, C}, 1.0, cdt, dev), 0).view({C, C, 1});
  const Tensor E = gate_ratio(S.Gam, mask_le);
  const Tensor Gqk = ops::mul(dPqk.unsqueeze(-1), E);
  const Tensor Gkk = ops::mul(dPkk.unsqueeze(-1), E);
  const Tensor dq_P = ops::sum(ops::mul(Gqk, S.kh.unsqueeze(3)), 4);
  const Tensor dk_col =
      ops::add(ops::sum(ops::mul(Gqk, S.qh.unsqueeze(4)), 3), ops::sum(ops::mul(Gkk, S.kh.unsqueeze(4)), 3));
  const Tensor dk_row = ops::sum(ops::mul(Gkk, S.kh.unsqueeze(3)), 4);

  const Tensor eG = ops::exp(S.Gam);
  const Tensor eGb = ops::exp(ops::sub(S.gam, S.Gam));
  const Tensor dqh = ops::add(ops::mul(dQt, eG), dq_P);
  const Tensor dkh = ops::add(ops::add(ops::add(ops::mul(dKt, eG), ops::mul(dKb, eGb)), dk_row), dk_col);
  Tensor dGam = ops::mul(dQt, S.Qt);
  dGam = ops::add(dGam, ops::mul(dKt, S.Kt));
  dGam = ops::sub(dGam, ops::mul(dKb, S.Kb));
  dGam = ops::add(dGam, ops::mul(S.qh, dq_P));
  dGam = ops::add(dGam, ops::mul(S.kh, ops::sub(dk_row, dk_col)));
  const Tensor dgam = ops::add(dgam_s, ops::sum(ops::mul(dKb, S.Kb), 3, true));  // [B,H,NT,1,D]
  Tensor last = Tensor::zeros({C}, cdt, dev);                                    // 1 on the chunk's last row
  last.narrow(0, C - 1, 1).fill_(1.0);
  dGam = ops::add(dGam, ops::mul(last.view({1, 1, 1, C, 1}), dgam));
  const Tensor dg = ops::mul(ops::cumsum(dGam, 3, true), S.valid);

  const Tensor ea = ops::exp(in.A_log.to(cdt).reshape({1, H, 1, 1, 1}));
  Tensor dgdx;
  if (sv.cfg.gate.use_lower_bound) {
    // sigmoid'(z) = sigmoid(z) sigmoid(-z): 1 - sigmoid(z) as a difference cancels where z >> 0
    const Tensor z = ops::mul(ea, S.x);
    const Tensor dsg = ops::mul(ops::sigmoid(z), ops::sigmoid(ops::neg(z)));
    dgdx = ops::mul(ops::mul_scalar(dsg, sv.cfg.gate.lower_bound), ea);
  } else {
    // softplus'(x) = sigmoid(x); fla's linear branch (x > 20) has slope 1, which differs by
    // < 2.1e-9 relative: below every tolerance, so no comparison op is needed.
    dgdx = ops::neg(ops::mul(ea, ops::sigmoid(S.x)));
  }
  const Tensor df = ops::mul(dg, dgdx);
  const Tensor dA_terms = sv.cfg.gate.use_lower_bound ? ops::mul(df, S.x) : ops::mul(dg, S.g);

  KdaGrads g;
  const DType dt_in = in.q.dtype();
  g.dq = from_chunks(ops::l2norm_backward(dqh, S.qh, S.rq), d).to(dt_in);
  g.dk = from_chunks(ops::l2norm_backward(dkh, S.kh, S.rk), d).to(dt_in);
  g.dv = from_chunks(dv, d).to(dt_in);
  g.df = from_chunks(df, d).to(dt_in);
  const Tensor db = ops::mul(dbeta, ops::mul(S.beta, ops::rsub_scalar(S.beta, 1.0)));  // [B,H,NT,C,1]
  g.db = from_chunks(db, d).squeeze(3).contiguous().to(dt_in);
  g.dA_log = ops::sum_to(dA_terms, {1, H, 1, 1, 1}).reshape(in.A_log.shape());
  g.ddt_bias = ops::sum_to(df, {1, H, 1, 1, D}).reshape(in.dt_bias.shape());
  if (sv.has_h0) g.dh0 = Sp;
  return g;
}

// ---- fused -----------------------------------------------------------------------------
kda::FusedArgs fused_args(const KdaInputs& in, const KdaConfig& cfg, const kda::Dims& d, const Tensor& A_log,
                          const Tensor& dt_bias, const Tensor& h0) {
  kda::FusedArgs a;
  a.dims = d;
  a.dtype = in.q.dtype();
  a.scale = static_cast<float>(cfg.scale);
  a.gate = cfg.gate;
  a.tensor_cores = cfg.tensor_cores;
  a.q = in.q.data_ptr();
  a.k = in.k.data_ptr();
  a.v = in.v.data_ptr();
  a.f = in.f.data_ptr();
  a.b = in.b.data_ptr();
  a.A_log = A_log.data<float>();
  a.dt_bias = dt_bias.data<float>();
  a.h0 = h0.defined() ? h0.data<float>() : nullptr;
  a.seg_start = in.seg_start.defined() ? in.seg_start.data<int32_t>() : nullptr;
  return a;
}

// Scratch from the caching allocator (never zeroed: every buffer is fully overwritten).
Tensor tile_of(size_t bytes, DType dtype, Device dev) {
  return Tensor::empty({static_cast<int64_t>(bytes / dtype_size(dtype))}, dtype, dev);
}
Tensor f32_contig(const Tensor& t) { return t.defined() ? t.to(DType::f32).contiguous() : t; }

KdaOutput fused_forward_path(const KdaInputs& in_, const KdaConfig& cfg, const kda::Dims& d, KdaSaved& sv) {
  KdaInputs in = in_;
  for (Tensor* t : {&in.q, &in.k, &in.v, &in.f, &in.b}) *t = t->contiguous();
  if (in.seg_start.defined()) in.seg_start = in.seg_start.contiguous();
  const Tensor A_log = f32_contig(in.A_log), dt_bias = f32_contig(in.dt_bias), h0 = f32_contig(in.h0);
  const Device dev = in.q.device();
  kda::FusedArgs a = fused_args(in, cfg, d, A_log, dt_bias, h0);
  KdaOutput out;
  out.o = Tensor::empty(in.q.shape(), in.q.dtype(), dev);
  if (cfg.output_final_state) out.ht = Tensor::empty({d.B, d.H, d.D, d.D}, DType::f32, dev);
  sv.h = Tensor::empty({d.B, d.H, d.NT(), d.D, d.D}, DType::f32, dev);
  a.o = out.o.data_ptr();
  a.ht = out.ht.defined() ? out.ht.data<float>() : nullptr;
  a.h = sv.h.data<float>();
  const DType dt = in.q.dtype();
  const kda::WorkspaceBytes wb = kda::workspace_bytes(d, dt);
  sv.W = tile_of(wb.tile, dt, dev);
  sv.U = tile_of(wb.tile_f32, DType::f32, dev);
  sv.sQ = tile_of(wb.tile, dt, dev);
  sv.Kbar = tile_of(wb.tile_f32, DType::f32, dev);
  sv.Aqk = tile_of(wb.aqk, dt, dev);
  sv.gamma = tile_of(wb.gamma, DType::f32, dev);
  const Tensor Qp = tile_of(wb.tile, dt, dev), Ob = tile_of(wb.tile, dt, dev);  // forward only
  const Tensor counters = tile_of(wb.counters, DType::i32, dev);                // forward only
  kda::ForwardWorkspace ws;
  ws.W = sv.W.data_ptr();
  ws.U = sv.U.data<float>();
  ws.sQ = sv.sQ.data_ptr();
  ws.Kbar = sv.Kbar.data<float>();
  ws.Aqk = sv.Aqk.data_ptr();
  ws.gamma = sv.gamma.data<float>();
  ws.Qp = Qp.data_ptr();
  ws.Ob = Ob.data_ptr();
  ws.counters = static_cast<uint32_t*>(counters.data_ptr());
#if LINTRAIN_WITH_CUDA
  if (dev.is_cuda()) kda::fused_forward_cuda(a, ws, current_stream(dev).handle());
  else
#endif
    kda::fused_forward_cpu(a, ws);
  sv.in = in;
  return out;
}

KdaGrads fused_backward_path(KdaSaved& sv, const Tensor& dO_, const Tensor& dht_) {
  if (sv.consumed)
    throw std::invalid_argument(
        "kda_backward: the fused path's saved tiles were consumed by an earlier backward on this "
        "saved state (they are rewritten in place); run the forward again");
  const KdaInputs& in = sv.in;
  const kda::Dims& d = sv.dims;
  const Device dev = in.q.device();
  const Tensor A_log = f32_contig(in.A_log), dt_bias = f32_contig(in.dt_bias), h0 = f32_contig(in.h0);
  const Tensor dO = dO_.to(in.q.dtype()).contiguous(), dht = f32_contig(dht_);
  kda::FusedArgs a = fused_args(in, sv.cfg, d, A_log, dt_bias, h0);
  a.h = const_cast<float*>(sv.h.data<float>());
  a.dO = dO.data_ptr();
  a.dht = dht.defined() ? dht.data<float>() : nullptr;
  const DType dt = in.q.dtype();
  const kda::WorkspaceBytes wb = kda::workspace_bytes(d, dt);
#if LINTRAIN_WITH_CUDA
  if (dev.is_cuda()) {  // both parts run the same scan form
    a.scan_group = kda::resolve_scan_group_cuda(a);
    a.scan_first = kda::resolve_scan_first_cuda(a);
  }
#endif
  // The saved tiles are read and rewritten in place (kernels/kda.h): Xw over W, Xq over sQ,
  // Xk over Kbar, dDelta over AqkT_dO; Delta is the forward scan's, saved over U.
  kda::BackwardWorkspace ws;
  ws.W = ws.Xw = sv.W.data_ptr();
  ws.Delta = sv.U.data<float>();
  ws.sQ = ws.Xq = sv.sQ.data_ptr();
  ws.Xk = sv.Kbar.data<float>();
  ws.Kbar = ws.Xk;
  ws.gamma = sv.gamma.data<float>();
  auto run = [&](kda::BackwardLaunches part) {
#if LINTRAIN_WITH_CUDA
    if (dev.is_cuda()) kda::fused_backward_cuda(a, ws, current_stream(dev).handle(), part);
    else
#endif
      kda::fused_backward_cpu(a, ws, part);
  };
  // Part 1 (aqk_dO): AqkT_dO = A_qk^T dO. A_qk is dead after it: it goes back to the caching
  // allocator before the gradients are allocated (stream order makes the reuse safe), which
  // pays for the fp32 Kbar / X_k tile (kernels/kda.h).
  const Tensor AqkT_dO = tile_of(wb.tile, dt, dev), counters = tile_of(wb.counters, DType::i32, dev);
  ws.AqkT_dO = ws.dDelta = AqkT_dO.data_ptr();
  ws.Aqk = sv.Aqk.data_ptr();
  ws.counters = static_cast<uint32_t*>(counters.data_ptr());
  run(kda::BackwardLaunches::aqk_dO);
  sv.consumed = true;  // (argument errors throw before any kernel runs: the tiles are intact then)
  ws.Aqk = nullptr;
  sv.Aqk = Tensor();
  // Part 2 (inter adjoint, intra adjoint): the gradients.
  KdaGrads g;
  g.dq = Tensor::empty(in.q.shape(), in.q.dtype(), dev);
  g.dk = Tensor::empty(in.q.shape(), in.q.dtype(), dev);
  g.dv = Tensor::empty(in.q.shape(), in.q.dtype(), dev);
  g.df = Tensor::empty(in.q.shape(), in.q.dtype(), dev);
  g.db = Tensor::empty(in.b.shape(), in.q.dtype(), dev);
  g.dA_log = Tensor::empty(in.A_log.shape(), DType::f32, dev);
  g.ddt_bias = Tensor::empty(in.dt_bias.shape(), DType::f32, dev);
  if (sv.has_h0) g.dh0 = Tensor::empty({d.B, d.H, d.D, d.D}, DType::f32, dev);
  a.dq = g.dq.data_ptr();
  a.dk = g.dk.data_ptr();
  a.dv = g.dv.data_ptr();
  a.df = g.df.data_ptr();
  a.db = g.db.data_ptr();
  a.dA_log = g.dA_log.data<float>();
  a.ddt_bias = g.ddt_bias.data<float>();
  a.dh0 = g.dh0.defined() ? g.dh0.data<float>() : nullptr;
  const Tensor dgamma_s = tile_of(wb.gamma, DType::f32, dev), partials = tile_of(wb.partials, DType::f32, dev);
  ws.dgamma_s = dgamma_s.data<float>();
  ws.partials = partials.data<float>();
  run(kda::BackwardLaunches::adjoints);
  return g;
}

}  // namespace

int kda_chunk(const KdaConfig& cfg, const Shape& q_shape, DType dtype) {
  if (cfg.chunk != 0) return cfg.chunk;
  if (cfg.path != KdaPath::fused || q_shape.size() != 4) return 64;
  return kda::fused_chunk(q_shape[0] * q_shape[2], q_shape[1], static_cast<int>(q_shape[3]), dtype);
}

KdaOutput kda_forward(const KdaInputs& in, const KdaConfig& cfg) {
  const kda::Dims d = dims_of(in, cfg);
  auto sv = std::make_shared<KdaSaved>();
  sv->cfg = cfg;
  sv->in = in;
  sv->dims = d;
  sv->has_h0 = in.h0.defined();
  KdaOutput out;
  switch (cfg.path) {
    case KdaPath::naive: out = naive_forward_path(in, cfg, d); break;
    case KdaPath::ops: out = ops_forward_path(in, cfg, d, *sv); break;
    case KdaPath::fused: out = fused_forward_path(in, cfg, d, *sv); break;
  }
  out.saved = std::move(sv);
  return out;
}

KdaGrads kda_backward(std::shared_ptr<KdaSaved> saved, const Tensor& dO, const Tensor& dht) {
  if (!saved) throw std::invalid_argument("kda_backward: no saved state (forward not run, or moved from)");
  if (!dO.defined() || dO.shape() != saved->in.q.shape())
    throw std::invalid_argument("kda_backward: dO must be " + shape_str(saved->in.q.shape()));
  if (dht.defined() && dht.shape() != Shape{saved->dims.B, saved->dims.H, saved->dims.D, saved->dims.D})
    throw std::invalid_argument("kda_backward: dht must be [B, H, D, D]");
  switch (saved->cfg.path) {
    case KdaPath::naive: return naive_backward_path(*saved, dO, dht);
    case KdaPath::ops: return ops_backward_path(*saved, dO, dht);
    case KdaPath::fused: return fused_backward_path(*saved, dO, dht);
  }
  return {};
}

}  // namespace lt::mixers
