// RWKV6 mixer on Tensors: path selection, the ops path (engine ops only), and the glue to
// the naive recurrence, the CPU twins and the CUDA kernels. See engine/mixers/rwkv6.h.
#include "engine/mixers/rwkv6.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/mixers/segments.h"
#include "engine/ops.h"

namespace lt::mixers {

using rwkv6::BwdImpl;
using rwkv6::Dims;

// Saved state of one forward call.
struct Rwkv6Saved {
  Rwkv6Config cfg;
  Rwkv6Inputs in;  // the caller's tensors (refcounted); CUDA fused: contiguous, u and h0 f32
  Dims dims;
  double scale = 1.0;
  DType u_dtype = DType::f32;  // the caller's u: du leaves in this dtype
  Tensor h;                    // CUDA fused: [B,H,NT,D,D] f32, the state entering each chunk
};

namespace {

[[noreturn]] void fail(const std::string& why) { throw std::invalid_argument("rwkv6: " + why); }

// Shape checks shared by every path; returns the dims.
Dims check_inputs(const Rwkv6Inputs& in, const Rwkv6Config& cfg) {
  const Tensor &r = in.r, &k = in.k, &v = in.v, &w = in.w, &u = in.u, &h0 = in.h0;
  if (!r.defined() || !k.defined() || !v.defined() || !w.defined() || !u.defined()) fail("r, k, v, w, u are required");
  if (r.dim() != 4) fail("r must be [B, T, H, D], got " + shape_str(r.shape()));
  for (const Tensor* t : {&k, &v, &w})
    if (t->shape() != r.shape())
      fail("k, v, w must have r's shape " + shape_str(r.shape()) + ", got " + shape_str(t->shape()));
  for (const Tensor* t : {&k, &v, &w})
    if (t->dtype() != r.dtype() || !(t->device() == r.device())) fail("r, k, v, w must share dtype and device");
  if (!is_floating(r.dtype())) fail("inputs must be a float dtype");
  Dims d{r.size(0), r.size(1), r.size(2), r.size(3), cfg.chunk};
  if (cfg.path == Rwkv6Path::fused && cfg.chunk != 16 && cfg.chunk != 32 && cfg.chunk != 64)
    fail("the fused path's chunk must be 16, 32 or 64, got " + std::to_string(cfg.chunk));
  if (cfg.chunk < 1) fail("chunk must be >= 1, got " + std::to_string(cfg.chunk));
  if (u.shape() != Shape{d.H, d.D})
    fail("u must be [H, D] = " + shape_str({d.H, d.D}) + ", got " + shape_str(u.shape()));
  if (!(u.device() == r.device())) fail("u must be on r's device");
  if (h0.defined() && h0.shape() != Shape{d.B, d.H, d.D, d.D})
    fail("h0 must be [B, H, D, D] = " + shape_str({d.B, d.H, d.D, d.D}) + ", got " + shape_str(h0.shape()));
  if (h0.defined() && !(h0.device() == r.device())) fail("h0 must be on r's device");
  check_chunk_reset(in.chunk_reset, d.B, d.NT(), r.device(), "rwkv6");
  return d;
}

double scale_of(const Dims& d, const Rwkv6Config& cfg) { return mixer::resolved_scale(cfg.scale, d.D); }

// The dtype of states (ht, dh0) and of the ops path's arithmetic: f64 for f64 inputs, else f32.
DType state_dtype(const Tensor& x) { return x.dtype() == DType::f64 ? DType::f64 : DType::f32; }

// ---------------------------------------------------------------------------------------
// Ops path helpers. Chunked layout [B, H, NT, C, D] in the compute dtype ct.
Tensor to_chunks(const Tensor& x, int64_t C, DType ct) {
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3), NT = (T + C - 1) / C;
  Tensor y = x.to(ct);
  if (NT * C != T) y = ops::pad(y, 1, 0, NT * C - T);
  return y.contiguous().view({B, NT, C, H, D}).permute({0, 3, 1, 2, 4}).contiguous();
}
Tensor from_chunks(const Tensor& x, int64_t T, DType out) {
  const int64_t B = x.size(0), H = x.size(1), NT = x.size(2), C = x.size(3), D = x.size(4);
  Tensor y = x.permute({0, 2, 3, 1, 4}).contiguous().view({B, NT * C, H, D}).narrow(1, 0, T);
  return ops::convert(y, out);
}

// Everything the chunk forward computes that the backward reuses.
struct OpsChunk {
  Tensor q, k, v, w;  // [B,H,NT,C,D]
  Tensor gi, ge;      // cumulative gates: Gi_r = sum_{j<=r} w_j, Ge = Gi - w
  Tensor gamma;       // [B,H,NT,1,D] = Gi at the last row
  Tensor E;           // [B,H,NT,C,C,D]: e^{Ge_r - Gi_s} for s < r, 0 elsewhere
  Tensor A;           // [B,H,NT,C,C]: scale * (q k E summed over D), bonus on the diagonal
  Tensor kd;          // [B,H,NT,C,D]: k e^{gamma - Gi}
  Tensor egT;         // [B,H,NT,D,1]: e^{gamma} as a column (decays the state's rows)
  Tensor h;           // [B,H,NT,D,D]: state entering each chunk
  Tensor ht;          // [B,H,D,D]
  Tensor ub;          // u as [1,H,1,1,D]
  Tensor eyeC;        // [C,C]
  Tensor keep;        // [B,NT,1,1,1]: 0 where a chunk starts a segment (undefined: no resets)
};

OpsChunk ops_forward_chunks(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& u,
                            const Tensor& h0, const Tensor& chunk_reset, const Dims& d, double scale, DType ct) {
  OpsChunk c;
  const int64_t C = d.C, NT = d.NT();
  const Device dev = r.device();
  c.q = to_chunks(r, C, ct);
  c.k = to_chunks(k, C, ct);
  c.v = to_chunks(v, C, ct);
  c.w = to_chunks(w, C, ct);
  c.gi = ops::cumsum(c.w, 3);  // chunk-local, sequential per column
  c.ge = c.gi - c.w;
  c.gamma = c.gi.narrow(3, C - 1, 1);
  // Exponentials of the masked differences: the strict lower triangle only, so every
  // argument is <= 0 and the masked-out ones are -inf (exp -> 0): no inf * 0 anywhere.
  Tensor diff = c.ge.unsqueeze(4) - c.gi.unsqueeze(3);                              // [B,H,NT,C(r),C(s),D]
  Tensor strict = ops::tril(Tensor::full({C, C}, 1.0, ct, dev), -1).unsqueeze(-1);  // [C,C,1]
  Tensor neg_inf = Tensor::full({}, -std::numeric_limits<double>::infinity(), ct, dev);
  c.E = ops::exp(ops::where(strict, diff, neg_inf));
  c.ub = u.to(ct).contiguous().view({1, d.H, 1, 1, d.D});
  c.eyeC = ops::eye(C, ct, dev);
  Tensor A = ops::sum(c.q.unsqueeze(4) * c.k.unsqueeze(3) * c.E, -1);  // [B,H,NT,C,C]
  Tensor bonus = ops::sum(c.q * c.ub * c.k, -1).unsqueeze(-1);         // [B,H,NT,C,1]
  c.A = (A + bonus * c.eyeC) * scale;
  // Inter-chunk states: S_{n+1} = e^gamma . S_n + (K e^{gamma - Gi})^T V, a host loop.
  c.kd = c.k * ops::exp(c.gamma - c.gi);
  Tensor U = ops::matmul(c.kd, c.v, true, false);  // [B,H,NT,D,D]
  c.egT = ops::exp(c.gamma).transpose(-1, -2);     // [B,H,NT,D,1]
  Tensor S = h0.defined() ? h0.to(ct).contiguous() : Tensor::zeros({d.B, d.H, d.D, d.D}, ct, dev);
  c.keep = keep_mask(chunk_reset, ct);
  std::vector<Tensor> hs;
  for (int64_t n = 0; n < NT; ++n) {
    if (c.keep.defined()) S = S * c.keep.select(1, n);  // a segment starts: S_in = 0
    hs.push_back(S.unsqueeze(2));
    S = c.egT.select(2, n) * S + U.select(2, n);
  }
  c.h = ops::cat(hs, 2);
  c.ht = S;
  return c;
}

Rwkv6Output ops_forward(const Rwkv6Inputs& in, const Dims& d, double scale, bool want_ht) {
  const DType ct = state_dtype(in.r);
  OpsChunk c = ops_forward_chunks(in.r, in.k, in.v, in.w, in.u, in.h0, in.chunk_reset, d, scale, ct);
  Tensor O = ops::matmul(c.q * ops::exp(c.ge), c.h) * scale + ops::matmul(c.A, c.v);
  Rwkv6Output out;
  out.o = from_chunks(O, d.T, in.r.dtype());
  if (want_ht) out.ht = c.ht;
  return out;
}

Rwkv6Grads ops_backward(const Rwkv6Inputs& in, const Tensor& dO_tokens, const Tensor& dht, const Dims& d,
                        double scale) {
  const DType ct = state_dtype(in.r);
  const int64_t C = d.C, NT = d.NT();
  const Device dev = in.r.device();
  OpsChunk c = ops_forward_chunks(in.r, in.k, in.v, in.w, in.u, in.h0, in.chunk_reset, d, scale, ct);
  Tensor dO = to_chunks(dO_tokens, C, ct);
  Tensor dP = ops::tril(ops::matmul(dO, c.v, false, true), 0) * scale;  // [B,H,NT,C,C]
  // Reverse scan: dh[n] = gradient of the state leaving chunk n.
  Tensor G = ops::matmul(c.q * ops::exp(c.ge) * scale, dO, true, false);  // [B,H,NT,D,D]
  Tensor Sp = dht.defined() ? dht.to(ct).contiguous() : Tensor::zeros({d.B, d.H, d.D, d.D}, ct, dev);
  std::vector<Tensor> dhs(NT);
  for (int64_t n = NT - 1; n >= 0; --n) {
    dhs[n] = Sp.unsqueeze(2);
    Sp = c.egT.select(2, n) * Sp + G.select(2, n);
    if (c.keep.defined()) Sp = Sp * c.keep.select(1, n);  // S_in(n) = 0: no gradient before it
  }
  Tensor dh = ops::cat(dhs, 2);
  Tensor dV = ops::matmul(c.A, dO, true, false) + ops::matmul(c.kd, dh);
  Tensor dqS = ops::matmul(dO, c.h, false, true);  // (dO h^T)
  Tensor dkS = ops::matmul(c.v, dh, false, true);  // (V dh^T)
  Tensor dPs = ops::tril(dP, -1).unsqueeze(-1);    // strict lower, [B,H,NT,C,C,1]
  Tensor egi = ops::exp(c.gamma - c.gi);
  Tensor dq_ = dqS * ops::exp(c.ge) * scale + ops::sum(dPs * c.k.unsqueeze(3) * c.E, 4);
  Tensor dk_ = dkS * egi + ops::sum(dPs * c.q.unsqueeze(4) * c.E, 3);
  Tensor dgamma = ops::exp(c.gamma) * ops::sum(c.h * dh, -1).unsqueeze(3) + ops::sum(c.k * dkS * egi, 3, true);
  Tensor x = c.q * dq_, y = c.k * dk_;
  Tensor dw = (ops::cumsum(x, 3, true) - x) - ops::cumsum(y, 3, true) + dgamma;
  Tensor pd = ops::sum(dP * c.eyeC, -1).unsqueeze(-1);  // dP[r, r], [B,H,NT,C,1]
  Tensor dq = dq_ + pd * c.ub * c.k;
  Tensor dk = dk_ + pd * c.ub * c.q;
  Tensor du = ops::sum(ops::sum(ops::sum(pd * c.q * c.k, 3), 2), 0);  // [H,D]
  Rwkv6Grads g;
  g.dr = from_chunks(dq, d.T, in.r.dtype());
  g.dk = from_chunks(dk, d.T, in.r.dtype());
  g.dv = from_chunks(dV, d.T, in.r.dtype());
  g.dw = from_chunks(dw, d.T, in.r.dtype());
  g.du = ops::convert(du, in.u.dtype());
  if (in.h0.defined()) g.dh0 = Sp;
  return g;
}

// ---------------------------------------------------------------------------------------
// Naive recurrence and CPU twins: host vectors in double (naive) or F (twins).
template <class F>
std::vector<F> host(const Tensor& x) {
  std::vector<double> v = x.contiguous().to_vector();
  return std::vector<F>(v.begin(), v.end());
}
template <class F>
Tensor tensor_of(const std::vector<F>& v, const Shape& shape, DType dtype, Device dev) {
  return Tensor::from_vector(std::vector<double>(v.begin(), v.end()), shape, dtype, dev);
}

template <class F>
Rwkv6Output cpu_forward(bool naive, const Rwkv6Inputs& in, const Dims& d, double scale, bool want_ht) {
  auto R = host<F>(in.r), K = host<F>(in.k), V = host<F>(in.v), W = host<F>(in.w), U = host<F>(in.u);
  std::vector<F> H0 = in.h0.defined() ? host<F>(in.h0) : std::vector<F>();
  std::vector<F> o(d.token_numel()), ht(d.state_numel());
  const F* h0p = in.h0.defined() ? H0.data() : nullptr;
  const F sc = static_cast<F>(scale);
  const SegmentFlags seg(in.chunk_reset, d.T, d.C);
  if (naive)
    rwkv6::naive_forward<F>({d, R.data(), K.data(), V.data(), W.data(), U.data(), h0p, sc, seg.token_starts()},
                            o.data(), ht.data());
  else
    rwkv6::chunk_forward_cpu<F>(d, sc, R.data(), K.data(), V.data(), W.data(), U.data(), h0p, o.data(), ht.data(),
                                rwkv6::Variant::simt, seg.chunk_resets());
  Rwkv6Output out;
  out.o = tensor_of(o, in.r.shape(), in.r.dtype(), in.r.device());
  if (want_ht) out.ht = tensor_of(ht, {d.B, d.H, d.D, d.D}, state_dtype(in.r), in.r.device());
  return out;
}

template <class F>
Rwkv6Grads cpu_backward(bool naive, BwdImpl impl, const Rwkv6Inputs& in, const Tensor& dO, const Tensor& dht,
                        const Dims& d, double scale) {
  auto R = host<F>(in.r), K = host<F>(in.k), V = host<F>(in.v), W = host<F>(in.w), U = host<F>(in.u), DO = host<F>(dO);
  std::vector<F> H0 = in.h0.defined() ? host<F>(in.h0) : std::vector<F>();
  std::vector<F> DHT = dht.defined() ? host<F>(dht) : std::vector<F>();
  const F* h0p = in.h0.defined() ? H0.data() : nullptr;
  const F* dhtp = dht.defined() ? DHT.data() : nullptr;
  const F sc = static_cast<F>(scale);
  const int64_t n = d.token_numel();
  std::vector<F> dr(n), dk(n), dv(n), dw(n), du(d.H * d.D), dh0(d.state_numel());
  const SegmentFlags seg(in.chunk_reset, d.T, d.C);
  if (naive)
    rwkv6::naive_backward<F>({d, R.data(), K.data(), V.data(), W.data(), U.data(), h0p, sc, seg.token_starts()},
                             DO.data(), dhtp, {dr.data(), dk.data(), dv.data(), dw.data(), du.data(), dh0.data()});
  else
    rwkv6::chunk_backward_cpu<F>(d, impl, sc, R.data(), K.data(), V.data(), W.data(), U.data(), h0p, DO.data(), dhtp,
                                 dr.data(), dk.data(), dv.data(), dw.data(), du.data(), dh0.data(),
                                 rwkv6::Variant::simt, seg.chunk_resets());
  Rwkv6Grads g;
  const Device dev = in.r.device();
  g.dr = tensor_of(dr, in.r.shape(), in.r.dtype(), dev);
  g.dk = tensor_of(dk, in.r.shape(), in.r.dtype(), dev);
  g.dv = tensor_of(dv, in.r.shape(), in.r.dtype(), dev);
  g.dw = tensor_of(dw, in.r.shape(), in.r.dtype(), dev);
  g.du = tensor_of(du, in.u.shape(), in.u.dtype(), dev);
  if (in.h0.defined()) g.dh0 = tensor_of(dh0, {d.B, d.H, d.D, d.D}, state_dtype(in.r), dev);
  return g;
}

// ---------------------------------------------------------------------------------------
// CUDA: raw kernels, every buffer a Tensor from the caching allocator.
#if LINTRAIN_WITH_CUDA
// The inputs as the kernels take them: contiguous; u and h0 f32.
Rwkv6Inputs cuda_prepare(const Rwkv6Inputs& in, const Dims& d) {
  if (in.r.dtype() != DType::f32 && in.r.dtype() != DType::bf16)
    fail("the fused CUDA path takes f32 or bf16, got " + std::string(dtype_name(in.r.dtype())) + " (use the ops path)");
  if (d.D % 64 != 0)
    fail("the fused CUDA path needs D % 64 == 0, got D = " + std::to_string(d.D) + " (use the ops path)");
  Rwkv6Inputs c;
  c.r = in.r.contiguous(), c.k = in.k.contiguous(), c.v = in.v.contiguous(), c.w = in.w.contiguous();
  c.u = in.u.to(DType::f32).contiguous();
  if (in.h0.defined()) c.h0 = in.h0.to(DType::f32).contiguous();
  if (in.chunk_reset.defined()) c.chunk_reset = in.chunk_reset.contiguous();
  return c;
}

rwkv6::FusedArgs cuda_args(const Rwkv6Inputs& c, const Dims& d, double scale) {
  rwkv6::FusedArgs a;
  a.dims = d;
  a.dtype = c.r.dtype();
  a.scale = static_cast<float>(scale);
  a.r = c.r.data_ptr(), a.k = c.k.data_ptr(), a.v = c.v.data_ptr(), a.w = c.w.data_ptr();
  a.u = c.u.data<float>();
  a.h0 = c.h0.defined() ? c.h0.data<float>() : nullptr;
  a.chunk_reset = c.chunk_reset.defined() ? c.chunk_reset.data<int32_t>() : nullptr;
  return a;
}

Rwkv6Output cuda_forward(Rwkv6Saved& sv, bool want_ht) {
  const Dims& d = sv.dims;
  const Device dev = sv.in.r.device();
  rwkv6::FusedArgs a = cuda_args(sv.in, d, sv.scale);
  Rwkv6Output out;
  out.o = Tensor::empty(sv.in.r.shape(), sv.in.r.dtype(), dev);
  if (want_ht) out.ht = Tensor::empty({d.B, d.H, d.D, d.D}, DType::f32, dev);
  sv.h = Tensor::empty({d.B, d.H, d.NT(), d.D, d.D}, DType::f32, dev);
  a.o = out.o.data_ptr();
  a.ht = want_ht ? out.ht.data<float>() : nullptr;
  a.h = sv.h.data<float>();
  rwkv6::cuda_forward(a, current_stream(dev).handle());
  return out;
}

Rwkv6Grads cuda_backward(const Rwkv6Saved& sv, const Tensor& dO_in, const Tensor& dht_in) {
  const Dims& d = sv.dims;
  const Rwkv6Inputs& in = sv.in;
  const Device dev = in.r.device();
  const BwdImpl impl = sv.cfg.backward;
  const Tensor dO = dO_in.to(in.r.dtype()).contiguous();
  const Tensor dht = dht_in.defined() ? dht_in.to(DType::f32).contiguous() : Tensor();
  rwkv6::FusedArgs a = cuda_args(in, d, sv.scale);
  a.dO = dO.data_ptr();
  a.dht = dht.defined() ? dht.data<float>() : nullptr;
  Rwkv6Grads g;
  g.dr = Tensor::empty(in.r.shape(), in.r.dtype(), dev);
  g.dk = Tensor::empty(in.r.shape(), in.r.dtype(), dev);
  g.dv = Tensor::empty(in.r.shape(), in.r.dtype(), dev);
  g.dw = Tensor::empty(in.r.shape(), in.r.dtype(), dev);
  Tensor du = Tensor::empty({d.H, d.D}, DType::f32, dev);
  if (in.h0.defined()) g.dh0 = Tensor::empty({d.B, d.H, d.D, d.D}, DType::f32, dev);
  // Scratch (from the caching allocator; freed when these Tensors go out of scope).
  Tensor dh = Tensor::empty({d.B, d.H, d.NT(), d.D, d.D}, DType::f32, dev);
  Tensor du_part = Tensor::empty({d.B, d.NT(), d.H, d.D}, DType::f32, dev);
  Tensor dq_tmp, dk_tmp;
  if (impl == BwdImpl::fallback) {
    dq_tmp = Tensor::empty(in.r.shape(), DType::f32, dev);
    dk_tmp = Tensor::empty(in.r.shape(), DType::f32, dev);
    a.dq_tmp = dq_tmp.data<float>(), a.dk_tmp = dk_tmp.data<float>();
  }
  a.dr = g.dr.data_ptr(), a.dk = g.dk.data_ptr(), a.dv = g.dv.data_ptr(), a.dw = g.dw.data_ptr();
  a.du = du.data<float>();
  a.dh0 = in.h0.defined() ? g.dh0.data<float>() : nullptr;
  // h: the forward's states, read (not rewritten) by the reverse-scan-only backward.
  a.h = const_cast<float*>(sv.h.data<float>());
  a.dh = dh.data<float>(), a.du_part = du_part.data<float>();
  rwkv6::cuda_backward(a, impl, /*h_is_valid=*/true, current_stream(dev).handle());
  g.du = sv.u_dtype == DType::f32 ? du : du.to(sv.u_dtype);
  return g;
}
#endif

}  // namespace

Rwkv6Output rwkv6_forward(const Rwkv6Inputs& in, const Rwkv6Config& cfg) {
  const Dims d = check_inputs(in, cfg);
  auto sv = std::make_shared<Rwkv6Saved>();
  sv->cfg = cfg;
  sv->in = in;
  sv->dims = d;
  sv->scale = scale_of(d, cfg);
  sv->u_dtype = in.u.dtype();
  const bool want_ht = cfg.output_final_state;
  Rwkv6Output out;
  if (cfg.path == Rwkv6Path::ops) {
    out = ops_forward(in, d, sv->scale, want_ht);
  } else if (cfg.path == Rwkv6Path::naive) {
    if (!in.r.device().is_cpu()) fail("the naive path runs on the CPU only");
    out = cpu_forward<double>(true, in, d, sv->scale, want_ht);
  } else if (in.r.device().is_cpu()) {
    if (in.r.dtype() == DType::bf16) fail("the fused path's CPU twins take f32 or f64 (use the ops path for bf16)");
    out = in.r.dtype() == DType::f64 ? cpu_forward<double>(false, in, d, sv->scale, want_ht)
                                     : cpu_forward<float>(false, in, d, sv->scale, want_ht);
  } else {
#if LINTRAIN_WITH_CUDA
    sv->in = cuda_prepare(in, d);
    out = cuda_forward(*sv, want_ht);
#else
    fail("CUDA tensors in a build without CUDA");
#endif
  }
  out.saved = std::move(sv);
  return out;
}

Rwkv6Grads rwkv6_backward(std::shared_ptr<Rwkv6Saved> saved, const Tensor& dO, const Tensor& dht) {
  if (!saved) throw std::invalid_argument("rwkv6_backward: no saved state (forward not run, or moved from)");
  const Rwkv6Saved& sv = *saved;
  const Dims& d = sv.dims;
  if (!dO.defined() || dO.shape() != sv.in.r.shape())
    throw std::invalid_argument("rwkv6_backward: dO must be " + shape_str(sv.in.r.shape()) + ", got " +
                                (dO.defined() ? shape_str(dO.shape()) : std::string("undefined")));
  if (!(dO.device() == sv.in.r.device())) throw std::invalid_argument("rwkv6_backward: dO must be on r's device");
  if (dht.defined() && dht.shape() != Shape{d.B, d.H, d.D, d.D})
    throw std::invalid_argument("rwkv6_backward: dht must be [B, H, D, D] = " + shape_str({d.B, d.H, d.D, d.D}) +
                                ", got " + shape_str(dht.shape()));
  const Rwkv6Config& cfg = sv.cfg;
  if (cfg.path == Rwkv6Path::ops) return ops_backward(sv.in, dO.to(sv.in.r.dtype()), dht, d, sv.scale);
  if (cfg.path == Rwkv6Path::naive) return cpu_backward<double>(true, cfg.backward, sv.in, dO, dht, d, sv.scale);
  if (sv.in.r.device().is_cpu())
    return sv.in.r.dtype() == DType::f64 ? cpu_backward<double>(false, cfg.backward, sv.in, dO, dht, d, sv.scale)
                                         : cpu_backward<float>(false, cfg.backward, sv.in, dO, dht, d, sv.scale);
#if LINTRAIN_WITH_CUDA
  return cuda_backward(sv, dO, dht);
#else
  fail("CUDA tensors in a build without CUDA");
#endif
}

}  // namespace lt::mixers
