// Host backend, the process-wide allocators, and the CUDA factory stubs of CPU-only builds.
#include "allocator/backend.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "allocator/caching_allocator.h"

namespace lt::alloc {

HostBackend::HostBackend(size_t capacity_bytes) : capacity_(capacity_bytes) {}

void* HostBackend::raw_alloc(size_t bytes) {
  if (capacity_ != 0 && used_ + bytes > capacity_) return nullptr;
  void* p = std::aligned_alloc(kMinBlockSize, bytes);
  if (!p) return nullptr;
  sizes_.emplace(p, bytes);
  used_ += bytes;
  return p;
}

void HostBackend::raw_free(void* ptr) {
  auto it = sizes_.find(ptr);
  if (it == sizes_.end()) throw std::logic_error("lt::alloc::HostBackend::raw_free: unknown segment");
  used_ -= it->second;
  sizes_.erase(it);
  std::free(ptr);
}

bool HostBackend::memory_info(size_t& free_bytes, size_t& total_bytes) {
  if (capacity_ == 0) return false;
  total_bytes = capacity_;
  free_bytes = capacity_ - used_;
  return true;
}

// Host work is synchronous: an event is complete the moment it is recorded.
EventId HostBackend::event_record(StreamId) { return next_event_++; }
bool HostBackend::event_query(EventId) { return true; }
void HostBackend::event_synchronize(EventId) {}
void HostBackend::event_destroy(EventId) {}

void HostBackend::fill(void* ptr, size_t bytes, uint8_t pattern, StreamId) { std::memset(ptr, pattern, bytes); }

CachingAllocator& host_allocator() {
  // Never destroyed: other static objects may free into it during exit.
  static CachingAllocator* allocator = new CachingAllocator(std::make_unique<HostBackend>());
  return *allocator;
}

CachingAllocator& cuda_allocator(int device) {
  constexpr int kMaxDevices = 64;
  static std::mutex mutex;
  static std::array<CachingAllocator*, kMaxDevices> allocators{};
  if (device < 0 || device >= kMaxDevices)
    throw std::runtime_error("lt::alloc::cuda_allocator: invalid device index " + std::to_string(device));
  std::lock_guard<std::mutex> lock(mutex);
  if (!allocators[device]) allocators[device] = new CachingAllocator(make_cuda_backend(device));  // throws if unusable
  return *allocators[device];
}

#if !LINTRAIN_WITH_CUDA
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
const std::string& cuda_unavailable_reason() {
  static const std::string why = "built without CUDA";
  return why;
}
std::unique_ptr<Backend> make_cuda_backend(int device) {
  throw std::runtime_error("lt::alloc: CUDA allocator for device " + std::to_string(device) +
                           " requested, but this build has no CUDA backend (nvcc was not found at configure time)");
}
std::unique_ptr<Backend> make_pinned_host_backend(int device) {
  throw std::runtime_error("lt::alloc: pinned host memory for CUDA device " + std::to_string(device) +
                           " requested, but this build has no CUDA backend (nvcc was not found at configure time)");
}
#endif

}  // namespace lt::alloc
