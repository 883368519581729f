// Raw-memory backends under the caching allocator.
//
// The pool logic (allocator/caching_allocator.cpp) never calls malloc or CUDA itself: it
// asks a Backend for whole segments and for stream events. Three backends exist:
//   HostBackend   aligned malloc/free; streams are meaningless on the host, so every
//                 event is complete the moment it is recorded.           (always built)
//   CUDA backend  cudaMalloc/cudaFree on one device, cudaEvent* for stream ordering,
//                 cudaMemsetAsync for poison fills.   (allocator/cuda/, LINTRAIN_WITH_CUDA)
//   pinned host   cudaHostAlloc/cudaFreeHost (page-locked host memory, so host <-> device
//                 copies run without blocking the host), events on one device's streams;
//                 under the staging ring (allocator/staging_ring.h). (allocator/cuda/)
//   fake backends in tests/allocator/: limited capacity, events completed by hand, so
//                 every pool rule (OOM retry, cross-stream reuse) is tested on the CPU.
//
// A backend is used by one CachingAllocator under that allocator's mutex: implementations
// need not be thread-safe themselves.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

namespace lt::alloc {

// A stream, as an integer: a cudaStream_t cast with reinterpret_cast<StreamId>(s);
// 0 is the default (legacy) stream. Host backends ignore it.
using StreamId = uintptr_t;

// An opaque event handle issued by a backend (e.g. a cudaEvent_t cast). 0 is never issued.
using EventId = uintptr_t;

class Backend {
 public:
  virtual ~Backend() = default;

  // Short name used in messages and dumps: "host", "cuda", "fake".
  virtual const char* name() const = 0;
  // Device index (>= 0) for device memory, -1 for host memory.
  virtual int device() const = 0;

  // A new segment of exactly `bytes` bytes (bytes is a multiple of 512), aligned to at
  // least 256 bytes; nullptr when the memory is exhausted (never throws for OOM).
  virtual void* raw_alloc(size_t bytes) = 0;
  // Returns a segment obtained from raw_alloc. The allocator only calls it for segments
  // no stream can still be using (all their events have completed or were synchronized).
  virtual void raw_free(void* ptr) = 0;

  // Total capacity and currently free bytes of the memory this backend draws from, when
  // known (cudaMemGetInfo); false when unknown (host). Used in out-of-memory messages.
  virtual bool memory_info(size_t& free_bytes, size_t& total_bytes) {
    (void)free_bytes;
    (void)total_bytes;
    return false;
  }

  // Stream ordering. record_event marks "everything enqueued on `stream` so far";
  // event_query says whether that work has completed (non-blocking); event_synchronize
  // blocks until it has; event_destroy releases the handle (called once per event).
  virtual EventId event_record(StreamId stream) = 0;
  virtual bool event_query(EventId event) = 0;
  virtual void event_synchronize(EventId event) = 0;
  virtual void event_destroy(EventId event) = 0;

  // Fills `bytes` bytes at `ptr` with the byte `pattern`, ordered on `stream`
  // (host: memset; CUDA: cudaMemsetAsync). Used by poison mode.
  virtual void fill(void* ptr, size_t bytes, uint8_t pattern, StreamId stream) = 0;
};

// Host memory: aligned_alloc (alignment 512), optional capacity limit in bytes
// (0 = unlimited; raw_alloc returns nullptr once the limit would be exceeded).
class HostBackend final : public Backend {
 public:
  explicit HostBackend(size_t capacity_bytes = 0);
  const char* name() const override { return "host"; }
  int device() const override { return -1; }
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) override;
  bool memory_info(size_t& free_bytes, size_t& total_bytes) override;
  EventId event_record(StreamId stream) override;
  bool event_query(EventId event) override;
  void event_synchronize(EventId event) override;
  void event_destroy(EventId event) override;
  void fill(void* ptr, size_t bytes, uint8_t pattern, StreamId stream) override;

 private:
  size_t capacity_;
  size_t used_ = 0;
  std::unordered_map<void*, size_t> sizes_;
  EventId next_event_ = 1;
};

// The one CUDA probe of the project (the engine's lt::cuda_available is this function).
// Probed once per process (cudaGetDeviceCount; a failure's sticky error is cleared).
// cuda_available(): this build has the CUDA backend and at least one device is visible.
// cuda_unavailable_reason(): why not ("built without CUDA", "no CUDA device found" or the
// CUDA error string); empty when cuda_available().
bool cuda_available();
int cuda_device_count();  // 0 without CUDA
const std::string& cuda_unavailable_reason();
// The CUDA backend for `device` (cudaMalloc/cudaFree/cudaEvent*/cudaMemsetAsync).
// Throws std::runtime_error with the reason when the build has no CUDA or the device is
// unusable.
std::unique_ptr<Backend> make_cuda_backend(int device);
// Page-locked host memory (cudaHostAlloc, portable across devices; cudaFreeHost) with
// events on `device`'s streams; device() is -1 (host memory); fill is a host memset.
// Throws like make_cuda_backend when CUDA is not usable.
std::unique_ptr<Backend> make_pinned_host_backend(int device);

}  // namespace lt::alloc
