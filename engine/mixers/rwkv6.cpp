// RWKV6 mixer on Tensors: path selection, the ops path (engine ops only), and the glue to
// the naive recurrence, the CPU twins and the CUDA kernels. See engine/mixers/rwkv6.h.
#include "engine/mixers/rwkv6.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "engine/device.h"
#include "engine/ops.h"

namespace lt::mixers {

namespace {

using rwkv6::BwdImpl;
using rwkv6::Dims;

[[noreturn]] void fail(const std::string& why) { throw std::invalid_argument("rwkv6: " + why); }

// Shape checks shared by every path; returns the dims.
Dims check_inputs(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& u,
                  const Tensor& h0, const Rwkv6Options& opt) {
  if (!r.defined() || !k.defined() || !v.defined() || !w.defined() || !u.defined()) fail("r, k, v, w, u are required");
  if (r.dim() != 4) fail("r must be [B, T, H, D], got " + shape_str(r.shape()));
  for (const Tensor* t : {&k, &v, &w})
    if (t->shape() != r.shape()) fail("k, v, w must have r's shape " + shape_str(r.shape()) + ", got " + shape_str(t->shape()));
  for (const Tensor* t : {&k, &v, &w})
    if (t->dtype() != r.dtype() || !(t->device() == r.device())) fail("r, k, v, w must share dtype and device");
  if (!is_floating(r.dtype())) fail("inputs must be a float dtype");
  Dims d{r.size(0), r.size(1), r.size(2), r.size(3), opt.chunk};
  if (opt.chunk != 16 && opt.chunk != 32 && opt.chunk != 64) fail("chunk must be 16, 32 or 64");
  if (u.shape() != Shape{d.H, d.D}) fail("u must be [H, D] = " + shape_str({d.H, d.D}) + ", got " + shape_str(u.shape()));
  if (h0.defined() && h0.shape() != Shape{d.B, d.H, d.D, d.D})
    fail("h0 must be [B, H, D, D], got " + shape_str(h0.shape()));
  return d;
}

double scale_of(const Dims& d, const Rwkv6Options& opt) {
  return opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d.D));
}

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
};

OpsChunk ops_forward_chunks(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& u,
                            const Tensor& h0, const Dims& d, double scale, DType ct) {
  OpsChunk c;
  const int64_t C = d.chunk, NT = d.num_chunks();
  const Device dev = r.device();
  c.q = to_chunks(r, C, ct);
  c.k = to_chunks(k, C, ct);
  c.v = to_chunks(v, C, ct);
  c.w = to_chunks(w, C, ct);
  c.gi = ops::cumsum(c.w, 3);                 // chunk-local, sequential per column
  c.ge = c.gi - c.w;
  c.gamma = c.gi.narrow(3, C - 1, 1);
  // Exponentials of the masked differences: the strict lower triangle only, so every
  // argument is <= 0 and the masked-out ones are -inf (exp -> 0): no inf * 0 anywhere.
  Tensor diff = c.ge.unsqueeze(4) - c.gi.unsqueeze(3);  // [B,H,NT,C(r),C(s),D]
  Tensor strict = ops::tril(Tensor::full({C, C}, 1.0, ct, dev), -1).unsqueeze(-1);  // [C,C,1]
  Tensor neg_inf = Tensor::full({}, -std::numeric_limits<double>::infinity(), ct, dev);
  c.E = ops::exp(ops::where(strict, diff, neg_inf));
  c.ub = u.to(ct).contiguous().view({1, d.H, 1, 1, d.D});
  c.eyeC = ops::eye(C, ct, dev);
  Tensor A = ops::sum(c.q.unsqueeze(4) * c.k.unsqueeze(3) * c.E, -1);  // [B,H,NT,C,C]
  Tensor bonus = ops::sum(c.q * c.ub * c.k, -1).unsqueeze(-1);        // [B,H,NT,C,1]
  c.A = (A + bonus * c.eyeC) * scale;
  // Inter-chunk states: S_{n+1} = e^gamma . S_n + (K e^{gamma - Gi})^T V, a host loop.
  c.kd = c.k * ops::exp(c.gamma - c.gi);
  Tensor U = ops::matmul(c.kd, c.v, true, false);  // [B,H,NT,D,D]
  c.egT = ops::exp(c.gamma).transpose(-1, -2);     // [B,H,NT,D,1]
  Tensor S = h0.defined() ? h0.to(ct).contiguous() : Tensor::zeros({d.B, d.H, d.D, d.D}, ct, dev);
  std::vector<Tensor> hs;
  for (int64_t n = 0; n < NT; ++n) {
    hs.push_back(S.unsqueeze(2));
    S = c.egT.select(2, n) * S + U.select(2, n);
  }
  c.h = ops::cat(hs, 2);
  c.ht = S;
  return c;
}

DType compute_dtype(const Tensor& x) { return x.dtype() == DType::f64 ? DType::f64 : DType::f32; }

Rwkv6Out ops_forward(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& u,
                     const Tensor& h0, const Dims& d, double scale) {
  const DType ct = compute_dtype(r);
  OpsChunk c = ops_forward_chunks(r, k, v, w, u, h0, d, scale, ct);
  Tensor O = ops::matmul(c.q * ops::exp(c.ge), c.h) * scale + ops::matmul(c.A, c.v);
  Rwkv6Out out;
  out.o = from_chunks(O, d.T, r.dtype());
  out.ht = ops::convert(c.ht, DType::f32);
  return out;
}

Rwkv6Grads ops_backward(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& u,
                        const Tensor& h0, const Tensor& dout, const Tensor& dht, const Dims& d, double scale) {
  const DType ct = compute_dtype(r);
  const int64_t C = d.chunk, NT = d.num_chunks();
  const Device dev = r.device();
  OpsChunk c = ops_forward_chunks(r, k, v, w, u, h0, d, scale, ct);
  Tensor dO = to_chunks(dout, C, ct);
  Tensor dP = ops::tril(ops::matmul(dO, c.v, false, true), 0) * scale;  // [B,H,NT,C,C]
  // Reverse scan: dh[n] = gradient of the state leaving chunk n.
  Tensor G = ops::matmul(c.q * ops::exp(c.ge) * scale, dO, true, false);  // [B,H,NT,D,D]
  Tensor Sp = dht.defined() ? dht.to(ct).contiguous() : Tensor::zeros({d.B, d.H, d.D, d.D}, ct, dev);
  std::vector<Tensor> dhs(NT);
  for (int64_t n = NT - 1; n >= 0; --n) {
    dhs[n] = Sp.unsqueeze(2);
    Sp = c.egT.select(2, n) * Sp + G.select(2, n);
  }
  Tensor dh = ops::cat(dhs, 2);
  Tensor dV = ops::matmul(c.A, dO, true, false) + ops::matmul(c.kd, dh);
  Tensor dqS = ops::matmul(dO, c.h, false, true);   // (dO h^T)
  Tensor dkS = ops::matmul(c.v, dh, false, true);   // (V dh^T)
  Tensor dPs = ops::tril(dP, -1).unsqueeze(-1);     // strict lower, [B,H,NT,C,C,1]
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
  g.dr = from_chunks(dq, d.T, r.dtype());
  g.dk = from_chunks(dk, d.T, r.dtype());
  g.dv = from_chunks(dV, d.T, r.dtype());
  g.dw = from_chunks(dw, d.T, r.dtype());
  g.du = ops::convert(du, u.dtype());
  g.dh0 = ops::convert(Sp, DType::f32);
  return g;
}

// ---------------------------------------------------------------------------------------
// Naive recurrence and CPU twins: host vectors in double (naive) or F (twins).
template <class F>
std::vector<F> host(const Tensor& x) {
  std::vector<double> v = x.to_vector();
  return std::vector<F>(v.begin(), v.end());
}
template <class F>
Tensor tensor_of(const std::vector<F>& v, const Shape& shape, DType dtype, Device dev) {
  return Tensor::from_vector(std::vector<double>(v.begin(), v.end()), shape, dtype, dev);
}

template <class F>
Rwkv6Out cpu_forward(bool naive, const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w,
                     const Tensor& u, const Tensor& h0, const Dims& d, double scale) {
  auto R = host<F>(r), K = host<F>(k), V = host<F>(v), W = host<F>(w), U = host<F>(u);
  std::vector<F> H0 = h0.defined() ? host<F>(h0) : std::vector<F>();
  std::vector<F> o(d.tokens_numel()), ht(d.state_numel());
  const F* h0p = h0.defined() ? H0.data() : nullptr;
  if (naive)
    rwkv6::naive_forward<F>(d, static_cast<F>(scale), R.data(), K.data(), V.data(), W.data(), U.data(), h0p, o.data(), ht.data());
  else
    rwkv6::chunk_forward_cpu<F>(d, static_cast<F>(scale), R.data(), K.data(), V.data(), W.data(), U.data(), h0p, o.data(),
                                ht.data());
  Rwkv6Out out;
  out.o = tensor_of(o, r.shape(), r.dtype(), r.device());
  out.ht = tensor_of(ht, {d.B, d.H, d.D, d.D}, DType::f32, r.device());
  return out;
}

template <class F>
Rwkv6Grads cpu_backward(bool naive, bool fused, const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w,
                        const Tensor& u, const Tensor& h0, const Tensor& dout, const Tensor& dht, const Dims& d,
                        double scale) {
  auto R = host<F>(r), K = host<F>(k), V = host<F>(v), W = host<F>(w), U = host<F>(u), dO = host<F>(dout);
  std::vector<F> H0 = h0.defined() ? host<F>(h0) : std::vector<F>();
  std::vector<F> DHT = dht.defined() ? host<F>(dht) : std::vector<F>();
  const F* h0p = h0.defined() ? H0.data() : nullptr;
  const F* dhtp = dht.defined() ? DHT.data() : nullptr;
  const int64_t n = d.tokens_numel();
  std::vector<F> dr(n), dk(n), dv(n), dw(n), du(d.H * d.D), dh0(d.state_numel());
  if (naive)
    rwkv6::naive_backward<F>(d, static_cast<F>(scale), R.data(), K.data(), V.data(), W.data(), U.data(), h0p, dO.data(),
                             dhtp, dr.data(), dk.data(), dv.data(), dw.data(), du.data(), dh0.data());
  else
    rwkv6::chunk_backward_cpu<F>(d, fused, static_cast<F>(scale), R.data(), K.data(), V.data(), W.data(), U.data(), h0p,
                                 dO.data(), dhtp, dr.data(), dk.data(), dv.data(), dw.data(), du.data(), dh0.data());
  Rwkv6Grads g;
  const Device dev = r.device();
  g.dr = tensor_of(dr, r.shape(), r.dtype(), dev);
  g.dk = tensor_of(dk, r.shape(), r.dtype(), dev);
  g.dv = tensor_of(dv, r.shape(), r.dtype(), dev);
  g.dw = tensor_of(dw, r.shape(), r.dtype(), dev);
  g.du = tensor_of(du, u.shape(), u.dtype(), dev);
  g.dh0 = tensor_of(dh0, {d.B, d.H, d.D, d.D}, DType::f32, dev);
  return g;
}

// ---------------------------------------------------------------------------------------
// CUDA: raw kernels, every buffer a Tensor from the caching allocator.
#if LINTRAIN_WITH_CUDA
rwkv6::CudaArgs cuda_inputs(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& u32,
                            const Tensor& h0, const Dims& d, double scale) {
  if (r.dtype() != DType::f32 && r.dtype() != DType::bf16) fail("the CUDA kernels take f32 or bf16 (use the ops path)");
  if (d.D % 64 != 0) fail("the CUDA kernels need D % 64 == 0, got " + std::to_string(d.D));
  rwkv6::CudaArgs a;
  a.dims = d;
  a.dtype = r.dtype();
  a.scale = static_cast<float>(scale);
  a.r = r.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr(), a.w = w.data_ptr();
  a.u = u32.data<float>();
  a.h0 = h0.defined() ? h0.data<float>() : nullptr;
  return a;
}

struct CudaIn {
  Tensor r, k, v, w, u, h0, dout, dht;  // contiguous; u, h0, dht fp32
};
CudaIn cuda_prepare(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& u,
                    const Tensor& h0, const Tensor& dout, const Tensor& dht) {
  CudaIn in;
  in.r = r.contiguous(), in.k = k.contiguous(), in.v = v.contiguous(), in.w = w.contiguous();
  in.u = u.to(DType::f32).contiguous();
  if (h0.defined()) in.h0 = h0.to(DType::f32).contiguous();
  if (dout.defined()) in.dout = dout.to(r.dtype()).contiguous();
  if (dht.defined()) in.dht = dht.to(DType::f32).contiguous();
  return in;
}

Rwkv6Out cuda_forward(const CudaIn& in, const Dims& d, double scale, bool keep_states) {
  const Device dev = in.r.device();
  rwkv6::CudaArgs a = cuda_inputs(in.r, in.k, in.v, in.w, in.u, in.h0, d, scale);
  Rwkv6Out out;
  out.o = Tensor::empty(in.r.shape(), in.r.dtype(), dev);
  out.ht = Tensor::empty({d.B, d.H, d.D, d.D}, DType::f32, dev);
  Tensor h = Tensor::empty({d.B, d.H, d.num_chunks(), d.D, d.D}, DType::f32, dev);
  a.o = out.o.data_ptr(), a.ht = out.ht.data<float>(), a.h = h.data<float>();
  rwkv6::cuda_forward(a, current_stream(dev).handle());
  if (keep_states) out.h = h;
  return out;
}

Rwkv6Grads cuda_backward(const CudaIn& in, const Tensor& u_orig, const Dims& d, double scale, BwdImpl impl,
                         const Tensor& saved_h) {
  const Device dev = in.r.device();
  rwkv6::CudaArgs a = cuda_inputs(in.r, in.k, in.v, in.w, in.u, in.h0, d, scale);
  a.dout = in.dout.data_ptr();
  a.dht = in.dht.defined() ? in.dht.data<float>() : nullptr;
  Rwkv6Grads g;
  g.dr = Tensor::empty(in.r.shape(), in.r.dtype(), dev);
  g.dk = Tensor::empty(in.r.shape(), in.r.dtype(), dev);
  g.dv = Tensor::empty(in.r.shape(), in.r.dtype(), dev);
  g.dw = Tensor::empty(in.r.shape(), in.r.dtype(), dev);
  Tensor du = Tensor::empty({d.H, d.D}, DType::f32, dev);
  g.dh0 = Tensor::empty({d.B, d.H, d.D, d.D}, DType::f32, dev);
  const bool h_valid = saved_h.defined();
  if (h_valid && (saved_h.shape() != Shape{d.B, d.H, d.num_chunks(), d.D, d.D} || saved_h.dtype() != DType::f32 ||
                  !saved_h.is_contiguous()))
    fail("saved_h must be the forward's contiguous fp32 [B, H, NT, D, D] states");
  // Scratch (all from the caching allocator; freed when these Tensors go out of scope).
  Tensor h = h_valid ? saved_h : Tensor::empty({d.B, d.H, d.num_chunks(), d.D, d.D}, DType::f32, dev);
  Tensor dh = Tensor::empty({d.B, d.H, d.num_chunks(), d.D, d.D}, DType::f32, dev);
  Tensor du_part = Tensor::empty({d.B, d.num_chunks(), d.H, d.D}, DType::f32, dev);
  Tensor dq_tmp, dk_tmp;
  if (impl == BwdImpl::kFallback) {
    dq_tmp = Tensor::empty(in.r.shape(), DType::f32, dev);
    dk_tmp = Tensor::empty(in.r.shape(), DType::f32, dev);
    a.dq_tmp = dq_tmp.data<float>(), a.dk_tmp = dk_tmp.data<float>();
  }
  a.dr = g.dr.data_ptr(), a.dk = g.dk.data_ptr(), a.dv = g.dv.data_ptr(), a.dw = g.dw.data_ptr();
  a.du = du.data<float>(), a.dh0 = g.dh0.data<float>();
  a.h = h.data<float>(), a.dh = dh.data<float>(), a.du_part = du_part.data<float>();
  rwkv6::cuda_backward(a, impl, h_valid, current_stream(dev).handle());
  g.du = u_orig.dtype() == DType::f32 ? du : du.to(u_orig.dtype());
  return g;
}

using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int>;
std::mutex g_autotune_mutex;
std::map<ShapeKey, BwdImpl> g_autotune;

BwdImpl autotune(const CudaIn& in, const Tensor& u, const Dims& d, double scale, const Tensor& saved_h) {
  const ShapeKey key{d.B, d.T, d.H, d.D, d.chunk, static_cast<int>(in.r.dtype()), saved_h.defined() ? 1 : 0};
  {
    std::lock_guard<std::mutex> lock(g_autotune_mutex);
    auto it = g_autotune.find(key);
    if (it != g_autotune.end()) return it->second;
  }
  const Device dev = in.r.device();
  auto time_of = [&](BwdImpl impl) {
    cuda_backward(in, u, d, scale, impl, saved_h);  // warm-up (and module load)
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
      synchronize(dev);
      const auto t0 = std::chrono::steady_clock::now();
      cuda_backward(in, u, d, scale, impl, saved_h);
      synchronize(dev);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const double fused = time_of(BwdImpl::kFused), fallback = time_of(BwdImpl::kFallback);
  const BwdImpl best = fallback < fused ? BwdImpl::kFallback : BwdImpl::kFused;
  std::lock_guard<std::mutex> lock(g_autotune_mutex);
  g_autotune[key] = best;
  return best;
}
#endif

}  // namespace

const char* rwkv6_path_name(Rwkv6Path p) {
  switch (p) {
    case Rwkv6Path::naive: return "naive";
    case Rwkv6Path::ops: return "ops";
    case Rwkv6Path::fused: return "fused";
    case Rwkv6Path::fallback: return "fallback";
    case Rwkv6Path::autotune: return "autotune";
  }
  return "?";
}

Rwkv6Path parse_rwkv6_path(const std::string& name) {
  for (Rwkv6Path p : {Rwkv6Path::naive, Rwkv6Path::ops, Rwkv6Path::fused, Rwkv6Path::fallback, Rwkv6Path::autotune})
    if (name == rwkv6_path_name(p)) return p;
  throw std::invalid_argument("rwkv6: unknown path '" + name + "' (naive, ops, fused, fallback, autotune)");
}

Rwkv6Out rwkv6_forward(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& u,
                       const Tensor& h0, const Rwkv6Options& opt) {
  const Dims d = check_inputs(r, k, v, w, u, h0, opt);
  const double scale = scale_of(d, opt);
  if (opt.path == Rwkv6Path::ops) return ops_forward(r, k, v, w, u, h0, d, scale);
  if (opt.path == Rwkv6Path::naive) {
    if (!r.device().is_cpu()) fail("the naive path runs on the CPU only");
    return cpu_forward<double>(true, r, k, v, w, u, h0, d, scale);
  }
  if (r.device().is_cpu())
    return r.dtype() == DType::f64 ? cpu_forward<double>(false, r, k, v, w, u, h0, d, scale)
                                   : cpu_forward<float>(false, r, k, v, w, u, h0, d, scale);
#if LINTRAIN_WITH_CUDA
  CudaIn in = cuda_prepare(r, k, v, w, u, h0, Tensor(), Tensor());
  return cuda_forward(in, d, scale, opt.keep_states);
#else
  fail("CUDA tensors in a build without CUDA");
#endif
}

Rwkv6Grads rwkv6_backward(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& u,
                          const Tensor& h0, const Tensor& dout, const Tensor& dht, const Rwkv6Options& opt,
                          const Tensor& saved_h) {
  const Dims d = check_inputs(r, k, v, w, u, h0, opt);
  if (!dout.defined() || dout.shape() != r.shape()) fail("dout must have r's shape");
  if (dht.defined() && dht.shape() != Shape{d.B, d.H, d.D, d.D}) fail("dht must be [B, H, D, D]");
  const double scale = scale_of(d, opt);
  if (opt.path == Rwkv6Path::ops) return ops_backward(r, k, v, w, u, h0, dout.to(r.dtype()), dht, d, scale);
  if (opt.path == Rwkv6Path::naive) {
    if (!r.device().is_cpu()) fail("the naive path runs on the CPU only");
    return cpu_backward<double>(true, true, r, k, v, w, u, h0, dout, dht, d, scale);
  }
  if (r.device().is_cpu()) {
    const bool fused = opt.path != Rwkv6Path::fallback;
    return r.dtype() == DType::f64 ? cpu_backward<double>(false, fused, r, k, v, w, u, h0, dout, dht, d, scale)
                                   : cpu_backward<float>(false, fused, r, k, v, w, u, h0, dout, dht, d, scale);
  }
#if LINTRAIN_WITH_CUDA
  CudaIn in = cuda_prepare(r, k, v, w, u, h0, dout, dht);
  BwdImpl impl = opt.path == Rwkv6Path::fallback ? BwdImpl::kFallback : BwdImpl::kFused;
  if (opt.path == Rwkv6Path::autotune) impl = autotune(in, u, d, scale, saved_h);
  return cuda_backward(in, u, d, scale, impl, saved_h);
#else
  (void)saved_h;
  fail("CUDA tensors in a build without CUDA");
#endif
}

BwdImpl rwkv6_autotune_choice(const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& u,
                              const Tensor& h0, const Tensor& dout, const Tensor& dht, const Rwkv6Options& opt) {
  const Dims d = check_inputs(r, k, v, w, u, h0, opt);
  if (r.device().is_cpu()) return BwdImpl::kFused;
#if LINTRAIN_WITH_CUDA
  CudaIn in = cuda_prepare(r, k, v, w, u, h0, dout, dht);
  return autotune(in, u, d, scale_of(d, opt), Tensor());
#else
  (void)d, (void)dout, (void)dht;
  fail("CUDA tensors in a build without CUDA");
#endif
}

}  // namespace lt::mixers
