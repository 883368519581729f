// Reductions and scans (engine/ops.h): sum, max, mean, sum_all, sum_to, cumsum.
// Each builds an IterParams over the kept dims (the reduced / scanned dim narrowed to one
// element, so operand offsets point at each line's start) and passes the line length and
// strides to the kernel (kernels/table.h: ReduceParams, ScanParams).
#include <stdexcept>

#include "engine/detail.h"
#include "engine/ops.h"

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
