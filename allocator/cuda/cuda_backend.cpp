// CUDA raw backends: cudaMalloc/cudaFree on one device, cudaEvent* for stream ordering,
// cudaMemsetAsync for poison fills; and the pinned host backend (cudaHostAlloc /
// cudaFreeHost, the same events, memset for fills). Every call runs with the backend's device current and
// restores the caller's device afterwards. Events are created with cudaEventDisableTiming
// and recycled through a free list (creating one costs about a microsecond).
#include <cuda_runtime.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "allocator/backend.h"

namespace lt::alloc {
namespace {

[[noreturn]] void fail(cudaError_t err, const char* what, int device) {
  throw std::runtime_error(std::string("lt::alloc CUDA backend (device ") + std::to_string(device) + "): " + what +
                           " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

#define LT_ALLOC_CUDA(expr, what)                             \
  do {                                                        \
    cudaError_t lt_err_ = (expr);                             \
    if (lt_err_ != cudaSuccess) fail(lt_err_, what, device_); \
  } while (0)

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
    else previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  ~CudaBackend() override {
    DeviceGuard g(device_);
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  }
  const char* name() const override { return "cuda"; }
  int device() const override { return device_; }

  void* raw_alloc(size_t bytes) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error so later calls do not report it
      return nullptr;
    }
    LT_ALLOC_CUDA(err, "cudaMalloc");
    return p;
  }
  void raw_free(void* ptr) override {
    DeviceGuard g(device_);
    LT_ALLOC_CUDA(cudaFree(ptr), "cudaFree");
  }
  bool memory_info(size_t& free_bytes, size_t& total_bytes) override {
    DeviceGuard g(device_);
    return cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
  }
  EventId event_record(StreamId stream) override {
    DeviceGuard g(device_);
    cudaEvent_t e;
    if (!spare_events_.empty()) {
      e = spare_events_.back();
      spare_events_.pop_back();
    } else {
      LT_ALLOC_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    LT_ALLOC_CUDA(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)), "cudaEventRecord");
    return reinterpret_cast<EventId>(e);
  }
  bool event_query(EventId event) override {
    cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) return false;
    fail(err, "cudaEventQuery", device_);
  }
  void event_synchronize(EventId event) override {
    LT_ALLOC_CUDA(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
  }
  void event_destroy(EventId event) override { spare_events_.push_back(reinterpret_cast<cudaEvent_t>(event)); }
  void fill(void* ptr, size_t bytes, uint8_t pattern, StreamId stream) override {
    DeviceGuard g(device_);
    LT_ALLOC_CUDA(cudaMemsetAsync(ptr, pattern, bytes, reinterpret_cast<cudaStream_t>(stream)), "cudaMemsetAsync");
  }

 protected:
  int device_;

 private:
  std::vector<cudaEvent_t> spare_events_;
};

// Page-locked host memory; events as above, on device_'s streams.
class PinnedHostBackend final : public CudaBackend {
 public:
  explicit PinnedHostBackend(int device) : CudaBackend(device) {}
  const char* name() const override { return "pinned"; }
  int device() const override { return -1; }
  void* raw_alloc(size_t bytes) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    LT_ALLOC_CUDA(err, "cudaHostAlloc");
    return p;
  }
  void raw_free(void* ptr) override { LT_ALLOC_CUDA(cudaFreeHost(ptr), "cudaFreeHost"); }
  bool memory_info(size_t&, size_t&) override { return false; }
  void fill(void* ptr, size_t bytes, uint8_t pattern, StreamId) override { std::memset(ptr, pattern, bytes); }
};

}  // namespace

namespace {
struct CudaProbe {
  int count = 0;
  std::string why;  // empty when count > 0
};
const CudaProbe& probe() {
  static const CudaProbe p = [] {
    CudaProbe r;
    cudaError_t err = cudaGetDeviceCount(&r.count);
    if (err != cudaSuccess) {
      r.why = cudaGetErrorString(err);
      r.count = 0;
      (void)cudaGetLastError();  // clear the sticky error state
    } else if (r.count == 0) {
      r.why = "no CUDA device found";
    }
    return r;
  }();
  return p;
}
}  // namespace

bool cuda_available() { return probe().count > 0; }
int cuda_device_count() { return probe().count; }
const std::string& cuda_unavailable_reason() { return probe().why; }

std::unique_ptr<Backend> make_cuda_backend(int device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("lt::alloc: CUDA allocator unavailable: cudaGetDeviceCount failed: ") +
                             cudaGetErrorString(err));
  if (device < 0 || device >= count)
    throw std::runtime_error("lt::alloc: CUDA allocator for device " + std::to_string(device) + " requested, but " +
                             std::to_string(count) + " device(s) are visible");
  return std::make_unique<CudaBackend>(device);
}

std::unique_ptr<Backend> make_pinned_host_backend(int device) {
  (void)make_cuda_backend(device);  // the same checks and messages
  return std::make_unique<PinnedHostBackend>(device);
}

}  // namespace lt::alloc
