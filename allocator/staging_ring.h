// A ring of fixed-size host buffers ("slots") for copies between host and device that do
// not block the host: pinned (page-locked) memory from the pinned backend for a CUDA device
// (make_pinned_host_backend: cudaHostAlloc / cudaFreeHost), plain memory from a HostBackend
// on the CPU.
//
//   StagingRing ring(make_pinned_host_backend(0), bytes, 4);
//   int s = ring.acquire();                 // a slot nobody uses: not held, no copy in flight
//   fill(ring.data(s));                     // the producer writes it (any thread)
//   cudaMemcpyAsync(dev, ring.data(s), ..., stream);
//   ring.record(s, StreamId(stream));       // the copy that reads it is enqueued there
//   ring.release(s);                        // back to the ring; reused once that copy is done
//
// Rules:
//   - A slot is handed out by acquire() only when no one holds it and the event recorded for
//     it (the last copy that read or wrote it) has completed: a buffer a copy in flight still
//     reads is never overwritten.
//   - Order: acquire() looks at the slots round-robin, starting after the slot handed out
//     last, and takes the first one that is free with no copy in flight. When every slot
//     that is not held still has a copy in flight, it waits for the first of them in that
//     order (event_synchronize) and takes it. When every slot is held, it allocates one more
//     slot (the ring grows; counted in stats): acquire() never waits for the host, only for
//     copies the device will finish, so a producer and a consumer cannot deadlock on it.
//   - record(s, stream) replaces an earlier event of a held slot (the later copy on the same
//     stream finishes after the earlier one); ready(s) / wait(s) query / wait for it, so a
//     device -> host copy into a held slot can be read once ready(s).
//   - The destructor waits for every recorded event, then returns the slots to the backend.
// Thread-safe: one mutex. The wait for a slot's event runs outside the mutex (a producer
// waiting for a copy never blocks the thread that releases slots), so the backend must allow
// event_synchronize of one event concurrently with its other calls: HostBackend and the CUDA
// backends do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "allocator/backend.h"

namespace lt::alloc {

class StagingRing {
 public:
  struct Stats {
    int64_t slots = 0;     // slots now (initial + grown)
    int64_t acquires = 0;  // acquire() calls that returned a slot
    int64_t waits = 0;     // acquires that waited for a slot's copy to finish
    int64_t grown = 0;     // slots allocated because every slot was held
  };

  // `slots` (>= 1) slots of slot_bytes (> 0, rounded up to a multiple of 512) from `backend`.
  // Throws std::invalid_argument for bad sizes, std::runtime_error when the backend has no
  // memory for them.
  StagingRing(std::unique_ptr<Backend> backend, size_t slot_bytes, int slots);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  int acquire();      // a free slot's index (see the rules); may wait or grow
  int try_acquire();  // a slot that is free now, without waiting or growing; -1 if none
  void* data(int slot) const;
  size_t slot_bytes() const { return slot_bytes_; }
  void record(int slot, StreamId stream);  // the held slot is used by work enqueued on `stream`
  bool ready(int slot);                    // its recorded work (if any) has completed
  void wait(int slot);                     // waits for its recorded work
  void release(int slot);                  // back to the ring (its event, if any, still guards it)
  Stats stats() const;
  Backend& backend() { return *backend_; }

 private:
  struct Slot {
    void* data = nullptr;
    bool held = false;
    EventId event = 0;  // last recorded use; 0 = none or known complete
  };
  Slot& at(int slot);
  void check_held(int slot, const char* op);
  bool settle(Slot& s);  // destroys a completed event; true when the slot has none left (caller holds mu_)

  std::unique_ptr<Backend> backend_;
  size_t slot_bytes_;
  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  size_t next_ = 0;
  Stats stats_;
};

}  // namespace lt::alloc
