// Host staging memory and the asynchronous copies through it (engine/staging.h).
#include "engine/staging.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/detail.h"
#include "kernels/launch.h"

#if LINTRAIN_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#endif

namespace lt {

HostStaging::HostStaging(Device device, size_t slot_bytes, int slots) : device_(device) {
  std::unique_ptr<alloc::Backend> backend =
      device.is_cuda() ? alloc::make_pinned_host_backend(device.index) : std::make_unique<alloc::HostBackend>();
  ring_ = std::make_shared<alloc::StagingRing>(std::move(backend), slot_bytes, slots);
}

HostStaging::Lease HostStaging::acquire() {
  Lease l;
  l.ring_ = ring_;
  l.slot_ = ring_->acquire();
  l.data_ = ring_->data(l.slot_);
  l.device_ = device_;
  return l;
}

HostStaging::Lease::Lease(Lease&& o) noexcept
    : ring_(std::move(o.ring_)), slot_(o.slot_), data_(o.data_), device_(o.device_) {
  o.ring_.reset();
  o.slot_ = -1;
  o.data_ = nullptr;
}

HostStaging::Lease& HostStaging::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    reset();
    ring_ = std::move(o.ring_);
    slot_ = o.slot_;
    data_ = o.data_;
    device_ = o.device_;
    o.ring_.reset();
    o.slot_ = -1;
    o.data_ = nullptr;
  }
  return *this;
}

HostStaging::Lease::~Lease() { reset(); }

void HostStaging::Lease::reset() {
  if (ring_) ring_->release(slot_);
  ring_.reset();
  slot_ = -1;
  data_ = nullptr;
}

void HostStaging::Lease::record(const Stream& stream) {
  if (!ring_) throw std::invalid_argument("HostStaging::Lease::record: empty lease");
  ring_->record(slot_, stream.id());
}

bool HostStaging::Lease::ready() const { return !ring_ || ring_->ready(slot_); }

void HostStaging::Lease::wait() const {
  if (ring_) ring_->wait(slot_);
}

namespace {

void check_copy(const char* op, const HostStaging::Lease& l, const Tensor& t, size_t offset) {
  if (!l) throw std::invalid_argument(std::string(op) + ": empty lease");
  if (!t.defined() || !t.is_contiguous())
    throw std::invalid_argument(std::string(op) + ": the tensor must be defined and contiguous, got " +
                                (t.defined() ? shape_str(t.shape()) + " (strided)" : std::string("undefined")));
  if (t.device() != l.device())
    throw std::invalid_argument(std::string(op) + ": tensor on " + t.device().str() + ", staging for " +
                                l.device().str());
  if (offset + t.nbytes() > l.bytes())
    throw std::invalid_argument(std::string(op) + ": offset " + std::to_string(offset) + " + " +
                                std::to_string(t.nbytes()) + " bytes of " + shape_str(t.shape()) +
                                " exceed the slot's " + std::to_string(l.bytes()) + " bytes");
}

}  // namespace

void copy_to_device_async(Tensor& dst, HostStaging::Lease& src, size_t offset) {
  check_copy("copy_to_device_async", src, dst, offset);
  const Device dev = dst.device();
  const Stream stream = current_stream(dev);
  const char* from = static_cast<const char*>(src.data()) + offset;
  if (dev.is_cpu()) {
    std::memcpy(dst.data_ptr(), from, dst.nbytes());
  } else {
#if LINTRAIN_WITH_CUDA
    detail::DeviceScope scope(dev);
    note_device_work();
    LT_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), from, dst.nbytes(), cudaMemcpyHostToDevice,
                                  static_cast<cudaStream_t>(stream.handle())));
#else
    throw std::runtime_error("copy_to_device_async to " + dev.str() + ": built without CUDA");
#endif
  }
  src.record(stream);
}

void copy_to_host_async(HostStaging::Lease& dst, const Tensor& src, size_t offset) {
  check_copy("copy_to_host_async", dst, src, offset);
  const Device dev = src.device();
  const Stream stream = current_stream(dev);
  char* to = static_cast<char*>(dst.data()) + offset;
  if (dev.is_cpu()) {
    std::memcpy(to, src.data_ptr(), src.nbytes());
  } else {
#if LINTRAIN_WITH_CUDA
    detail::DeviceScope scope(dev);
    note_device_work();
    LT_CUDA_CHECK(cudaMemcpyAsync(to, src.data_ptr(), src.nbytes(), cudaMemcpyDeviceToHost,
                                  static_cast<cudaStream_t>(stream.handle())));
#else
    throw std::runtime_error("copy_to_host_async from " + dev.str() + ": built without CUDA");
#endif
  }
  dst.record(stream);
}

}  // namespace lt
