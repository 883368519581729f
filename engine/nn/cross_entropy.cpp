// The LM head fused with cross-entropy (engine/nn/cross_entropy.h). Per chunk of rows:
// logits = x_c W^T (ops::matmul_out), the row kernel (kernels/cross_entropy.h) turns them
// into dlogits in place and writes each row's loss into a scratch [N]; then dx_c and dW from
// the products. After the last chunk the row losses are summed in a fixed order
// (ops::sum: sequential on the CPU, a fixed-shape tree on CUDA), scaled by inv_count and
// added into loss_accum on the device: deterministic, no host synchronisation.
// Dtypes: f32 x -> f32 logits; f64 x -> f64 logits (CPU references); bf16 x and W -> f32
// logits from the mixed-precision GEMM (bf16 operands, fp32 accumulation, f32 output);
// for the backward products dlogits are rounded to bf16 (as autocast does): dx = dlogits W
// in bf16, dW (f32) += dlogits^T x from bf16 operands with fp32 accumulation.
#include "engine/nn/cross_entropy.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "engine/detail.h"
#include "engine/ops.h"
#include "kernels/cross_entropy.h"

namespace lt::nn {
namespace {

// The dtype of the logits and dlogits for activations of dtype `x`: bf16 logits in the bf16
// mode (fla's bf16 models have them so; half the bytes of the loss stage), else x's.
DType logits_dtype(DType x) { return x; }
// The row losses' dtype (the cross-entropy kernel's compute type) and dW's.
DType accum_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

struct HeadShape {
  int64_t N = 0, d = 0, V = 0;
  DType logits = DType::f32;  // logits and dlogits
  DType accum = DType::f32;   // row losses, dW
};

HeadShape check_head(const Tensor& x, const Tensor& W, const char* op) {
  detail::check_defined(x, op);
  detail::check_defined(W, op);
  detail::check_same_device(x, W, op);
  detail::check_float(x, op);
  if (x.dtype() == DType::f16)
    throw std::invalid_argument(std::string(op) + ": x " + shape_str(x.shape()) +
                                " has dtype f16; use f32, bf16 or f64");
  detail::check_same_dtype(x, W, op);
  if (x.dim() != 2 || W.dim() != 2 || x.size(1) != W.size(1))
    throw std::invalid_argument(std::string(op) + ": expected x [N, d] and W [V, d], got x " + shape_str(x.shape()) +
                                " and W " + shape_str(W.shape()));
  if (W.size(0) < 1) throw std::invalid_argument(std::string(op) + ": W " + shape_str(W.shape()) + " has no rows");
  return {x.size(0), x.size(1), W.size(0), logits_dtype(x.dtype()), accum_dtype(x.dtype())};
}

void check_loss_inputs(const Tensor& x, const Tensor& targets, const LmHeadLossArgs& args, const Tensor& loss_accum,
                       const char* op) {
  detail::check_defined(targets, op);
  detail::check_defined(loss_accum, op);
  detail::check_same_device(x, targets, op);
  detail::check_same_device(x, loss_accum, op);
  if (targets.dtype() != DType::i32 && targets.dtype() != DType::i64)
    throw std::invalid_argument(std::string(op) + ": targets " + shape_str(targets.shape()) + " has dtype " +
                                dtype_name(targets.dtype()) + ", expected i32 or i64");
  if (targets.shape() != Shape{x.size(0)})
    throw std::invalid_argument(std::string(op) + ": targets " + shape_str(targets.shape()) + " do not match x " +
                                shape_str(x.shape()) + " (expected [" + std::to_string(x.size(0)) + "])");
  if (loss_accum.dim() != 0 || (loss_accum.dtype() != DType::f32 && loss_accum.dtype() != DType::f64))
    throw std::invalid_argument(std::string(op) + ": loss_accum must be an f32 (or f64) scalar of shape [], got " +
                                shape_str(loss_accum.shape()) + " " + dtype_name(loss_accum.dtype()));
  const Tensor& at = args.inv_count_at;
  if (at.defined() && (at.dim() != 0 || at.dtype() != DType::f64 || at.device() != x.device()))
    throw std::invalid_argument(std::string(op) +
                                ": inv_count_at must be an f64 scalar of shape [] on x's device, got " +
                                shape_str(at.shape()) + " " + dtype_name(at.dtype()) + " " + at.device().str());
  if (args.chunk_tokens < 1)
    throw std::invalid_argument(std::string(op) + ": chunk_tokens " + std::to_string(args.chunk_tokens) +
                                " must be >= 1");
}

// out = x_c W^T; out [n, V] contiguous in the logits dtype (fp32 accumulation).
void logits_into(Tensor& out, const Tensor& xc, const Tensor& W) { ops::matmul_out(out, xc, W, false, true); }

void run_rows(const Tensor& logits, const Tensor& targets, const LmHeadLossArgs& args, Tensor& row_loss,
              int32_t* correct, bool write_grad) {
  kern::CrossEntropyParams p;
  p.n = logits.size(0);
  p.V = logits.size(1);
  p.logits = logits.data_ptr();
  p.ld = logits.stride(0);
  p.targets = targets.data_ptr();
  p.target_dtype = targets.dtype();
  p.ignore_index = args.ignore_index;
  p.inv_count = args.inv_count;
  p.inv_count_at = args.inv_count_at.defined() ? args.inv_count_at.data<double>() : nullptr;
  p.write_grad = write_grad;
  p.row_loss = row_loss.data_ptr();
  p.correct = correct;
  detail::Exec ex(logits.device());
  ex.k.cross_entropy(logits.dtype(), p, ex.stream);
}

// loss_accum += inv_count * sum(row_loss), on the device (the scale from inv_count_at when set).
void accumulate_loss(const Tensor& row_loss, const LmHeadLossArgs& args, Tensor& loss_accum) {
  const Tensor sum = ops::sum(row_loss, 0);
  Tensor total =
      args.inv_count_at.defined() ? sum * args.inv_count_at.to(sum.dtype()) : ops::mul_scalar(sum, args.inv_count);
  if (total.dtype() != loss_accum.dtype()) total = total.to(loss_accum.dtype());
  ops::add_(loss_accum, total);
}

}  // namespace

void lm_head_cross_entropy_backward(const Tensor& x, const Tensor& W, const Tensor& targets, const LmHeadLossArgs& args,
                                    Tensor& loss_accum, Tensor& dx, Tensor& dW) {
  const char* op = "lm_head_cross_entropy_backward";
  const HeadShape s = check_head(x, W, op);
  check_loss_inputs(x, targets, args, loss_accum, op);
  if (!dx.defined()) dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (dx.shape() != x.shape() || dx.dtype() != x.dtype() || !dx.is_contiguous() || dx.device() != x.device())
    throw std::invalid_argument(std::string(op) + ": dx must be a contiguous " + dtype_name(x.dtype()) + " " +
                                shape_str(x.shape()) + " on x's device, got " + shape_str(dx.shape()) + " " +
                                dtype_name(dx.dtype()));
  detail::check_defined(dW, op);
  if (dW.shape() != W.shape() || dW.dtype() != s.accum || !dW.is_contiguous() || dW.device() != x.device())
    throw std::invalid_argument(std::string(op) + ": dW must be a contiguous " + dtype_name(s.accum) + " " +
                                shape_str(W.shape()) + " on x's device, got " + shape_str(dW.shape()) + " " +
                                dtype_name(dW.dtype()));
  if (s.N == 0) {
    if (args.overwrite_dW) dW.zero_();
    return;
  }
  const Tensor tgt = targets.contiguous();
  const int64_t chunk = std::min(args.chunk_tokens, s.N);
  Tensor logits_buf = Tensor::empty({chunk, s.V}, s.logits, x.device());  // [chunk, V]
  Tensor row_loss = Tensor::empty({s.N}, s.accum, x.device());            // [N]
  for (int64_t c0 = 0; c0 < s.N; c0 += chunk) {
    const int64_t n = std::min(chunk, s.N - c0);
    const Tensor xc = x.narrow(0, c0, n);        // [n, d]
    Tensor logits = logits_buf.narrow(0, 0, n);  // [n, V], becomes dlogits
    logits_into(logits, xc, W);
    Tensor loss_c = row_loss.narrow(0, c0, n);
    run_rows(logits, tgt.narrow(0, c0, n), args, loss_c, nullptr, true);
    const Tensor& dlogits = logits;
    Tensor dxc = dx.narrow(0, c0, n);
    ops::matmul_out(dxc, dlogits, W);                              // [n, V] x [V, d]
    const double beta = args.overwrite_dW && c0 == 0 ? 0.0 : 1.0;  // the first chunk overwrites
    ops::matmul_out(dW, dlogits, xc, true, false, 1.0, beta);      // [V, n] x [n, d], +=
  }
  accumulate_loss(row_loss, args, loss_accum);
}

void lm_head_cross_entropy_forward(const Tensor& x, const Tensor& W, const Tensor& targets, const LmHeadLossArgs& args,
                                   Tensor& loss_accum, Tensor correct) {
  const char* op = "lm_head_cross_entropy_forward";
  const HeadShape s = check_head(x, W, op);
  check_loss_inputs(x, targets, args, loss_accum, op);
  if (correct.defined() && (correct.shape() != Shape{s.N} || correct.dtype() != DType::i32 ||
                            !correct.is_contiguous() || correct.device() != x.device()))
    throw std::invalid_argument(std::string(op) + ": correct must be a contiguous i32 [" + std::to_string(s.N) +
                                "] on x's device, got " + shape_str(correct.shape()) + " " +
                                dtype_name(correct.dtype()));
  if (s.N == 0) return;
  const Tensor tgt = targets.contiguous();
  const int64_t chunk = std::min(args.chunk_tokens, s.N);
  Tensor logits_buf = Tensor::empty({chunk, s.V}, s.logits, x.device());  // [chunk, V]
  Tensor row_loss = Tensor::empty({s.N}, s.accum, x.device());            // [N]
  for (int64_t c0 = 0; c0 < s.N; c0 += chunk) {
    const int64_t n = std::min(chunk, s.N - c0);
    Tensor logits = logits_buf.narrow(0, 0, n);
    logits_into(logits, x.narrow(0, c0, n), W);
    Tensor loss_c = row_loss.narrow(0, c0, n);
    run_rows(logits, tgt.narrow(0, c0, n), args, loss_c, correct.defined() ? correct.data<int32_t>() + c0 : nullptr,
             false);
  }
  accumulate_loss(row_loss, args, loss_accum);
}

Tensor lm_head_logits(const Tensor& x, const Tensor& W) {
  const HeadShape s = check_head(x, W, "lm_head_logits");
  Tensor out = Tensor::empty({s.N, s.V}, s.accum, x.device());  // [n, V], f32 from bf16 operands
  if (out.numel() > 0) logits_into(out, x, W);
  return out;
}

}  // namespace lt::nn
