// Reductions and scans (engine/ops.h): sum, max, mean, sum_all, sum_to, column_sums_into, cumsum.
// Each builds an IterParams over the kept dims (the reduced / scanned dim narrowed to one
// element, so operand offsets point at each line's start) and passes the line length and
// strides to the kernel (kernels/table.h: ReduceParams, ScanParams).
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/detail.h"
#include "engine/ops.h"
#include "kernels/column_sums.h"

namespace lt::ops {
namespace {

Tensor reduce_dim(kern::ReduceOp op, const Tensor& x, int64_t d, bool keepdim, const char* name) {
  detail::check_float(x, name);
  if (x.dim() == 0) {
    detail::wrap_dim(d, 0, name, x.shape());
    return x.clone();
  }
  d = detail::wrap_dim(d, x.dim(), name, x.shape());
  const int64_t len = x.size(d);
  Shape kept = x.shape();
  kept[d] = 1;
  Tensor out = Tensor::empty(kept, x.dtype(), x.device());
  if (len == 0) {
    if (op == kern::ReduceOp::max)
      throw std::invalid_argument(std::string(name) + ": dim " + std::to_string(d) + " of " + shape_str(x.shape()) +
                                  " is empty");
    out.fill_(0.0);
  } else if (out.numel() > 0) {
    const Tensor line_start = x.narrow(d, 0, 1);
    const Tensor* operands[2] = {&out, &line_start};
    kern::ReduceParams p;
    p.it = detail::make_iter(kept, operands, 2, name);
    p.len = len;
    p.in_stride = x.stride(d);
    detail::Exec ex(x.device());
    ex.k.reduce(op, x.dtype(), p, ex.stream);
  }
  return keepdim ? out : out.squeeze(d);
}

}  // namespace

Tensor sum(const Tensor& x, int64_t d, bool keepdim) { return reduce_dim(kern::ReduceOp::sum, x, d, keepdim, "sum"); }
Tensor max(const Tensor& x, int64_t d, bool keepdim) { return reduce_dim(kern::ReduceOp::max, x, d, keepdim, "max"); }

Tensor mean(const Tensor& x, int64_t d, bool keepdim) {
  Tensor s = sum(x, d, keepdim);
  const int64_t len = x.dim() == 0 ? 1 : x.size(d);
  return mul_scalar(s, 1.0 / static_cast<double>(len == 0 ? 1 : len));
}

Tensor sum_all(const Tensor& x) {
  detail::check_float(x, "sum_all");
  return sum(x.reshape({x.numel()}), 0, false);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  detail::check_float(x, "sum_to");
  // validates that `shape` broadcasts to x's shape
  if (detail::broadcast_shapes(shape, x.shape(), "sum_to") != x.shape())
    throw std::invalid_argument("sum_to: " + shape_str(shape) + " does not broadcast to " + shape_str(x.shape()));
  Tensor r = x;
  const int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  for (int64_t i = 0; i < lead; ++i) r = sum(r, 0, false);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] == 1 && r.size(static_cast<int64_t>(i)) != 1) r = sum(r, static_cast<int64_t>(i), true);
  if (r.shares_storage(x)) r = r.clone();  // nothing was reduced: still return a fresh tensor
  return r.view(shape);
}

void column_sums_into(const std::vector<Tensor*>& acc, const std::vector<Tensor>& x, const std::vector<Tensor>& y) {
  const char* op = "column_sums_into";
  if (x.empty() || x.size() > static_cast<size_t>(kern::kColumnSumMaxSets) || acc.size() != x.size() ||
      (!y.empty() && y.size() != x.size()))
    throw std::invalid_argument(std::string(op) + ": 1.." + std::to_string(kern::kColumnSumMaxSets) +
                                " sets of (acc, x[, y]), got " + std::to_string(acc.size()) + ", " +
                                std::to_string(x.size()) + ", " + std::to_string(y.size()));
  const Tensor& x0 = x[0];
  detail::check_defined(x0, op);
  detail::check_float(x0, op);
  if (x0.dim() < 1) throw std::invalid_argument(std::string(op) + ": x must have a column dim, got rank 0");
  const int64_t cols = x0.size(-1), rows = cols == 0 ? 0 : x0.numel() / cols;
  const DType adt = x0.dtype() == DType::f64 ? DType::f64 : DType::f32;
  std::vector<Tensor> keep;  // contiguous operands alive through the launch
  auto operand = [&](const Tensor& t, const char* what) -> const void* {
    detail::check_defined(t, op);
    if (t.shape() != x0.shape() || t.dtype() != x0.dtype() || t.device() != x0.device())
      throw std::invalid_argument(std::string(op) + ": " + what + " " + shape_str(t.shape()) + " " +
                                  dtype_name(t.dtype()) + " must be " + shape_str(x0.shape()) + " " +
                                  dtype_name(x0.dtype()) + " on " + x0.device().str());
    keep.push_back(t.contiguous());
    return keep.back().data_ptr();
  };
  kern::ColumnSumParams p;
  p.nsets = static_cast<int>(x.size());
  p.rows = rows;
  p.cols = cols;
  for (size_t s = 0; s < x.size(); ++s) {
    Tensor* a = acc[s];
    if (a == nullptr || !a->defined() || a->shape() != Shape{cols} || a->dtype() != adt || a->device() != x0.device() ||
        !a->is_contiguous())
      throw std::invalid_argument(std::string(op) + ": acc " +
                                  (a != nullptr && a->defined() ? shape_str(a->shape()) : std::string("undefined")) +
                                  " must be contiguous [" + std::to_string(cols) + "] " + dtype_name(adt) + " on " +
                                  x0.device().str());
    p.x[s] = operand(x[s], "x");
    p.y[s] = y.empty() ? nullptr : operand(y[s], "y");
    p.acc[s] = a->data_ptr();
  }
  const int64_t ws = kern::column_sum_workspace(rows, cols, p.nsets);
  Tensor workspace;
  if (x0.device().is_cuda() && ws > 0) {
    workspace = Tensor::empty({ws}, adt, x0.device());
    p.workspace = workspace.data_ptr();
  }
  detail::Exec ex(x0.device());
  ex.k.column_sums(x0.dtype(), p, ex.stream);
}

Tensor cumsum(const Tensor& x, int64_t d, bool reverse) {
  detail::check_float(x, "cumsum");
  if (x.dim() == 0) return x.clone();
  d = detail::wrap_dim(d, x.dim(), "cumsum", x.shape());
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  Tensor out_start = out.narrow(d, 0, 1);
  const Tensor in_start = x.narrow(d, 0, 1);
  const Tensor* operands[2] = {&out_start, &in_start};
  kern::ScanParams p;
  p.it = detail::make_iter(out_start.shape(), operands, 2, "cumsum");
  p.len = x.size(d);
  p.out_stride = out.stride(d);
  p.in_stride = x.stride(d);
  p.reverse = reverse;
  detail::Exec ex(x.device());
  ex.k.cumsum(x.dtype(), p, ex.stream);
  return out;
}

}  // namespace lt::ops
