// Devices, streams and the CUDA runtime calls of the engine (all guarded by
// LINTRAIN_WITH_CUDA; a CPU-only build compiles the CPU half only).
#include "engine/device.h"

#include <cstring>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "engine/detail.h"
#include "engine/log.h"
#include "kernels/launch.h"

#if LINTRAIN_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#endif

namespace lt {

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5) {
    const std::string num = s.substr(5);
    if (num.find_first_not_of("0123456789") == std::string::npos && num.size() < 6) return cuda(std::stoi(num));
  }
  throw std::invalid_argument("unknown device '" + s + "' (expected cpu, cuda or cuda:N)");
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

namespace {
// Current stream per device index, per thread (index 0 of the vector = cuda:0).
thread_local std::vector<Stream> t_current;
}  // namespace

Device default_device() {
  static const bool usable = [] {
    if (cuda_available()) return true;
    log_init();
    spdlog::info("CUDA unavailable ({}): using the CPU backend", alloc::cuda_unavailable_reason());
    return false;
  }();
  return usable ? Device::cuda(0) : Device::cpu();
}

Stream Stream::default_stream(Device device) {
  Stream s;
  s.device_ = device;
  return s;
}

Stream Stream::create(Device device) {
  Stream s;
  s.device_ = device;
  if (device.is_cpu()) return s;
#if LINTRAIN_WITH_CUDA
  detail::DeviceScope scope(device);
  cudaStream_t cs = nullptr;
  LT_CUDA_CHECK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  s.id_ = reinterpret_cast<uintptr_t>(cs);
  s.owner_ = std::shared_ptr<void>(cs, [](void* p) { cudaStreamDestroy(static_cast<cudaStream_t>(p)); });
#else
  throw std::runtime_error("Stream::create(" + device.str() + "): built without CUDA");
#endif
  return s;
}

void Stream::synchronize() const {
  if (device_.is_cpu()) return;
#if LINTRAIN_WITH_CUDA
  LT_CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(id_)));
#endif
}

Stream current_stream(Device device) {
  if (device.is_cpu()) return Stream();
  const size_t i = static_cast<size_t>(device.index);
  if (i < t_current.size() && t_current[i].device() == device) return t_current[i];
  return Stream::default_stream(device);
}

void set_current_stream(const Stream& stream) {
  const Device d = stream.device();
  if (d.is_cpu()) return;
  const size_t i = static_cast<size_t>(d.index);
  if (t_current.size() <= i) t_current.resize(i + 1);
  t_current[i] = stream;
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device())) {
  set_current_stream(stream);
}
StreamGuard::~StreamGuard() { set_current_stream(previous_); }

Event Event::create(Device device, bool timing) {
  Event e;
  e.device_ = device;
  if (device.is_cpu()) {
    e.cpu_defined_ = true;
    return e;
  }
#if LINTRAIN_WITH_CUDA
  detail::DeviceScope scope(device);
  cudaEvent_t ev = nullptr;
  LT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming));
  e.owner_ = std::shared_ptr<void>(ev, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
#else
  (void)timing;
  throw std::runtime_error("Event::create(" + device.str() + "): built without CUDA");
#endif
  return e;
}

void Event::record(const Stream& stream) {
  if (!defined()) throw std::invalid_argument("Event::record: undefined event");
  if (stream.device() != device_)
    throw std::invalid_argument("Event::record: event on " + device_.str() + ", stream on " + stream.device().str());
  if (device_.is_cpu()) return;
#if LINTRAIN_WITH_CUDA
  detail::DeviceScope scope(device_);
  LT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle()), static_cast<cudaStream_t>(stream.handle())));
#endif
}

bool Event::query() const {
  if (device_.is_cpu()) return true;
#if LINTRAIN_WITH_CUDA
  const cudaError_t rc = cudaEventQuery(static_cast<cudaEvent_t>(handle()));
  if (rc == cudaErrorNotReady) return false;
  LT_CUDA_CHECK(rc);
#endif
  return true;
}

void Event::synchronize() const {
  if (device_.is_cpu()) return;
#if LINTRAIN_WITH_CUDA
  LT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle())));
#endif
}

double Event::elapsed_ms(const Event& start, const Event& end) {
  if (start.device_.is_cpu() || end.device_.is_cpu()) return 0.0;
#if LINTRAIN_WITH_CUDA
  float ms = 0.0f;
  LT_CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle()), static_cast<cudaEvent_t>(end.handle())));
  return ms;
#else
  return 0.0;
#endif
}

void stream_wait_event(const Stream& waiter, const Event& event) {
  if (waiter.device().is_cpu()) return;
#if LINTRAIN_WITH_CUDA
  note_device_work();
  detail::DeviceScope scope(waiter.device());
  LT_CUDA_CHECK(
      cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter.handle()), static_cast<cudaEvent_t>(event.handle()), 0));
#else
  (void)event;
#endif
}

void stream_wait(const Stream& waiter, const Stream& on) {
  if (waiter.device().is_cpu() || waiter == on) return;
  Event e = Event::create(on.device());
  e.record(on);
  stream_wait_event(waiter, e);
}

void synchronize(Device device) {
  if (device.is_cpu()) return;
#if LINTRAIN_WITH_CUDA
  detail::DeviceScope scope(device);
  LT_CUDA_CHECK(cudaDeviceSynchronize());
#endif
}

void set_device(Device device) {
  if (device.is_cpu()) return;
#if LINTRAIN_WITH_CUDA
  LT_CUDA_CHECK(cudaSetDevice(device.index));
#endif
}

namespace detail {

const kern::KernelTable& kernels_for(Device device) {
  if (device.is_cpu()) return kern::cpu_kernels();
#if LINTRAIN_WITH_CUDA
  if (!cuda_available() || device.index >= cuda_device_count())
    throw std::runtime_error("device " + device.str() +
                             " is not usable (cuda_device_count() = " + std::to_string(cuda_device_count()) + ")");
  return kern::cuda_kernels();
#else
  throw std::runtime_error("device " + device.str() + " requested, but lintrain was built without CUDA");
#endif
}

DeviceScope::DeviceScope(Device device) {
  if (device.is_cpu()) return;
#if LINTRAIN_WITH_CUDA
  int cur = 0;
  LT_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device.index) {
    LT_CUDA_CHECK(cudaSetDevice(device.index));
    previous_ = cur;
  }
#endif
}
DeviceScope::~DeviceScope() {
#if LINTRAIN_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, bytes);
    return;
  }
#if LINTRAIN_WITH_CUDA
  note_device_work();
  if (dst_device.is_cpu()) {  // device -> host: wait so the host can read it
    DeviceScope scope(src_device);
    auto s = reinterpret_cast<cudaStream_t>(current_stream(src_device).id());
    LT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    LT_CUDA_CHECK(cudaStreamSynchronize(s));
  } else if (src_device.is_cpu()) {  // host -> device: pageable source is staged before return
    DeviceScope scope(dst_device);
    auto s = reinterpret_cast<cudaStream_t>(current_stream(dst_device).id());
    // A graph would record the host address and read it again at every replay, long after
    // the source is gone: a capture must not upload host data (build it on the device).
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    LT_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
    if (capture != cudaStreamCaptureStatusNone)
      throw std::runtime_error("host-to-device copy of " + std::to_string(bytes) +
                               " bytes while the stream is captured as a CUDA graph (the replay would read freed host "
                               "memory); build the tensor on the device instead");
    LT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  } else if (src_device == dst_device) {
    DeviceScope scope(dst_device);
    auto s = reinterpret_cast<cudaStream_t>(current_stream(dst_device).id());
    LT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
  } else {  // across devices: order after the source stream's work, then copy synchronously
    current_stream(src_device).synchronize();
    DeviceScope scope(dst_device);
    auto s = reinterpret_cast<cudaStream_t>(current_stream(dst_device).id());
    LT_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, s));
    LT_CUDA_CHECK(cudaStreamSynchronize(s));
  }
#else
  throw std::runtime_error("copy between " + src_device.str() + " and " + dst_device.str() + ": built without CUDA");
#endif
}

}  // namespace detail
}  // namespace lt
