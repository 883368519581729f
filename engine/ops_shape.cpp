// Shape and dtype ops (engine/ops.h): pad, cat, gather_rows, convert; and the test comparisons.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "engine/detail.h"
#include "engine/ops.h"
#include "kernels/gather.h"

namespace lt::ops {

Tensor pad(const Tensor& x, int64_t d, int64_t before, int64_t after, double value) {
  detail::check_defined(x, "pad");
  if (x.dim() == 0) throw std::invalid_argument("pad: rank-0 tensor");
  d = detail::wrap_dim(d, x.dim(), "pad", x.shape());
  if (before < 0 || after < 0)
    throw std::invalid_argument("pad: negative padding (" + std::to_string(before) + ", " + std::to_string(after) +
                                ") for " + shape_str(x.shape()));
  Shape sh = x.shape();
  sh[d] += before + after;
  Tensor out = Tensor::empty(sh, x.dtype(), x.device());
  if (before > 0) out.narrow(d, 0, before).fill_(value);
  if (after > 0) out.narrow(d, before + x.size(d), after).fill_(value);
  out.narrow(d, before, x.size(d)).copy_(x);
  return out;
}

Tensor gather_rows(const Tensor& x, const Tensor& index, double fill) {
  detail::check_defined(x, "gather_rows");
  detail::check_defined(index, "gather_rows");
  if (x.dim() == 0) throw std::invalid_argument("gather_rows: rank-0 tensor");
  if (index.dim() != 1 || index.dtype() != DType::i32)
    throw std::invalid_argument("gather_rows: index must be [M] i32, got " + shape_str(index.shape()) + " " +
                                dtype_name(index.dtype()));
  detail::check_same_device(x, index, "gather_rows");
  Shape sh = x.shape();
  sh[0] = index.size(0);
  Tensor out = Tensor::empty(sh, x.dtype(), x.device());
  const Tensor xc = x.contiguous(), ic = index.contiguous();
  kern::GatherRowsParams p;
  p.rows_in = x.size(0);
  p.rows_out = index.size(0);
  p.width = 1;
  for (int64_t i = 1; i < x.dim(); ++i) p.width *= x.size(i);
  p.x = xc.data_ptr();
  p.index = ic.data<int32_t>();
  p.out = out.data_ptr();
  p.fill = fill;
  detail::Exec ex(x.device());
  ex.k.gather_rows(x.dtype(), p, ex.stream);
  return out;
}

Tensor cat(const std::vector<Tensor>& xs, int64_t d) {
  if (xs.empty()) throw std::invalid_argument("cat: no tensors");
  const Tensor& first = xs[0];
  detail::check_defined(first, "cat");
  if (first.dim() == 0) throw std::invalid_argument("cat: rank-0 tensors cannot be concatenated");
  d = detail::wrap_dim(d, first.dim(), "cat", first.shape());
  Shape sh = first.shape();
  sh[d] = 0;
  for (const Tensor& t : xs) {
    detail::check_same_device(first, t, "cat");
    detail::check_same_dtype(first, t, "cat");
    bool ok = t.dim() == first.dim();
    for (int64_t i = 0; ok && i < t.dim(); ++i)
      if (i != d && t.size(i) != first.size(i)) ok = false;
    if (!ok)
      throw std::invalid_argument("cat: shape " + shape_str(t.shape()) + " does not match " + shape_str(first.shape()) +
                                  " outside dim " + std::to_string(d));
    sh[d] += t.size(d);
  }
  Tensor out = Tensor::empty(sh, first.dtype(), first.device());
  int64_t at = 0;
  for (const Tensor& t : xs) {
    out.narrow(d, at, t.size(d)).copy_(t);
    at += t.size(d);
  }
  return out;
}

Tensor convert(const Tensor& x, DType dtype) {
  detail::check_defined(x, "convert");
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  out.copy_(x);
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  detail::check_defined(a, "max_abs_diff");
  detail::check_defined(b, "max_abs_diff");
  if (a.shape() != b.shape())
    throw std::invalid_argument("max_abs_diff: shapes differ: " + shape_str(a.shape()) + " vs " + shape_str(b.shape()));
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  double m = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) return std::numeric_limits<double>::infinity();
    m = std::max(m, std::fabs(va[i] - vb[i]));
  }
  return m;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const double abs_diff = max_abs_diff(a, b);
  double scale = 0.0;
  for (double v : b.to_vector()) scale = std::max(scale, std::fabs(v));
  return abs_diff / std::max(scale, 1e-300);
}

}  // namespace lt::ops
