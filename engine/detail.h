// Engine internals shared by tensor.cpp, device.cpp and the ops_*.cpp files. Not part of
// the public API: include engine/tensor.h, engine/device.h or engine/ops.h instead.
#pragma once
#include <cstdint>
#include <string>

#include "engine/device.h"
#include "engine/tensor.h"
#include "kernels/iter.h"
#include "kernels/table.h"

namespace lt::detail {

// The op table of a device's backend (throws when CUDA is not built or unusable).
const kern::KernelTable& kernels_for(Device device);

// Makes `device` the calling thread's CUDA device for the scope (no-op for the CPU).
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

// Everything an op needs to run on one device: the scope, the table, the current stream.
struct Exec {
  explicit Exec(Device d) : device(d), scope(d), k(kernels_for(d)), stream(current_stream(d).id()) {}
  Device device;
  DeviceScope scope;
  const kern::KernelTable& k;
  uintptr_t stream;
};

// Copies `bytes` between two contiguous buffers on any devices. Ordered on the current
// streams; returns after the data is in host memory when the destination is the CPU.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

// Broadcast shape of a and b (numpy rules); throws "<op>: cannot broadcast [..] with [..]".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Strides of t viewed with shape `shape` (t broadcast to it; size-1 / missing dims get
// stride 0). Throws if t does not broadcast to shape.
Shape broadcast_strides(const Tensor& t, const Shape& shape, const char* op);

// IterParams over `shape` for operands (operand 0 = out, which must have exactly `shape`),
// each broadcast to `shape`; size-1 dims dropped, mergeable dims merged.
kern::IterParams make_iter(const Shape& shape, const Tensor* const* operands, int n, const char* op);

// Normalises a possibly negative dim against rank; throws naming op and shape.
int64_t wrap_dim(int64_t d, int64_t rank, const char* op, const Shape& shape);

// Checks: same device (and defined) for all; same dtype; dtype is a float dtype.
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_float(const Tensor& a, const char* op);
void check_defined(const Tensor& a, const char* op);

}  // namespace lt::detail
