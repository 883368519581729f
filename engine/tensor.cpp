// Tensor and Storage (engine/tensor.h).
#include "engine/tensor.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "allocator/caching_allocator.h"
#include "engine/detail.h"
#include "engine/ops.h"
#include "kernels/elementwise_ops.h"

namespace lt {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

// ---- Storage ---------------------------------------------------------------------------

std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device) {
  alloc::CachingAllocator& a = device.is_cpu() ? alloc::host_allocator() : alloc::cuda_allocator(device.index);
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = a.allocate(bytes, current_stream(device).id());
  s->bytes_ = bytes;
  s->device_ = device;
  s->allocator_ = &a;
  return s;
}

Storage::~Storage() {
  if (data_) static_cast<alloc::CachingAllocator*>(allocator_)->free(data_);
}

void Storage::record_stream(const Stream& stream) {
  if (data_ && !device_.is_cpu()) static_cast<alloc::CachingAllocator*>(allocator_)->record_stream(data_, stream.id());
}

// ---- construction ------------------------------------------------------------------------

namespace {
void check_shape(const Shape& shape, const char* op) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw std::invalid_argument(std::string(op) + ": shape " + shape_str(shape) + " has more than " +
                                std::to_string(kMaxDims) + " dims");
  for (int64_t d : shape)
    if (d < 0) throw std::invalid_argument(std::string(op) + ": negative size in shape " + shape_str(shape));
}
}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Shape strides, DType dtype)
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), strides_(std::move(strides)),
      dtype_(dtype) {
  check_shape(shape_, "Tensor");
  if (shape_.size() != strides_.size())
    throw std::invalid_argument("Tensor: shape " + shape_str(shape_) + " and strides " + shape_str(strides_) +
                                " differ in rank");
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape, "empty");
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(Storage::allocate(bytes, device), 0, shape, contiguous_strides(shape), dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(0.0);
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  check_shape(shape, "from_vector");
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    throw std::invalid_argument("from_vector: " + std::to_string(values.size()) + " values for shape " +
                                shape_str(shape) + " (" + std::to_string(shape_numel(shape)) + " elements)");
  Tensor host = empty(shape, dtype, Device::cpu());
  kern::visit_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    T* p = host.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = element_from_double<T>(values[i]);
  });
  return host.to(device);
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape, DType dtype, Device device) {
  return from_vector(std::vector<double>(values.begin(), values.end()), shape, dtype, device);
}

Tensor Tensor::from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype, Device device) {
  check_shape(shape, "from_vector");
  if (static_cast<int64_t>(values.size()) != shape_numel(shape))
    throw std::invalid_argument("from_vector: " + std::to_string(values.size()) + " values for shape " +
                                shape_str(shape));
  Tensor host = empty(shape, dtype, Device::cpu());
  kern::visit_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    T* p = host.data<T>();
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_integral_v<T>) p[i] = static_cast<T>(values[i]);
      else p[i] = element_from_double<T>(static_cast<double>(values[i]));
    }
  });
  return host.to(device);
}

// ---- metadata ----------------------------------------------------------------------------

int64_t Tensor::size(int64_t d) const { return shape_.at(detail::wrap_dim(d, dim(), "size", shape_)); }
int64_t Tensor::stride(int64_t d) const { return strides_.at(detail::wrap_dim(d, dim(), "stride", shape_)); }

Device Tensor::device() const {
  if (!storage_) throw std::invalid_argument("device(): undefined tensor");
  return storage_->device();
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  if (!storage_) throw std::invalid_argument("data_ptr(): undefined tensor");
  if (!storage_->data()) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(itemsize());
}

// ---- views ------------------------------------------------------------------------------

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = detail::wrap_dim(d, dim(), "narrow", shape_);
  if (dim() == 0) throw std::invalid_argument("narrow: rank-0 tensor");
  if (start < 0 || length < 0 || start + length > shape_[d])
    throw std::invalid_argument("narrow: start " + std::to_string(start) + " + length " + std::to_string(length) +
                                " > size " + std::to_string(shape_[d]) + " of dim " + std::to_string(d) + " of " +
                                shape_str(shape_));
  Shape sh = shape_;
  sh[d] = length;
  return Tensor(storage_, offset_ + start * strides_[d], sh, strides_, dtype_);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = detail::wrap_dim(d, dim(), "slice", shape_);
  if (dim() == 0) throw std::invalid_argument("slice: rank-0 tensor");
  if (step < 1) throw std::invalid_argument("slice: step " + std::to_string(step) + " must be >= 1");
  const int64_t n = shape_[d];
  auto clampi = [n](int64_t v) {
    if (v < 0) v += n;
    return std::clamp<int64_t>(v, 0, n);
  };
  start = clampi(start);
  end = clampi(end);
  const int64_t len = end > start ? (end - start + step - 1) / step : 0;
  Shape sh = shape_, st = strides_;
  sh[d] = len;
  st[d] = strides_[d] * step;
  return Tensor(storage_, offset_ + (len > 0 ? start * strides_[d] : 0), sh, st, dtype_);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = detail::wrap_dim(d, dim(), "select", shape_);
  if (dim() == 0) throw std::invalid_argument("select: rank-0 tensor");
  if (index < -shape_[d] || index >= shape_[d])
    throw std::invalid_argument("select: index " + std::to_string(index) + " out of range for dim " +
                                std::to_string(d) + " of " + shape_str(shape_));
  if (index < 0) index += shape_[d];
  Shape sh = shape_, st = strides_;
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, offset_ + index * strides_[d], sh, st, dtype_);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = detail::wrap_dim(d0, dim(), "transpose", shape_);
  d1 = detail::wrap_dim(d1, dim(), "transpose", shape_);
  if (dim() == 0) return *this;
  Shape sh = shape_, st = strides_;
  std::swap(sh[d0], sh[d1]);
  std::swap(st[d0], st[d1]);
  return Tensor(storage_, offset_, sh, st, dtype_);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  if (static_cast<int64_t>(dims.size()) != dim())
    throw std::invalid_argument("permute: " + std::to_string(dims.size()) + " dims given for shape " +
                                shape_str(shape_));
  Shape sh(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = detail::wrap_dim(dims[i], dim(), "permute", shape_);
    if (seen[d]) throw std::invalid_argument("permute: dim " + std::to_string(d) + " repeated");
    seen[d] = true;
    sh[i] = shape_[d];
    st[i] = strides_[d];
  }
  return Tensor(storage_, offset_, sh, st, dtype_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  const int64_t r = dim() + 1;
  if (d < -r || d >= r)
    throw std::invalid_argument("unsqueeze: dim " + std::to_string(d) + " out of range for shape " + shape_str(shape_));
  if (d < 0) d += r;
  Shape sh = shape_, st = strides_;
  const int64_t s = d < dim() ? strides_[d] * shape_[d] : 1;
  sh.insert(sh.begin() + d, 1);
  st.insert(st.begin() + d, s);
  return Tensor(storage_, offset_, sh, st, dtype_);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = detail::wrap_dim(d, dim(), "squeeze", shape_);
  if (dim() == 0) return *this;
  if (shape_[d] != 1)
    throw std::invalid_argument("squeeze: dim " + std::to_string(d) + " of " + shape_str(shape_) + " is not 1");
  Shape sh = shape_, st = strides_;
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, offset_, sh, st, dtype_);
}

namespace {
Shape infer_shape(const Shape& requested, int64_t numel, const Shape& from, const char* op) {
  Shape sh = requested;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < sh.size(); ++i) {
    if (sh[i] == -1) {
      if (infer >= 0) throw std::invalid_argument(std::string(op) + ": more than one -1 in " + shape_str(requested));
      infer = static_cast<int>(i);
    } else if (sh[i] < 0) {
      throw std::invalid_argument(std::string(op) + ": invalid shape " + shape_str(requested));
    } else {
      known *= sh[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw std::invalid_argument(std::string(op) + ": cannot infer " + shape_str(requested) + " from " +
                                  shape_str(from));
    sh[infer] = numel / known;
  }
  if (shape_numel(sh) != numel)
    throw std::invalid_argument(std::string(op) + ": shape " + shape_str(requested) + " has " +
                                std::to_string(shape_numel(sh)) + " elements, tensor " + shape_str(from) + " has " +
                                std::to_string(numel));
  return sh;
}

// PyTorch's stride computation for a view: splits the old dims into chunks that are
// contiguous in memory and maps the new dims onto them; nullopt if impossible.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  if (old_shape.empty() || shape_numel(old_shape) == 0) return contiguous_strides(new_shape);
  Shape new_strides(new_shape.size(), 1);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 ||
        (old_shape[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  detail::check_defined(*this, "view");
  const Shape sh = infer_shape(shape, numel(), shape_, "view");
  check_shape(sh, "view");
  auto st = view_strides(shape_, strides_, sh);
  if (!st)
    throw std::invalid_argument("view: cannot view " + shape_str(shape_) + " with strides " + shape_str(strides_) +
                                " as " + shape_str(sh) + " without a copy (use reshape)");
  return Tensor(storage_, offset_, sh, *st, dtype_);
}

Tensor Tensor::expand(const Shape& shape) const {
  detail::check_defined(*this, "expand");
  if (shape.size() < shape_.size())
    throw std::invalid_argument("expand: cannot expand " + shape_str(shape_) + " to fewer dims " + shape_str(shape));
  check_shape(Shape(shape.size(), 0), "expand");
  const size_t lead = shape.size() - shape_.size();
  Shape sh(shape.size()), st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      if (shape[i] < 0)
        throw std::invalid_argument("expand: -1 not allowed for a new leading dim in " + shape_str(shape));
      sh[i] = shape[i];
      continue;
    }
    const int64_t old = shape_[i - lead];
    const int64_t want = shape[i] == -1 ? old : shape[i];
    if (want == old) {
      sh[i] = old;
      st[i] = strides_[i - lead];
    } else if (old == 1) {
      sh[i] = want;
    } else {
      throw std::invalid_argument("expand: cannot expand " + shape_str(shape_) + " to " + shape_str(shape));
    }
  }
  return Tensor(storage_, offset_, sh, st, dtype_);
}

// ---- copies -----------------------------------------------------------------------------

Tensor Tensor::reshape(const Shape& shape) const {
  detail::check_defined(*this, "reshape");
  const Shape sh = infer_shape(shape, numel(), shape_, "reshape");
  if (auto st = view_strides(shape_, strides_, sh)) return Tensor(storage_, offset_, sh, *st, dtype_);
  return clone().view(sh);
}

Tensor Tensor::contiguous() const {
  detail::check_defined(*this, "contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  detail::check_defined(*this, "clone");
  Tensor out = empty(shape_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device device) const {
  detail::check_defined(*this, "to");
  if (device == this->device()) return *this;
  Tensor out = empty(shape_, dtype_, device);
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  detail::check_defined(*this, "to");
  if (dtype == dtype_) return *this;
  return ops::convert(*this, dtype);
}

Tensor& Tensor::copy_(const Tensor& src) {
  detail::check_defined(*this, "copy_");
  detail::check_defined(src, "copy_");
  (void)detail::broadcast_strides(src, shape_, "copy_");  // validates the shapes early
  if (src.device() != device()) {
    // Move the bytes first (contiguous, source dtype), then convert/broadcast locally.
    const Tensor packed = src.contiguous();
    if (is_contiguous() && dtype_ == src.dtype() && shape_ == src.shape()) {
      detail::copy_bytes(data_ptr(), device(), packed.data_ptr(), packed.device(), nbytes());
      return *this;
    }
    Tensor staged = empty(src.shape(), src.dtype(), device());
    detail::copy_bytes(staged.data_ptr(), device(), packed.data_ptr(), packed.device(), staged.nbytes());
    return copy_(staged);
  }
  if (numel() == 0) return *this;
  detail::Exec ex(device());
  const Tensor* ops[2] = {this, &src};
  const kern::IterParams p = detail::make_iter(shape_, ops, 2, "copy_");
  ex.k.convert(dtype_, src.dtype(), p, ex.stream);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  detail::check_defined(*this, "fill_");
  if (numel() == 0) return *this;
  detail::Exec ex(device());
  const Tensor* ops[1] = {this};
  const kern::IterParams p = detail::make_iter(shape_, ops, 1, "fill_");
  ex.k.fill(dtype_, p, value, ex.stream);
  return *this;
}

// ---- host access ------------------------------------------------------------------------

std::vector<double> Tensor::to_vector() const {
  detail::check_defined(*this, "to_vector");
  const Tensor host = to(Device::cpu()).contiguous();
  std::vector<double> out(static_cast<size_t>(numel()));
  kern::visit_dtype(dtype_, [&](auto t) {
    using T = decltype(t);
    const T* p = host.data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = element_to_double(p[i]);
  });
  return out;
}

double Tensor::item() const {
  if (numel() != 1)
    throw std::invalid_argument("item: tensor " + shape_str(shape_) + " has " + std::to_string(numel()) +
                                " elements, expected 1");
  return to_vector()[0];
}

std::string Tensor::to_string(int64_t max_elements) const {
  std::ostringstream os;
  if (!defined()) return "Tensor(undefined)";
  os << "Tensor" << shape_str(shape_) << " " << dtype_name(dtype_) << " " << device().str() << "\n";
  const std::vector<double> v = to_vector();
  const int64_t n = static_cast<int64_t>(v.size());
  const int64_t shown = std::min(n, std::max<int64_t>(max_elements, 0));
  // Brackets by dimension: open at multiples of the trailing products.
  const Shape st = contiguous_strides(shape_);
  os.precision(6);
  if (dim() == 0) {
    os << v[0];
    return os.str();
  }
  for (int64_t i = 0; i < shown; ++i) {
    int opens = 0;
    for (int64_t d = 0; d < dim(); ++d)
      if (i % (st[d] * std::max<int64_t>(shape_[d], 1)) == 0) ++opens;
    if (i > 0) os << (opens > 0 ? ",\n" + std::string(static_cast<size_t>(dim() - opens), ' ') : ", ");
    os << std::string(static_cast<size_t>(opens), '[');
    os << v[i];
    int closes = 0;
    for (int64_t d = 0; d < dim(); ++d)
      if ((i + 1) % (st[d] * std::max<int64_t>(shape_[d], 1)) == 0) ++closes;
    os << std::string(static_cast<size_t>(closes), ']');
  }
  if (shown < n) os << ", ... (" << (n - shown) << " more)";
  if (n == 0) os << "[]";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
Tensor operator-(const Tensor& a) { return ops::neg(a); }
Tensor operator+(const Tensor& a, double s) { return ops::add_scalar(a, s); }
Tensor operator*(const Tensor& a, double s) { return ops::mul_scalar(a, s); }
Tensor operator*(double s, const Tensor& a) { return ops::mul_scalar(a, s); }

}  // namespace lt
