// AdamW and the global gradient norm over the flat arenas (engine/optim/adamw.h): argument
// checks here, the arithmetic in the adamw kernel family (kernels/adamw.h). Nothing here
// reads device memory on the host: the norm and the skip counter stay on the device.
#include "engine/optim/adamw.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/detail.h"
#include "kernels/adamw.h"

namespace lt::optim {
namespace {

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return shape_str(t.shape()) + " " + dtype_name(t.dtype()) + " on " + t.device().str() +
         (t.is_contiguous() ? "" : " (strided)");
}

// A contiguous 1-D f32 / f64 arena.
void check_arena(const Tensor& t, const char* op, const char* name) {
  if (!t.defined() || t.dim() != 1 || !t.is_contiguous() || (t.dtype() != DType::f32 && t.dtype() != DType::f64))
    throw std::invalid_argument(std::string(op) + ": " + name + " must be a contiguous [P] f32 or f64 tensor, got " +
                                describe(t));
}

void check_scalar(const Tensor& t, DType dtype, Device device, const char* op, const char* name) {
  if (!t.defined() || t.numel() != 1 || t.dtype() != dtype || t.device() != device)
    throw std::invalid_argument(std::string(op) + ": " + name + " must be a one-element " + dtype_name(dtype) +
                                " tensor on " + device.str() + ", got " + describe(t));
}

}  // namespace

Tensor grad_norm(const Tensor& grads) {
  check_arena(grads, "grad_norm", "grads");
  Tensor norm = Tensor::empty({}, grads.dtype(), grads.device());
  Tensor partials = Tensor::empty({kern::kGradNormPartials}, DType::f64, grads.device());  // scratch
  kern::AdamWParams p;
  p.n = grads.numel();
  p.grads = grads.data_ptr();
  p.partials = partials.data<double>();
  p.norm = norm.data_ptr();
  detail::Exec ex(grads.device());
  ex.k.adamw(kern::AdamWOp::grad_norm, grads.dtype(), p, ex.stream);
  return norm;
}

void adamw_step(AdamWArenas& a, const AdamWConfig& cfg, double lr, int64_t t, const Tensor& norm, Tensor& skipped,
                const StepGate* gate) {
  const char* op = "adamw_step";
  check_arena(a.params, op, "params");
  const int64_t P = a.params.numel();
  const DType dt = a.params.dtype();
  const Device dev = a.params.device();
  const struct {
    const Tensor* t;
    const char* name;
  } others[] = {{&a.grads, "grads"}, {&a.m, "m"}, {&a.v, "v"}};
  for (const auto& o : others) {
    check_arena(*o.t, op, o.name);
    if (o.t->numel() != P || o.t->dtype() != dt || o.t->device() != dev)
      throw std::invalid_argument(std::string(op) + ": " + o.name + " " + describe(*o.t) + " does not match params " +
                                  describe(a.params));
  }
  if (a.params_bf16.defined() &&
      (a.params_bf16.dim() != 1 || a.params_bf16.numel() != P || a.params_bf16.dtype() != DType::bf16 ||
       a.params_bf16.device() != dev || !a.params_bf16.is_contiguous()))
    throw std::invalid_argument(std::string(op) + ": params_bf16 must be a contiguous [" + std::to_string(P) +
                                "] bf16 tensor on " + dev.str() + ", got " + describe(a.params_bf16));
  if (a.decay_end < 0 || a.decay_end > P)
    throw std::invalid_argument(std::string(op) + ": decay_end " + std::to_string(a.decay_end) + " outside [0, " +
                                std::to_string(P) + "]");
  check_scalar(norm, dt, dev, op, "norm");
  check_scalar(skipped, DType::i32, dev, op, "skipped");
  if (gate) {
    check_scalar(gate->loss, dt, dev, op, "gate.loss");
    if (gate->report.defined() && (gate->report.numel() != 3 || gate->report.dtype() != DType::f64 ||
                                   gate->report.device() != dev || !gate->report.is_contiguous()))
      throw std::invalid_argument(std::string(op) + ": gate.report must be a contiguous [3] f64 tensor on " +
                                  dev.str() + ", got " + describe(gate->report));
    if (gate->spike_test &&
        !(std::isfinite(gate->spike_mean) && std::isfinite(gate->spike_sd) && std::isfinite(gate->spike_zscore)))
      throw std::invalid_argument(std::string(op) + ": spike test mean " + std::to_string(gate->spike_mean) + ", sd " +
                                  std::to_string(gate->spike_sd) + " and z-score " +
                                  std::to_string(gate->spike_zscore) + " must be finite");
  }
  if (t < 1)
    throw std::invalid_argument(std::string(op) + ": step t = " + std::to_string(t) + " (1-based, must be >= 1)");
  if (!std::isfinite(lr) || lr < 0.0)
    throw std::invalid_argument(std::string(op) + ": learning rate " + std::to_string(lr) + " must be finite and >= 0");
  if (!(cfg.beta1 >= 0.0 && cfg.beta1 < 1.0) || !(cfg.beta2 >= 0.0 && cfg.beta2 < 1.0))
    throw std::invalid_argument(std::string(op) + ": beta1 " + std::to_string(cfg.beta1) + " and beta2 " +
                                std::to_string(cfg.beta2) + " must be in [0, 1)");
  if (!(cfg.eps > 0.0) || !(cfg.weight_decay >= 0.0) || !(cfg.max_grad_norm >= 0.0))
    throw std::invalid_argument(std::string(op) + ": eps " + std::to_string(cfg.eps) + " must be > 0, weight_decay " +
                                std::to_string(cfg.weight_decay) + " and max_grad_norm " +
                                std::to_string(cfg.max_grad_norm) + " >= 0");

  kern::AdamWParams p;
  p.n = P;
  p.grads = a.grads.data_ptr();
  p.norm = norm.data_ptr();
  p.params = a.params.data_ptr();
  p.m = a.m.data_ptr();
  p.v = a.v.data_ptr();
  p.shadow = a.params_bf16.defined() ? a.params_bf16.data_ptr() : nullptr;
  p.skipped = skipped.data<int32_t>();
  p.decay_end = a.decay_end;
  p.lr = lr;
  p.beta1 = cfg.beta1;
  p.beta2 = cfg.beta2;
  p.eps = cfg.eps;
  p.weight_decay = cfg.weight_decay;
  p.max_grad_norm = cfg.max_grad_norm;
  p.bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(t));
  p.bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(t));
  if (gate) {
    p.loss = gate->loss.data_ptr();
    p.spike_test = gate->spike_test;
    p.spike_mean = gate->spike_mean;
    p.spike_sd = gate->spike_sd;
    p.spike_zscore = gate->spike_zscore;
    p.report = gate->report.defined() ? gate->report.data<double>() : nullptr;
  }
  detail::Exec ex(dev);
  ex.k.adamw(kern::AdamWOp::update, dt, p, ex.stream);
}

}  // namespace lt::optim
