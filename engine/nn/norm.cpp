// Normalisation layers (engine/nn/norm.h): shape, dtype and device checks, then one call of
// the row-norm kernel family (kernels/norm.h) per pass. Every form is the generic row norm:
//                   center  bias  gate  period P   row length L
//   rms_norm        no      no    no    1          x.size(-1)
//   layer_norm      yes     yes   no    1          x.size(-1)
//   group_norm      yes     yes   no    H          D            (x [..., H, D])
//   gated_rms_norm  no      no    yes   1          D            (x, g [..., D])
// Inputs that are not contiguous are copied; outputs are fresh contiguous tensors; dw and db
// must be contiguous (they are views into the gradient arena).
#include "engine/nn/norm.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/detail.h"
#include "kernels/norm.h"

namespace lt::nn {
namespace {

struct NormForm {
  const char* op;
  bool center, bias, gate;
  bool per_head;  // x [..., H, D], weights [H, D]
};
constexpr NormForm kRms{"rms_norm", false, false, false, false};
constexpr NormForm kLayer{"layer_norm", true, true, false, false};
constexpr NormForm kGroup{"group_norm", true, true, false, true};
constexpr NormForm kGated{"gated_rms_norm", false, false, true, false};

std::string desc(const Tensor& t) {
  return shape_str(t.shape()) + " " + dtype_name(t.dtype()) + " " + t.device().str();
}

// Weights, statistics and their gradients: f64 for f64 activations, f32 otherwise.
DType param_dtype(DType act) { return act == DType::f64 ? DType::f64 : DType::f32; }

void fail(const std::string& op, const std::string& msg) { throw std::invalid_argument(op + ": " + msg); }

void check_activation(const Tensor& x, const std::string& op, const char* name) {
  if (!x.defined()) fail(op, std::string(name) + " is undefined");
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16 && x.dtype() != DType::f64)
    fail(op, std::string(name) + " " + desc(x) + ": dtype must be f32, bf16 or f64");
}

// t must have x's shape, dtype and device.
void check_like(const Tensor& t, const Tensor& x, const std::string& op, const char* name) {
  if (!t.defined()) fail(op, std::string(name) + " is undefined");
  if (t.shape() != x.shape() || t.dtype() != x.dtype() || t.device() != x.device())
    fail(op, std::string(name) + " " + desc(t) + " must match x " + desc(x));
}

// A parameter, statistic or gradient: exactly `shape`, x's parameter dtype, x's device.
void check_param(const Tensor& t, const Shape& shape, const Tensor& x, const std::string& op, const char* name) {
  if (!t.defined()) fail(op, std::string(name) + " is undefined");
  const DType dt = param_dtype(x.dtype());
  if (t.shape() != shape || t.dtype() != dt || t.device() != x.device())
    fail(op, std::string(name) + " " + desc(t) + " must be " + shape_str(shape) + " " + dtype_name(dt) + " " +
                 x.device().str() + " (x " + desc(x) + ")");
}

void check_grad(const Tensor& t, const Shape& shape, const Tensor& x, const std::string& op, const char* name) {
  check_param(t, shape, x, op, name);
  if (!t.is_contiguous())
    fail(op, std::string(name) + " " + desc(t) + " must be contiguous (it is accumulated in place)");
}

// The row layout of x: L per row, period P, weight shape [P, L] as the caller passes it.
struct Rows {
  int64_t L = 0, P = 1, N = 0;
  Shape weight_shape;
};

Rows rows_of(const NormForm& f, const Tensor& x, const std::string& op) {
  Rows r;
  if (f.per_head) {
    if (x.dim() < 2) fail(op, "x " + desc(x) + " must be [..., H, D]");
    r.P = x.size(-2);
    r.L = x.size(-1);
    r.weight_shape = {r.P, r.L};
  } else {
    if (x.dim() < 1) fail(op, "x " + desc(x) + " must have at least one dim");
    r.L = x.size(-1);
    r.weight_shape = {r.L};
  }
  if (r.L == 0 || r.P == 0) fail(op, "x " + desc(x) + " has empty rows");
  r.N = x.numel() / r.L;
  return r;
}

NormOut norm_forward(const NormForm& f, const Tensor& x, const Tensor* g, const Tensor& w, const Tensor* b,
                     double eps) {
  const std::string op = std::string(f.op) + "_forward";
  check_activation(x, op, "x");
  const Rows r = rows_of(f, x, op);
  if (g) check_like(*g, x, op, "g");
  check_param(w, r.weight_shape, x, op, "w");
  if (b) check_param(*b, r.weight_shape, x, op, "b");
  if (!(eps >= 0.0) || !std::isfinite(eps)) fail(op, "eps " + std::to_string(eps) + " must be finite and >= 0");

  const DType pd = param_dtype(x.dtype());
  NormOut out;
  out.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  out.stats.rstd = Tensor::empty({r.N}, pd, x.device());
  if (f.center) out.stats.mean = Tensor::empty({r.N}, pd, x.device());
  if (r.N == 0) return out;

  const Tensor xc = x.contiguous(), wc = w.contiguous();
  const Tensor gc = g ? g->contiguous() : Tensor(), bc = b ? b->contiguous() : Tensor();
  kern::NormParams p;
  p.rows = r.N;
  p.len = r.L;
  p.period = r.P;
  p.center = f.center;
  p.bias = f.bias;
  p.gate = f.gate;
  p.eps = eps;
  p.x = xc.data_ptr();
  p.g = g ? gc.data_ptr() : nullptr;
  p.w = wc.data_ptr();
  p.b = b ? bc.data_ptr() : nullptr;
  p.y = out.y.data_ptr();
  p.mean = f.center ? out.stats.mean.data_ptr() : nullptr;
  p.rstd = out.stats.rstd.data_ptr();
  detail::Exec ex(x.device());
  ex.k.norm(kern::NormPass::forward, x.dtype(), p, ex.stream);
  return out;
}

// Returns dx; writes dg when the form is gated; accumulates dw (and db).
Tensor norm_backward(const NormForm& f, const Tensor& dy, const Tensor& x, const Tensor* g, const Tensor& w,
                     const Tensor* b, const NormStats& s, Tensor& dw, Tensor* db, Tensor* dg,
                     const Tensor& dres = Tensor()) {
  const std::string op = std::string(f.op) + "_backward";
  check_activation(x, op, "x");
  const Rows r = rows_of(f, x, op);
  check_like(dy, x, op, "dy");
  if (dres.defined()) check_like(dres, x, op, "dres");
  if (g) check_like(*g, x, op, "g");
  check_param(w, r.weight_shape, x, op, "w");
  if (b) check_param(*b, r.weight_shape, x, op, "b");
  check_param(s.rstd, {r.N}, x, op, "stats.rstd");
  if (f.center) check_param(s.mean, {r.N}, x, op, "stats.mean");
  check_grad(dw, r.weight_shape, x, op, "dw");
  if (db) check_grad(*db, r.weight_shape, x, op, "db");

  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (dg) *dg = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (r.N == 0) return dx;

  const Tensor xc = x.contiguous(), dyc = dy.contiguous(), wc = w.contiguous();
  const Tensor dresc = dres.defined() ? dres.contiguous() : Tensor();
  const Tensor gc = g ? g->contiguous() : Tensor(), bc = b ? b->contiguous() : Tensor();
  const Tensor rstd = s.rstd.contiguous(), mean = f.center ? s.mean.contiguous() : Tensor();
  const int64_t nacc = f.bias ? 2 : 1;
  // [G, nacc, L]: per-slot weight-gradient partials (kernels/norm.h)
  Tensor scratch = Tensor::empty({kern::norm_weight_slots(r.N, r.P) * nacc * r.L}, param_dtype(x.dtype()), x.device());
  kern::NormParams p;
  p.rows = r.N;
  p.len = r.L;
  p.period = r.P;
  p.center = f.center;
  p.bias = f.bias;
  p.gate = f.gate;
  p.x = xc.data_ptr();
  p.g = g ? gc.data_ptr() : nullptr;
  p.w = wc.data_ptr();
  p.b = b ? bc.data_ptr() : nullptr;
  p.mean = f.center ? mean.data_ptr() : nullptr;
  p.rstd = rstd.data_ptr();
  p.dy = dyc.data_ptr();
  p.dx = dx.data_ptr();
  p.dres = dres.defined() ? dresc.data_ptr() : nullptr;
  p.dg = dg ? dg->data_ptr() : nullptr;
  p.dw = dw.data_ptr();
  p.db = db ? db->data_ptr() : nullptr;
  p.scratch = scratch.data_ptr();
  detail::Exec ex(x.device());
  ex.k.norm(kern::NormPass::backward, x.dtype(), p, ex.stream);
  return dx;
}

}  // namespace

NormOut rms_norm_forward(const Tensor& x, const Tensor& w, double eps) {
  return norm_forward(kRms, x, nullptr, w, nullptr, eps);
}
Tensor rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const NormStats& s, Tensor& dw,
                         const Tensor& dres) {
  return norm_backward(kRms, dy, x, nullptr, w, nullptr, s, dw, nullptr, nullptr, dres);
}

NormOut layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  return norm_forward(kLayer, x, nullptr, w, &b, eps);
}
Tensor layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const NormStats& s, Tensor& dw,
                           Tensor& db, const Tensor& dres) {
  // b does not enter dx or dw (the kernel reads it only for dg of a gated form)
  return norm_backward(kLayer, dy, x, nullptr, w, nullptr, s, dw, &db, nullptr, dres);
}

NormOut group_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  return norm_forward(kGroup, x, nullptr, w, &b, eps);
}
Tensor group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const NormStats& s, Tensor& dw,
                           Tensor& db) {
  return norm_backward(kGroup, dy, x, nullptr, w, nullptr, s, dw, &db, nullptr);
}

NormOut gated_rms_norm_forward(const Tensor& x, const Tensor& g, const Tensor& w, double eps) {
  return norm_forward(kGated, x, &g, w, nullptr, eps);
}
GatedNormGrads gated_rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& g, const Tensor& w,
                                       const NormStats& s, Tensor& dw) {
  GatedNormGrads out;
  out.dx = norm_backward(kGated, dy, x, &g, w, nullptr, s, dw, nullptr, &out.dg);
  return out;
}

}  // namespace lt::nn
