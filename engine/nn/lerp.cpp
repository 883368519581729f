// RWKV6's fused token-shift interpolations (engine/nn/lerp.h): checks, contiguous inputs,
// fresh contiguous outputs, then the lerp kernel family (kernels/lerp.h).
#include "engine/nn/lerp.h"

#include <stdexcept>
#include <string>

#include "engine/detail.h"
#include "engine/ops.h"
#include "kernels/lerp.h"

namespace lt::nn {
namespace {

using kern::LerpOp;

DType compute_dtype(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

void check_act(const Tensor& t, const Tensor& like, const char* op, const char* what) {
  detail::check_defined(t, op);
  detail::check_float(t, op);
  detail::check_same_device(like, t, op);
  detail::check_same_dtype(like, t, op);
  if (t.shape() != like.shape())
    throw std::invalid_argument(std::string(op) + ": " + what + " " + shape_str(t.shape()) + " does not match " +
                                shape_str(like.shape()));
}

// A parameter in the compute type of `like`'s dtype, with `numel` elements, contiguous.
Tensor param(const Tensor& t, const Tensor& like, int64_t numel, const char* op, const char* what) {
  detail::check_defined(t, op);
  detail::check_same_device(like, t, op);
  if (t.numel() != numel)
    throw std::invalid_argument(std::string(op) + ": " + what + " " + shape_str(t.shape()) + " must have " +
                                std::to_string(numel) + " elements");
  const DType want = compute_dtype(like.dtype());
  return (t.dtype() == want ? t : t.to(want)).contiguous();
}

void check_sequence(const Tensor& a, const char* op) {
  if (a.dim() != 3) throw std::invalid_argument(std::string(op) + ": expected [B, T, d], got " + shape_str(a.shape()));
}

void run(LerpOp op, kern::LerpParams& p, const Tensor& a) {
  p.n = a.numel();
  p.T = a.size(1);
  p.d = a.size(2);
  if (p.n == 0) return;
  detail::Exec ex(a.device());
  ex.k.lerp(op, a.dtype(), p, ex.stream);
}

// positions: undefined, or [B*T] i32 on a's device (contiguous); its pointer, kept alive by the caller.
const int32_t* document_positions(const Tensor& positions, const Tensor& a, const char* op) {
  if (!positions.defined()) return nullptr;
  if (positions.dtype() != DType::i32 || positions.numel() != a.size(0) * a.size(1) ||
      !(positions.device() == a.device()) || !positions.is_contiguous())
    throw std::invalid_argument(std::string(op) + ": positions must be [B*T] = [" +
                                std::to_string(a.size(0) * a.size(1)) + "] contiguous i32 on a's device, got " +
                                shape_str(positions.shape()) + " " + dtype_name(positions.dtype()));
  return positions.data<int32_t>();
}

}  // namespace

ShiftMixOut shift_mix_forward(const Tensor& a, const std::vector<Tensor>& mus, const Tensor& positions) {
  const char* op = "shift_mix_forward";
  detail::check_defined(a, op);
  detail::check_float(a, op);
  check_sequence(a, op);
  if (mus.empty() || mus.size() > static_cast<size_t>(kern::kMaxMix))
    throw std::invalid_argument(std::string(op) + ": 1 or 2 mu, got " + std::to_string(mus.size()));
  const Tensor ac = a.contiguous();
  std::vector<Tensor> mu;
  ShiftMixOut r;
  r.delta = Tensor::empty(a.shape(), a.dtype(), a.device());
  kern::LerpParams p;
  p.nmix = static_cast<int>(mus.size());
  p.pos = document_positions(positions, a, op);
  p.a = ac.data_ptr();
  p.delta = r.delta.data_ptr();
  for (size_t j = 0; j < mus.size(); ++j) {
    mu.push_back(param(mus[j], a, a.size(2), op, "mu"));
    r.out.push_back(Tensor::empty(a.shape(), a.dtype(), a.device()));
    p.mu[j] = mu[j].data_ptr();
    p.out[j] = r.out[j].data_ptr();
  }
  run(LerpOp::shift_mix, p, a);
  return r;
}

Tensor shift_mix_backward(const std::vector<Tensor>& douts, const Tensor& delta, const std::vector<Tensor>& mus,
                          const Tensor& ddelta_in, const Tensor& da_in, std::vector<Tensor*> dmus,
                          const Tensor& positions) {
  const char* op = "shift_mix_backward";
  detail::check_defined(delta, op);
  detail::check_float(delta, op);
  check_sequence(delta, op);
  if (douts.empty() || douts.size() > static_cast<size_t>(kern::kMaxMix) || mus.size() != douts.size() ||
      dmus.size() != douts.size())
    throw std::invalid_argument(std::string(op) + ": 1 or 2 (dout, mu, dmu), got " + std::to_string(douts.size()) +
                                ", " + std::to_string(mus.size()) + ", " + std::to_string(dmus.size()));
  std::vector<Tensor> keep;  // contiguous operands alive through the launch
  auto in = [&](const Tensor& t, const char* what) -> const void* {
    check_act(t, delta, op, what);
    keep.push_back(t.contiguous());
    return keep.back().data_ptr();
  };
  kern::LerpParams p;
  p.backward = true;
  p.nmix = static_cast<int>(douts.size());
  p.pos = document_positions(positions, delta, op);
  std::vector<Tensor> mu;
  for (size_t j = 0; j < douts.size(); ++j) {
    p.dout[j] = in(douts[j], "dout");
    mu.push_back(param(mus[j], delta, delta.size(2), op, "mu"));
    p.mu[j] = mu[j].data_ptr();
  }
  if (ddelta_in.defined()) p.ddelta_in = in(ddelta_in, "ddelta_in");
  if (da_in.defined()) p.da_in = in(da_in, "da_in");
  Tensor da = Tensor::empty(delta.shape(), delta.dtype(), delta.device());
  p.da = da.data_ptr();
  run(LerpOp::shift_mix, p, delta);
  // dmu_j += sum over tokens of dout_j delta (one pass, the products summed in dmu's f32 / f64)
  ops::column_sums_into(dmus, douts, std::vector<Tensor>(douts.size(), delta));
  return da;
}

Lerp5Out lerp5_forward(const Tensor& a, const Tensor& delta, Tensor mraw, const Tensor& bias, bool in_place) {
  const char* op = "lerp5_forward";
  detail::check_defined(a, op);
  detail::check_float(a, op);
  check_sequence(a, op);
  check_act(delta, a, op, "delta");
  const int64_t N = a.size(0) * a.size(1), d = a.size(2), K = kern::kLerpSlices;
  detail::check_defined(mraw, op);
  detail::check_same_dtype(a, mraw, op);
  detail::check_same_device(a, mraw, op);
  if (mraw.shape() != Shape{K, N, d})
    throw std::invalid_argument(std::string(op) + ": mraw " + shape_str(mraw.shape()) + " must be [5, " +
                                std::to_string(N) + ", " + std::to_string(d) + "]");
  const Tensor b = param(bias, a, K * d, op, "bias");
  const Tensor ac = a.contiguous(), dc = delta.contiguous();
  Lerp5Out r;
  r.m = in_place && mraw.is_contiguous() ? mraw : Tensor::empty(mraw.shape(), a.dtype(), a.device());
  if (!mraw.is_contiguous()) mraw = mraw.contiguous();
  r.xl = Tensor::empty(mraw.shape(), a.dtype(), a.device());
  kern::LerpParams p;
  p.a = ac.data_ptr();
  p.delta = dc.data_ptr();
  p.mraw = mraw.data_ptr();
  p.bias = b.data_ptr();
  p.m = r.m.data_ptr();
  p.xl = r.xl.data_ptr();
  run(LerpOp::lerp5, p, a);
  return r;
}

Lerp5Grads lerp5_backward(const std::vector<Tensor>& dxl, const Tensor& delta, const Tensor& m) {
  const char* op = "lerp5_backward";
  detail::check_defined(delta, op);
  detail::check_float(delta, op);
  check_sequence(delta, op);
  const int64_t N = delta.size(0) * delta.size(1), d = delta.size(2), K = kern::kLerpSlices;
  if (dxl.size() != static_cast<size_t>(K))
    throw std::invalid_argument(std::string(op) + ": 5 dxl, got " + std::to_string(dxl.size()));
  detail::check_defined(m, op);
  detail::check_same_dtype(delta, m, op);
  detail::check_same_device(delta, m, op);
  if (m.shape() != Shape{K, N, d})
    throw std::invalid_argument(std::string(op) + ": m " + shape_str(m.shape()) + " must be [5, " + std::to_string(N) +
                                ", " + std::to_string(d) + "]");
  std::vector<Tensor> keep;
  kern::LerpParams p;
  p.backward = true;
  for (int k = 0; k < K; ++k) {
    check_act(dxl[k], delta, op, "dxl");
    keep.push_back(dxl[k].contiguous());
    p.dxl[k] = keep.back().data_ptr();
  }
  const Tensor dc = delta.contiguous(), mc = m.contiguous();
  Lerp5Grads g;
  g.da = Tensor::empty(delta.shape(), delta.dtype(), delta.device());
  g.ddelta = Tensor::empty(delta.shape(), delta.dtype(), delta.device());
  g.dm = Tensor::empty(m.shape(), delta.dtype(), delta.device());
  p.delta = dc.data_ptr();
  p.m = mc.data_ptr();
  p.da = g.da.data_ptr();
  p.ddelta = g.ddelta.data_ptr();
  p.dm = g.dm.data_ptr();
  run(LerpOp::lerp5, p, delta);
  return g;
}

}  // namespace lt::nn
