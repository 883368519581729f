// Linear layer (engine/nn/linear.h): y = x W^T (+ b), rows of x flattened into one GEMM.
//   x [R, in] (R = product of x's leading dims), W [out, in], b [out], y [R, out].
// Backward (parameter grads +=, activation grad =):
//   dx  = dy W            [R, out] x [out, in]      (dy's dtype; linear_backward_add: +=)
//   dW += dy^T x          [out, R] x [R, in]        (dW: f32 for bf16 operands, else x's dtype;
//                                                    = inside a WeightGradOverwriteScope)
//   db += sum_r dy[r, :]  (ops::column_sums_into: one read of dy, summed in db's f32 / f64)
// For bf16 / f16 operands both parameter GEMMs are mixed precision (engine/ops.h
// matmul_out): bf16 operands, fp32 accumulation, f32 gradients read and written.
#include "engine/nn/linear.h"

#include <stdexcept>
#include <string>

#include "engine/ops.h"

namespace lt::nn {
namespace {

thread_local bool g_overwrite_weight_grads = false;  // WeightGradOverwriteScope's switch

// The gradient dtype for operands of dtype `dt`: bf16 / f16 gradients accumulate in f32.
DType grad_dtype(DType dt) { return dt == DType::bf16 || dt == DType::f16 ? DType::f32 : dt; }

void check_weight(const Tensor& x, const Tensor& W, const char* op) {
  if (!x.defined() || !W.defined()) throw std::invalid_argument(std::string(op) + ": x and W must be defined");
  if (W.dim() != 2 || x.dim() < 1 || x.size(-1) != W.size(1))
    throw std::invalid_argument(std::string(op) + ": x " + shape_str(x.shape()) + " does not match W " +
                                shape_str(W.shape()) + " (expected x [..., in], W [out, in])");
  if (x.dtype() != W.dtype())
    throw std::invalid_argument(std::string(op) + ": x is " + dtype_name(x.dtype()) + " but W is " +
                                dtype_name(W.dtype()));
  if (x.device() != W.device())
    throw std::invalid_argument(std::string(op) + ": x on " + x.device().str() + " but W on " + W.device().str());
}

// x viewed as [R, in] (a copy only when x's leading dims do not flatten).
Tensor rows_of(const Tensor& x) { return x.reshape({-1, x.size(-1)}); }

// The checks of both backwards and the parameter gradients: dW += dy^T x, db += sum_r dy.
// Returns dy as [R, out].
Tensor param_grads(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor& dW, Tensor* db, const char* op) {
  check_weight(x, W, op);
  const int64_t out_features = W.size(0);
  Shape y_shape = x.shape();
  y_shape.back() = out_features;
  if (!dy.defined() || dy.shape() != y_shape || dy.dtype() != x.dtype() || dy.device() != x.device())
    throw std::invalid_argument(std::string(op) + ": dy " + (dy.defined() ? shape_str(dy.shape()) : "undefined") +
                                " must be " + shape_str(y_shape) + " " + dtype_name(x.dtype()) + " on x's device");
  const DType gdt = grad_dtype(x.dtype());
  if (!dW.defined() || dW.shape() != W.shape() || dW.dtype() != gdt || dW.device() != W.device() || !dW.is_contiguous())
    throw std::invalid_argument(std::string(op) + ": dW " + (dW.defined() ? shape_str(dW.shape()) : "undefined") +
                                " must be contiguous " + shape_str(W.shape()) + " " + dtype_name(gdt) +
                                " on W's device");
  if (db && (!db->defined() || db->shape() != Shape{out_features} || db->dtype() != gdt || db->device() != W.device() ||
             !db->is_contiguous()))
    throw std::invalid_argument(std::string(op) + ": db " + (db->defined() ? shape_str(db->shape()) : "undefined") +
                                " must be contiguous [" + std::to_string(out_features) + "] " + dtype_name(gdt) +
                                " on W's device");

  const Tensor x2 = rows_of(x);    // [R, in]
  const Tensor dy2 = rows_of(dy);  // [R, out]
  // bf16 / f16 operands write f32 gradients straight from the mixed-precision GEMM.
  ops::matmul_out(dW, dy2, x2, /*trans_a=*/true, /*trans_b=*/false, 1.0, weight_grad_beta());  // dW [out, in] += dy^T x
  if (db) ops::column_sums_into({db}, {dy2});  // db [out] += sum over rows of dy
  return dy2;
}

}  // namespace

Tensor linear_forward(const Tensor& x, const Tensor& W, const Tensor& b) {
  check_weight(x, W, "linear_forward");
  const int64_t out_features = W.size(0);
  if (b.defined() && (b.dim() != 1 || b.size(0) != out_features || b.dtype() != x.dtype() || b.device() != x.device()))
    throw std::invalid_argument("linear_forward: bias " + shape_str(b.shape()) + " " + dtype_name(b.dtype()) +
                                " must be [" + std::to_string(out_features) + "] " + dtype_name(x.dtype()) +
                                " on x's device");
  Shape y_shape = x.shape();
  y_shape.back() = out_features;
  Tensor y = ops::matmul(rows_of(x), W, false, true);  // [R, out]
  if (b.defined()) ops::add_out(y, y, b);
  return y.view(y_shape);
}

Tensor linear_backward(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor& dW, Tensor* db, bool need_dx) {
  const Tensor dy2 = param_grads(dy, x, W, dW, db, "linear_backward");
  if (!need_dx) return Tensor();
  return ops::matmul(dy2, W).view(x.shape());  // [R, in]
}

void linear_backward_add(const Tensor& dy, const Tensor& x, const Tensor& W, Tensor& dW, Tensor& dx_acc, Tensor* db) {
  if (!dx_acc.defined() || dx_acc.shape() != x.shape() || dx_acc.dtype() != x.dtype() ||
      dx_acc.device() != x.device() || !dx_acc.is_contiguous())
    throw std::invalid_argument(
        "linear_backward_add: dx_acc " + (dx_acc.defined() ? shape_str(dx_acc.shape()) : std::string("undefined")) +
        " must be contiguous " + shape_str(x.shape()) + " " + dtype_name(x.dtype()) + " on x's device");
  const Tensor dy2 = param_grads(dy, x, W, dW, db, "linear_backward_add");
  Tensor acc2 = dx_acc.view({-1, x.size(-1)});
  ops::matmul_out(acc2, dy2, W, false, false, 1.0, 1.0);  // dx_acc [R, in] += dy W
}

double weight_grad_beta() { return g_overwrite_weight_grads ? 0.0 : 1.0; }
WeightGradOverwriteScope::WeightGradOverwriteScope(bool on) : previous_(g_overwrite_weight_grads) {
  g_overwrite_weight_grads = on;
}
WeightGradOverwriteScope::~WeightGradOverwriteScope() { g_overwrite_weight_grads = previous_; }

}  // namespace lt::nn
