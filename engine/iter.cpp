// Broadcasting and the IterParams builder (engine/detail.h), plus the shared argument
// checks of the ops.
#include <sstream>
#include <stdexcept>

#include "engine/detail.h"

namespace lt::detail {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument(std::string(op) + ": cannot broadcast " + shape_str(a) + " with " + shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_strides(const Tensor& t, const Shape& shape, const char* op) {
  const size_t n = shape.size();
  const size_t r = static_cast<size_t>(t.dim());
  if (r > n)
    throw std::invalid_argument(std::string(op) + ": cannot broadcast " + shape_str(t.shape()) + " to " +
                                shape_str(shape));
  Shape st(n, 0);
  for (size_t i = 0; i < r; ++i) {
    const size_t j = n - r + i;
    const int64_t s = t.shape()[i];
    if (s == shape[j]) st[j] = s == 1 ? 0 : t.strides()[i];
    else if (s == 1) st[j] = 0;
    else
      throw std::invalid_argument(std::string(op) + ": cannot broadcast " + shape_str(t.shape()) + " to " +
                                  shape_str(shape));
  }
  return st;
}

kern::IterParams make_iter(const Shape& shape, const Tensor* const* operands, int n, const char* op) {
  if (n > kern::kIterMaxOps) throw std::logic_error("make_iter: too many operands");
  if (operands[0]->shape() != shape)
    throw std::invalid_argument(std::string(op) + ": output has shape " + shape_str(operands[0]->shape()) +
                                ", expected " + shape_str(shape));
  kern::IterParams p;
  p.nops = n;
  p.numel = shape_numel(shape);
  Shape strides[kern::kIterMaxOps];
  for (int k = 0; k < n; ++k) {
    strides[k] = broadcast_strides(*operands[k], shape, op);
    p.data[k] = operands[k]->data_ptr();
  }
  // Keep dims of size != 1 (all of them when numel is 0: kernels return early anyway),
  // then merge each dim into its inner neighbour when every operand is contiguous across
  // the pair. Walking from the innermost dim keeps row-major order.
  int64_t sh[kMaxDims];
  int64_t st[kern::kIterMaxOps][kMaxDims];
  int nd = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    sh[nd] = shape[d];
    for (int k = 0; k < n; ++k) st[k][nd] = strides[k][d];
    ++nd;
  }
  // merged dims are written right-aligned into p, innermost last
  int out = kMaxDims;
  for (int d = nd - 1; d >= 0; --d) {
    if (out < kMaxDims) {
      bool mergeable = true;
      for (int k = 0; k < n; ++k)
        if (st[k][d] != p.strides[k][out] * p.shape[out]) mergeable = false;
      if (mergeable) {
        p.shape[out] *= sh[d];
        continue;
      }
    }
    --out;
    p.shape[out] = sh[d];
    for (int k = 0; k < n; ++k) p.strides[k][out] = st[k][d];
  }
  p.ndim = kMaxDims - out;
  for (int d = 0; d < p.ndim; ++d) {
    p.shape[d] = p.shape[out + d];
    for (int k = 0; k < n; ++k) p.strides[k][d] = p.strides[k][out + d];
  }
  for (int d = p.ndim; d < kMaxDims; ++d) {
    p.shape[d] = 0;
    for (int k = 0; k < n; ++k) p.strides[k][d] = 0;
  }
  return p;
}

int64_t wrap_dim(int64_t d, int64_t rank, const char* op, const Shape& shape) {
  const int64_t r = rank == 0 ? 1 : rank;
  if (d < -r || d >= r)
    throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(d) + " out of range for shape " +
                                shape_str(shape));
  return d < 0 ? d + r : d;
}

void check_defined(const Tensor& a, const char* op) {
  if (!a.defined()) throw std::invalid_argument(std::string(op) + ": undefined tensor");
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op);
  check_defined(b, op);
  if (a.device() != b.device())
    throw std::invalid_argument(std::string(op) + ": tensors on different devices (" + a.device().str() + " " +
                                shape_str(a.shape()) + " and " + b.device().str() + " " + shape_str(b.shape()) + ")");
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype())
    throw std::invalid_argument(std::string(op) + ": dtypes differ (" + dtype_name(a.dtype()) + " " +
                                shape_str(a.shape()) + " and " + dtype_name(b.dtype()) + " " + shape_str(b.shape()) +
                                "); convert first with Tensor::to(dtype)");
}

void check_float(const Tensor& a, const char* op) {
  check_defined(a, op);
  if (!is_floating(a.dtype()))
    throw std::invalid_argument(std::string(op) + ": needs a float dtype (f32, f64, bf16, f16), got " +
                                dtype_name(a.dtype()) + " " + shape_str(a.shape()));
}

}  // namespace lt::detail
