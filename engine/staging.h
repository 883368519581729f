// Host staging memory for copies between host and device that do not block the host.
//
//   lt::HostStaging staging(dev, bytes, 4);         // pinned slots for a CUDA device
//   lt::HostStaging::Lease l = staging.acquire();    // any thread; waits only for copies
//   std::memcpy(l.data(), batch, bytes);             // fill it
//   lt::copy_to_device_async(dst, l);                // enqueued on dst's current stream
//   // l's destructor returns the slot; it is reused only after that copy has run
//
//   lt::HostStaging::Lease r = staging.acquire();
//   lt::copy_to_host_async(r, src);                 // device -> host, enqueued, returns at once
//   ...                                             // later: r.ready() / r.wait(), then read r.data()
//
// Memory: for a CUDA device, page-locked host memory (lt::alloc::make_pinned_host_backend:
// cudaHostAlloc / cudaFreeHost), so cudaMemcpyAsync neither stages through a driver buffer
// nor blocks the host; for the CPU, plain memory (lt::alloc::HostBackend), where every copy
// is done when the call returns. The slots form a ring (lt::alloc::StagingRing,
// allocator/staging_ring.h): a slot goes back to the ring when its lease is destroyed and is
// handed out again only after the copy recorded on it has completed, so a copy in flight
// never sees its buffer overwritten.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocator/staging_ring.h"
#include "engine/tensor.h"

namespace lt {

class HostStaging {
 public:
  // `slots` slots of slot_bytes bytes for copies to and from `device`.
  HostStaging(Device device, size_t slot_bytes, int slots);
  Device device() const { return device_; }
  size_t slot_bytes() const { return ring_->slot_bytes(); }

  // A held slot. Move-only; the destructor returns the slot (its recorded copy, if any,
  // still guards it).
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept;
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();
    explicit operator bool() const { return ring_ != nullptr; }
    void* data() const { return data_; }
    size_t bytes() const { return ring_ ? ring_->slot_bytes() : 0; }
    int slot() const { return slot_; }
    Device device() const { return device_; }
    // The slot is used by the work enqueued so far on `stream` (the copy functions below
    // call it). ready(): that work has completed; wait(): waits for it.
    void record(const Stream& stream);
    bool ready() const;
    void wait() const;
    void reset();  // returns the slot now

   private:
    friend class HostStaging;
    std::shared_ptr<alloc::StagingRing> ring_;
    int slot_ = -1;
    void* data_ = nullptr;
    Device device_;
  };

  Lease acquire();  // thread-safe
  alloc::StagingRing::Stats stats() const { return ring_->stats(); }

 private:
  Device device_;
  std::shared_ptr<alloc::StagingRing> ring_;
};

// Copies dst.nbytes() bytes from src.data() + offset into the contiguous tensor dst on dst's
// device's current stream and records the copy on the lease; returns without waiting
// (CPU: the copy is done on return). The lease must hold offset + dst.nbytes() bytes.
void copy_to_device_async(Tensor& dst, HostStaging::Lease& src, size_t offset = 0);
// Copies the contiguous tensor src into dst.data() + offset on src's device's current
// stream and records the copy on the lease; the bytes are there once dst.ready().
void copy_to_host_async(HostStaging::Lease& dst, const Tensor& src, size_t offset = 0);

}  // namespace lt
