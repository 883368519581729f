// Causal depthwise short convolution (engine/nn/short_conv.h): checks, then one call of the
// conv kernel family (kernels/conv.h) per pass. Inputs that are not contiguous are copied;
// outputs are fresh contiguous tensors; dw must be contiguous (it is accumulated in place).
#include "engine/nn/short_conv.h"

#include <stdexcept>
#include <string>

#include "engine/detail.h"
#include "kernels/conv.h"

namespace lt::nn {
namespace {

std::string desc(const Tensor& t) {
  return shape_str(t.shape()) + " " + dtype_name(t.dtype()) + " " + t.device().str();
}

void fail(const char* op, const std::string& msg) { throw std::invalid_argument(std::string(op) + ": " + msg); }

// x [B, T, C] (f32, bf16, f64) and w [C, W] (f32; f64 for f64 x) on x's device, 1 <= W <= 8.
void check_x_w(const Tensor& x, const Tensor& w, const char* op) {
  if (!x.defined()) fail(op, "x is undefined");
  if (!w.defined()) fail(op, "w is undefined");
  if (x.dim() != 3) fail(op, "x " + desc(x) + " must be [B, T, C]");
  if (x.dtype() != DType::f32 && x.dtype() != DType::bf16 && x.dtype() != DType::f64)
    fail(op, "x " + desc(x) + ": dtype must be f32, bf16 or f64");
  const DType wd = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  if (w.dim() != 2 || w.size(0) != x.size(2) || w.size(1) < 1 || w.size(1) > kern::kConvMaxWidth || w.dtype() != wd ||
      w.device() != x.device())
    fail(op, "w " + desc(w) + " must be [C, W] " + dtype_name(wd) + " " + x.device().str() +
                 " with C = " + std::to_string(x.size(2)) + ", 1 <= W <= " + std::to_string(kern::kConvMaxWidth) +
                 " (x " + desc(x) + ")");
}

kern::ConvParams params_of(const Tensor& x, const Tensor& w, bool silu, const Tensor& positions, const char* op) {
  kern::ConvParams p;
  p.B = x.size(0);
  p.T = x.size(1);
  p.C = x.size(2);
  p.W = w.size(1);
  p.silu = silu;
  if (positions.defined()) {
    if (positions.dtype() != DType::i32 || positions.numel() != p.B * p.T || positions.device() != x.device() ||
        !positions.is_contiguous())
      fail(op, "positions " + desc(positions) + " must be [B*T] = [" + std::to_string(p.B * p.T) +
                   "] contiguous i32 on x's device");
    p.pos = positions.data<int32_t>();
  }
  return p;
}

}  // namespace

Tensor short_conv_forward(const Tensor& x, const Tensor& w, bool silu, const Tensor& positions) {
  check_x_w(x, w, "short_conv_forward");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  const Tensor xc = x.contiguous(), wc = w.contiguous();
  kern::ConvParams p = params_of(x, w, silu, positions, "short_conv_forward");
  p.x = xc.data_ptr();
  p.w = wc.data_ptr();
  p.y = y.data_ptr();
  detail::Exec ex(x.device());
  ex.k.conv(kern::ConvPass::forward, x.dtype(), p, ex.stream);
  return y;
}

Tensor short_conv_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw, bool silu,
                           const Tensor& positions) {
  const char* op = "short_conv_backward";
  check_x_w(x, w, op);
  if (!dy.defined()) fail(op, "dy is undefined");
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype() || dy.device() != x.device())
    fail(op, "dy " + desc(dy) + " must match x " + desc(x));
  if (!dw.defined()) fail(op, "dw is undefined");
  if (dw.shape() != w.shape() || dw.dtype() != w.dtype() || dw.device() != w.device())
    fail(op, "dw " + desc(dw) + " must match w " + desc(w));
  if (!dw.is_contiguous()) fail(op, "dw " + desc(dw) + " must be contiguous (it is accumulated in place)");

  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return dx;
  const Tensor xc = x.contiguous(), dyc = dy.contiguous(), wc = w.contiguous();
  kern::ConvParams p = params_of(x, w, silu, positions, op);
  // [Q, C, W]: per-slot dw partials (kernels/conv.h)
  Tensor scratch = Tensor::empty({kern::conv_weight_slots(p.B, p.T) * p.C * p.W}, w.dtype(), x.device());
  p.x = xc.data_ptr();
  p.w = wc.data_ptr();
  p.dy = dyc.data_ptr();
  p.dx = dx.data_ptr();
  p.dw = dw.data_ptr();
  p.scratch = scratch.data_ptr();
  detail::Exec ex(x.device());
  ex.k.conv(kern::ConvPass::backward, x.dtype(), p, ex.stream);
  return dx;
}

}  // namespace lt::nn
