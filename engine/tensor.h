// Tensor: a strided view of refcounted storage on one device.
//
//   Tensor x = Tensor::empty({B, T, H, D}, DType::f32, Device::cuda(0));  // [B,T,H,D]
//   Tensor y = x.narrow(1, 0, 64).transpose(1, 2);   // views: share x's storage, no copy
//   Tensor z = y.contiguous();                        // fresh row-major copy
//   std::vector<double> v = z.to_vector();           // host copy, any dtype -> double
//
// Model. shape and strides are in elements (int64; strides may be 0 for broadcast views,
// never negative). offset() is in elements from the storage base. A tensor of rank 0 has
// shape {} and one element. At most kMaxDims (8) dims.
// Storage. Memory comes from the caching allocator (allocator/caching_allocator.h):
// lt::alloc::host_allocator() for the CPU, lt::alloc::cuda_allocator(i) for cuda:i,
// allocated on the device's current stream. Storage is refcounted (shared_ptr): views
// keep it alive; the block returns to the allocator when the last view goes. A tensor used
// on a stream other than the one it was allocated on must say so with record_stream().
// empty() leaves memory uninitialised; with the allocator's poison mode on
// (LINTRAIN_ALLOC_POISON=1) it holds 0xFF bytes, which is NaN in every float dtype.
// Streams. Every operation enqueues on lt::current_stream(device) (engine/device.h);
// to_vector(), item(), to_string() and copies to the CPU synchronise that stream.
// Errors. Bad shapes, dims, dtypes or devices throw std::invalid_argument with a message
// naming the operation and the shapes, e.g. "narrow: start 60 + length 8 > size 64 of
// dim 1 of [2, 64, 4]".
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/device.h"
#include "kernels/dtype.h"

namespace lt {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);     // "[2, 3, 4]"
int64_t shape_numel(const Shape& s);       // product, 1 for {}
Shape contiguous_strides(const Shape& s);  // row-major strides in elements

// Refcounted block of device or host memory from the caching allocator.
class Storage {
 public:
  // `bytes` from the allocator of `device`, on its current stream.
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // Marks the block as used by work on `stream` (lt::alloc::CachingAllocator::record_stream).
  void record_stream(const Stream& stream);

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  void* allocator_ = nullptr;  // lt::alloc::CachingAllocator*
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false, every other call throws

  // ---- factories (all outputs contiguous) -------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
  // Host values (row-major, size must equal shape's numel) converted to `dtype` with the
  // runtime's conversion rules (round-to-nearest-even for f32/bf16/f16; ints truncate).
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32,
                            Device device = Device::cpu());
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, DType dtype = DType::f32,
                            Device device = Device::cpu());
  static Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype = DType::i64,
                            Device device = Device::cpu());
  // Wraps existing storage (advanced; used by views and by arenas carving one block).
  Tensor(std::shared_ptr<Storage> storage, int64_t offset, Shape shape, Shape strides, DType dtype);

  // ---- metadata ------------------------------------------------------------------------
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;    // d may be negative (-1 = last)
  int64_t stride(int64_t d) const;  // d may be negative
  int64_t numel() const { return shape_numel(shape_); }
  int64_t offset() const { return offset_; }  // elements from the storage base
  DType dtype() const { return dtype_; }
  size_t itemsize() const { return dtype_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  Device device() const;
  bool is_contiguous() const;  // row-major dense (size-1 dims' strides ignored)
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  void* data_ptr() const;  // address of element 0 (storage base + offset)
  template <class T>
  T* data() const {
    return static_cast<T*>(data_ptr());
  }
  void record_stream(const Stream& stream) const { storage_->record_stream(stream); }

  // ---- views (share storage, never copy) -----------------------------------------------
  // narrow: elements [start, start+length) of dim d. slice: [start, end) with step >= 1;
  // negative start/end count from the end (Python rules, clamped like Python's slicing).
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  Tensor slice(int64_t d, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t d, int64_t index) const;  // removes dim d
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor unsqueeze(int64_t d) const;  // d in [-dim()-1, dim()]
  Tensor squeeze(int64_t d) const;    // dim d must have size 1
  // view: same numel; one entry may be -1 (inferred). Requires strides compatible with the
  // new shape (true for contiguous tensors); otherwise throws (use reshape).
  Tensor view(const Shape& shape) const;
  // expand: broadcast size-1 dims (and new leading dims) to `shape` with stride 0.
  // -1 keeps a dim. Write to an expanded tensor only if you know what you are doing.
  Tensor expand(const Shape& shape) const;

  // ---- copies -------------------------------------------------------------------------
  Tensor reshape(const Shape& shape) const;  // view() when possible, else a contiguous copy
  Tensor contiguous() const;                 // *this if contiguous, else a fresh copy
  Tensor clone() const;                      // always a fresh contiguous copy
  Tensor to(Device device) const;            // *this if already there
  Tensor to(DType dtype) const;              // *this if already that dtype (see ops::convert)
  // Copies src into this tensor (possibly a strided view): src broadcasts to this shape,
  // converts dtype, may live on another device. Returns *this.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);  // converted to dtype()
  Tensor& zero_() { return fill_(0.0); }

  // ---- host access for tests and debugging (synchronise) ------------------------------
  std::vector<double> to_vector() const;  // row-major logical order, any dtype
  double item() const;                    // numel() must be 1
  // "Tensor[2, 3] f32 cuda:0\n[[1, 2, 3],\n [4, 5, 6]]", at most max_elements shown
  // (the rest elided with "...").
  std::string to_string(int64_t max_elements = 64) const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::f32;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Elementwise arithmetic sugar for lt::ops::{add, sub, mul, div, neg} (engine/ops.h).
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);

}  // namespace lt
