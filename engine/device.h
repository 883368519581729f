// Devices and streams of the tensor runtime.
//
//   lt::Device d = lt::cuda_available() ? lt::Device::cuda(0) : lt::Device::cpu();
//   lt::Stream s = lt::current_stream(d);          // default stream unless set
//   { lt::StreamGuard g(lt::Stream::create(d));    // ops on d now enqueue on the new stream
//     ... }                                        // previous current stream restored
//   lt::synchronize(d);                            // waits for all work on d
//
// Every op runs on the current stream of its tensors' device (per thread, per device).
// The CPU backend executes synchronously; its "stream" is a placeholder with id 0.
// Without a usable GPU (no CUDA in the build, no device, driver error) cuda_available()
// is false; default_device() then logs one line saying why, once per process.
#pragma once
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "allocator/backend.h"

namespace lt {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = -1;  // -1 for the CPU, >= 0 for a CUDA device

  static constexpr Device cpu() { return Device{DeviceType::cpu, -1}; }
  static constexpr Device cuda(int i = 0) { return Device{DeviceType::cuda, i}; }
  constexpr bool is_cpu() const { return type == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type == DeviceType::cuda; }
  constexpr bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
  // Parses "cpu", "cuda", "cuda:N"; throws std::invalid_argument naming the string.
  static Device parse(const std::string& s);
};
std::ostream& operator<<(std::ostream& os, const Device& d);

// True when this build has CUDA and at least one device works: the allocator's probe
// (allocator/backend.h), checked once per process.
using alloc::cuda_available;
using alloc::cuda_device_count;  // 0 without CUDA
// cuda:0 when cuda_available(), else cpu; the first call without CUDA logs one line
// ("CUDA unavailable (...): using the CPU backend").
Device default_device();

// A stream on a device. Copyable handle; streams made with create() are destroyed when
// the last handle goes away (after the caller is done with them: no implicit sync).
class Stream {
 public:
  Stream() = default;                           // the CPU placeholder stream
  static Stream default_stream(Device device);  // legacy default stream (id 0)
  static Stream create(Device device);          // a new non-blocking CUDA stream
  Device device() const { return device_; }
  // The cudaStream_t as an integer (0 = default stream; 0 on the CPU). Same value as
  // lt::alloc::StreamId, so it can be passed to the caching allocator directly.
  uintptr_t id() const { return id_; }
  void* handle() const { return reinterpret_cast<void*>(id_); }  // cast to cudaStream_t
  void synchronize() const;                                      // no-op on the CPU
  bool operator==(const Stream& o) const { return device_ == o.device_ && id_ == o.id_; }

 private:
  Device device_ = Device::cpu();
  uintptr_t id_ = 0;
  std::shared_ptr<void> owner_;  // destroys a created stream
};

// Current stream of `device` on this thread (default stream unless set).
Stream current_stream(Device device);
void set_current_stream(const Stream& stream);

// RAII: makes `stream` current for its device; restores the previous one on exit.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

// A point in a stream's work (a cudaEvent_t; on the CPU a placeholder whose work is always
// complete). Copyable handle; the event is destroyed with the last handle (safe once the
// records and waits that use it are enqueued).
//
//   lt::Event e = lt::Event::create(dev, /*timing=*/false);
//   e.record(compute);                 // the work enqueued on `compute` so far
//   lt::stream_wait_event(comm, e);    // `comm` runs what follows only after that work
class Event {
 public:
  Event() = default;  // undefined: record() throws
  static Event create(Device device, bool timing = false);
  bool defined() const { return device_.is_cpu() ? cpu_defined_ : owner_ != nullptr; }
  Device device() const { return device_; }
  void record(const Stream& stream);             // stream on this event's device
  bool query() const;                            // the recorded work has completed (true on the CPU)
  void synchronize() const;                      // waits for it
  void* handle() const { return owner_.get(); }  // cast to cudaEvent_t
  // Milliseconds between two recorded, completed timing events of one device (0 on the CPU).
  static double elapsed_ms(const Event& start, const Event& end);

 private:
  Device device_ = Device::cpu();
  bool cpu_defined_ = false;
  std::shared_ptr<void> owner_;
};
// `waiter` runs the work enqueued on it after this call only once `event`'s recorded work has
// completed (cudaStreamWaitEvent; no-op on the CPU). Counts as device work for the timers.
void stream_wait_event(const Stream& waiter, const Event& event);
// `waiter` waits for everything enqueued on `on` so far (an event recorded on `on`, then waited).
void stream_wait(const Stream& waiter, const Stream& on);

// Waits for all work on `device` (cudaDeviceSynchronize; no-op on the CPU).
void synchronize(Device device);
// Sets the calling thread's CUDA device (cudaSetDevice) when `device` is CUDA.
void set_device(Device device);

}  // namespace lt
