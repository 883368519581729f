// Triangular ops and the L2 norm (engine/ops.h): tril, triu, eye, solve_unit_lower,
// l2norm, l2norm_backward.
#include <cmath>
#include <stdexcept>

#include "engine/detail.h"
#include "engine/ops.h"

namespace lt::ops {
namespace {

Tensor tri_mask(const Tensor& x, int64_t diagonal, bool upper, const char* name) {
  detail::check_float(x, name);
  if (x.dim() < 2) throw std::invalid_argument(std::string(name) + ": needs >= 2 dims, got " + shape_str(x.shape()));
  const Tensor in = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  kern::TriMaskParams p;
  p.rows = x.size(-2);
  p.cols = x.size(-1);
  p.batch = p.rows * p.cols == 0 ? 0 : x.numel() / (p.rows * p.cols);
  p.in = in.data_ptr();
  p.out = out.data_ptr();
  p.diagonal = diagonal;
  p.upper = upper;
  detail::Exec ex(x.device());
  ex.k.tri_mask(x.dtype(), p, ex.stream);
  return out;
}

// Leading dims collapse into one stride (or there is at most one batch): the stride, else -1.
int64_t batch_stride_of(const Tensor& t) {
  int64_t stride = 0, inner_stride = 0, inner_size = 1;
  bool have = false;
  for (int64_t i = t.dim() - 3; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (!have) {
      stride = t.stride(i);
      have = true;
    } else if (t.stride(i) != inner_stride * inner_size) {
      return -1;
    }
    inner_stride = t.stride(i);
    inner_size = t.size(i);
  }
  return stride;
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return tri_mask(x, diagonal, false, "tril"); }
Tensor triu(const Tensor& x, int64_t diagonal) { return tri_mask(x, diagonal, true, "triu"); }

Tensor eye(int64_t n, DType dtype, Device device) {
  if (n < 0) throw std::invalid_argument("eye: negative size " + std::to_string(n));
  Tensor out = Tensor::zeros({n, n}, dtype, device);
  if (n > 0) Tensor(out.storage(), 0, {n}, {n + 1}, dtype).fill_(1.0);
  return out;
}

Tensor solve_unit_lower(const Tensor& L, const Tensor& B, bool transpose) {
  const char* name = "solve_unit_lower";
  detail::check_same_device(L, B, name);
  detail::check_float(L, name);
  detail::check_same_dtype(L, B, name);
  if (L.dim() < 2 || B.dim() < 2 || L.size(-1) != L.size(-2) || B.size(-2) != L.size(-1))
    throw std::invalid_argument(std::string(name) + ": expected L [..., C, C] and B [..., C, N], got L " +
                                shape_str(L.shape()) + " and B " + shape_str(B.shape()));
  const Shape lb(L.shape().begin(), L.shape().end() - 2), bb(B.shape().begin(), B.shape().end() - 2);
  if (lb != bb && !lb.empty())
    throw std::invalid_argument(std::string(name) + ": batch dims of L " + shape_str(L.shape()) + " and B " +
                                shape_str(B.shape()) + " differ (L may be 2-D to share it)");
  Tensor Lc = batch_stride_of(L) < 0 ? L.contiguous() : L;
  Tensor Bc = batch_stride_of(B) < 0 ? B.contiguous() : B;
  Tensor X = Tensor::empty(B.shape(), B.dtype(), B.device());
  kern::TrisolveParams p;
  p.C = L.size(-1);
  p.N = B.size(-1);
  p.batch = shape_numel(bb);
  p.L = Lc.data_ptr();
  p.l_batch = L.dim() == 2 ? 0 : batch_stride_of(Lc);
  p.l_row = Lc.stride(-2);
  p.l_col = Lc.stride(-1);
  p.B = Bc.data_ptr();
  p.b_batch = batch_stride_of(Bc);
  p.b_row = Bc.stride(-2);
  p.b_col = Bc.stride(-1);
  p.X = X.data_ptr();
  p.transpose = transpose;
  if (X.numel() == 0) return X;
  detail::Exec ex(B.device());
  ex.k.trisolve(B.dtype(), p, ex.stream);
  return X;
}

namespace {
bool is_half(DType d) { return d == DType::bf16 || d == DType::f16; }
}  // namespace

std::pair<Tensor, Tensor> l2norm(const Tensor& x, double eps) {
  detail::check_float(x, "l2norm");
  if (x.dim() < 1) throw std::invalid_argument("l2norm: needs >= 1 dim, got " + shape_str(x.shape()));
  const Tensor xf = is_half(x.dtype()) ? x.to(DType::f32) : x;
  const Tensor rstd = rsqrt(add_scalar(sum(square(xf), -1, true), eps));  // [..., 1]
  Tensor y = mul(xf, rstd);
  if (is_half(x.dtype())) y = y.to(x.dtype());
  return {y, rstd.squeeze(-1)};
}

Tensor l2norm_backward(const Tensor& dy, const Tensor& y, const Tensor& rstd) {
  detail::check_same_device(dy, y, "l2norm_backward");
  detail::check_same_dtype(dy, y, "l2norm_backward");
  detail::check_float(dy, "l2norm_backward");
  if (dy.shape() != y.shape() || rstd.dim() + 1 != y.dim() ||
      Shape(y.shape().begin(), y.shape().end() - 1) != rstd.shape())
    throw std::invalid_argument("l2norm_backward: expected dy and y [..., D] and rstd [...], got dy " +
                                shape_str(dy.shape()) + ", y " + shape_str(y.shape()) + ", rstd " +
                                shape_str(rstd.shape()));
  const bool half = is_half(dy.dtype());
  const Tensor dyf = half ? dy.to(DType::f32) : dy;
  const Tensor yf = half ? y.to(DType::f32) : y;
  const Tensor r = rstd.dtype() == dyf.dtype() ? rstd : rstd.to(dyf.dtype());
  const Tensor dot = sum(mul(dyf, yf), -1, true);            // [..., 1]
  Tensor dx = mul(sub(dyf, mul(dot, yf)), r.unsqueeze(-1));  // [..., D]
  return half ? dx.to(dy.dtype()) : dx;
}

}  // namespace lt::ops
