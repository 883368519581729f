// The caching pool allocator (PyTorch's CUDA caching allocator is the anchor).
//
// Memory comes from a Backend in segments; a segment is cut into blocks. Rules
// (constants below, docs/ALLOCATOR.md explains each):
//   - a request of n bytes is rounded up to a multiple of 512 (kMinBlockSize);
//     0 bytes returns nullptr, and free(nullptr) does nothing;
//   - rounded size <= 1 MiB is served from the small pool, larger from the large pool;
//   - a new segment is 2 MiB for small requests, 20 MiB for requests < 10 MiB, else the
//     request rounded up to 2 MiB;
//   - best fit: the smallest free block of the request's pool and stream that fits,
//     ties broken by lowest address;
//   - a block is split when the remainder is >= 512 B (small pool) or > 1 MiB (large
//     pool, and only for requests < max_split_size); freed blocks coalesce with free
//     neighbours of the same segment;
//   - oversize blocks (>= max_split_size, default 64 MiB) serve only requests that are
//     themselves >= max_split_size and less than 20 MiB smaller than the block (PyTorch's
//     max_split_size_mb rule, on by default here): a freed logits-sized block is not carved
//     up by medium requests, so the next step finds it whole;
//   - pools are per stream: a block is only handed out on the stream it was allocated on.
//     record_stream(p, s) marks p as used on stream s; free(p) then records an event on
//     each such stream and the block returns to its pool only when all have completed
//     (checked at the start of every allocate);
//   - out of memory: complete outstanding events, free every cached unused segment (but
//     those of private streams, see set_stream_private), retry once; then throw
//     OutOfMemoryError (and write the trace when tracing is on).
// Statistics are exact at every moment (under the mutex). Thread-safe: one mutex.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "allocator/backend.h"
#include "allocator/pickle.h"

namespace lt::alloc {

inline constexpr size_t kMinBlockSize = 512;               // rounding unit, smallest block
inline constexpr size_t kSmallSize = 1u << 20;             // <= 1 MiB: small pool
inline constexpr size_t kSmallBuffer = 2u << 20;           // small-pool segment size
inline constexpr size_t kMinLargeAlloc = 10u << 20;        // large requests below this ...
inline constexpr size_t kLargeBuffer = 20u << 20;          // ... get a 20 MiB segment
inline constexpr size_t kRoundLarge = 2u << 20;            // larger: round segment to 2 MiB
inline constexpr size_t kMaxSplitSize = 64u << 20;         // default: blocks this big are not split
inline constexpr size_t kDefaultTraceCapacity = 1u << 18;  // trace ring buffer, events

// Rounded block size for a request (exposed for tests and for callers sizing arenas).
size_t round_size(size_t bytes);
// Segment size the allocator requests from the backend for a rounded block size.
size_t segment_size_for(size_t rounded);

class OutOfMemoryError : public std::runtime_error {
 public:
  explicit OutOfMemoryError(const std::string& message) : std::runtime_error(message) {}
};

// One PyTorch-style counter.
struct StatCounter {
  int64_t current = 0;    // now
  int64_t peak = 0;       // highest `current` since construction or reset_peak_stats()
  int64_t allocated = 0;  // total increments
  int64_t freed = 0;      // total decrements
};

// Named as in torch.cuda.memory_stats() ("<name>.all.<field>").
struct Stats {
  StatCounter allocation;            // live user allocations (blocks handed out, not freed)
  StatCounter segment;               // backend segments held
  StatCounter active;                // blocks allocated or freed-but-awaiting-stream-events
  StatCounter inactive_split;        // free blocks inside a segment that is split
  StatCounter allocated_bytes;       // bytes of live allocations (block sizes, rounded)
  StatCounter reserved_bytes;        // bytes of segments held
  StatCounter active_bytes;          // bytes of active blocks
  StatCounter inactive_split_bytes;  // bytes of inactive_split blocks
  StatCounter requested_bytes;       // bytes the callers asked for (unrounded), live
  int64_t num_device_alloc = 0;      // backend raw_alloc calls that succeeded
  int64_t num_device_free = 0;       // backend raw_free calls
  int64_t num_cache_hits = 0;        // allocations served without a raw_alloc
  int64_t num_alloc_retries = 0;     // allocations that freed the cache and retried
  int64_t num_ooms = 0;              // OutOfMemoryError thrown
  int64_t num_sync_all_streams = 0;  // times outstanding events were synchronized (OOM, empty_cache)
};

enum class TraceAction : uint8_t {
  alloc,           // a block handed out (addr, size = block size, requested_size)
  free_requested,  // free() called (the block may still wait for stream events)
  free_completed,  // the block is back in its pool (immediately, or when events completed)
  segment_alloc,   // raw_alloc of a segment
  segment_free,    // raw_free of a segment
  oom,             // allocation failed after the retry (size = rounded request)
  empty_cache,     // empty_cache() called (size = bytes released)
};
const char* trace_action_name(TraceAction action);

struct TraceEvent {
  TraceAction action;
  uintptr_t addr = 0;
  size_t size = 0;            // block / segment bytes
  size_t requested_size = 0;  // caller's bytes (alloc, free_*), else 0
  StreamId stream = 0;
  int64_t step = 0;             // set_step() value when the event happened
  std::string stage;            // lt::alloc::stage_tag() when the event happened
  int64_t time_us = 0;          // microseconds since the epoch (system clock)
  int64_t allocated_bytes = 0;  // stats.allocated_bytes.current after the event
  int64_t reserved_bytes = 0;   // stats.reserved_bytes.current after the event
  int64_t device_free = -1;     // oom: free bytes the backend reported (-1 unknown)
};

// State of one block / segment for snapshots (torch.cuda.memory._snapshot() schema).
struct BlockInfo {
  uintptr_t address = 0;
  size_t size = 0;
  size_t requested_size = 0;  // 0 for free blocks
  bool allocated = false;     // handed out and not freed
  bool active = false;        // allocated, or freed but waiting for stream events
};
struct SegmentInfo {
  int device = -1;
  uintptr_t address = 0;
  size_t total_size = 0;
  size_t allocated_size = 0;
  size_t active_size = 0;
  size_t requested_size = 0;
  StreamId stream = 0;
  bool is_large = false;          // segment_type "large" / "small"
  std::vector<BlockInfo> blocks;  // in address order, covering the segment exactly
};

class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<Backend> backend);
  // Returns every segment to the backend (live blocks are reported on stderr and freed
  // with their segment).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` bytes, usable on `stream`. nullptr for 0 bytes.
  // Throws OutOfMemoryError when the backend cannot provide memory even after freeing
  // the cache.
  void* allocate(size_t bytes, StreamId stream = 0);
  // Returns a block. Throws std::invalid_argument naming the pointer on a double free or
  // a pointer this allocator did not hand out. nullptr is a no-op.
  void free(void* ptr);
  // Marks `ptr` (a live allocation) as used by work on `stream`; see the rules above.
  void record_stream(void* ptr, StreamId stream);
  // Synchronizes outstanding stream events, then returns every wholly free segment (not
  // those of private streams).
  void empty_cache();
  // A private stream's pools are a graph-private pool (PyTorch's graph pools): work captured
  // into a CUDA graph on that stream allocates from them, and replays of the graph write the
  // same addresses, so while the stream is private its segments are never returned to the
  // backend (neither by empty_cache nor by the out-of-memory retry) and, the pools being per
  // stream, its free blocks serve only that stream. Blocks freed during the capture count as
  // free (reserved, not allocated) in the statistics.
  void set_stream_private(StreamId stream, bool on);
  bool stream_private(StreamId stream) const;

  // Exact statistics.
  Stats stats() const;
  void reset_peak_stats();         // peak := current for every counter
  void reset_accumulated_stats();  // allocated/freed and num_* := 0
  // {"allocation": {"current","peak","allocated","freed"}, ..., "num_ooms": n, ...}
  nlohmann::json stats_json() const;
  // torch.cuda.memory_stats() style flat keys: "allocated_bytes.all.peak", "num_ooms", ...
  nlohmann::json stats_json_flat() const;
  // A short human-readable table (used in OOM messages and logs).
  std::string memory_summary() const;

  bool owns(const void* ptr) const;          // a live allocation of this allocator
  size_t block_size(const void* ptr) const;  // rounded size of a live allocation (throws if not)
  int device() const;
  const char* backend_name() const;
  Backend& backend() { return *backend_; }

  // Blocks of at least this size are "oversize" (see the rules above). SIZE_MAX turns the
  // rule off (PyTorch's default).
  void set_max_split_size(size_t bytes);
  size_t max_split_size() const;

  // Poison mode: every block handed out is filled with 0xFF bytes (a NaN in f32, bf16 and
  // f16) on its stream. Default: on when the environment has LINTRAIN_ALLOC_POISON=1.
  void set_poison(bool on);
  bool poison() const;

  // Trace recorder: a ring buffer of the last `capacity` events; off by default (when
  // off, recording costs one branch). Enabling clears previous events.
  void set_trace(bool on, size_t capacity = kDefaultTraceCapacity);
  bool tracing() const;
  void clear_trace();
  std::vector<TraceEvent> trace() const;  // oldest first
  int64_t trace_dropped() const;          // events overwritten since tracing began
  void set_step(int64_t step);            // tag for subsequent events
  int64_t step() const;
  // Where an OutOfMemoryError writes the trace when tracing is on; the extension picks
  // the format: ".pickle" snapshot pickle, ".trace.json"/".chrome.json" Chrome trace,
  // anything else snapshot JSON. Empty (default): "lintrain_oom_snapshot.json".
  void set_oom_trace_path(std::string path);

  // Current segments and blocks, address order.
  std::vector<SegmentInfo> snapshot() const;
  // torch.cuda.memory._snapshot() schema: {"segments": [...], "device_traces": [[...]]},
  // readable by pytorch.org/memory_viz and `python -m torch.cuda._memory_viz`.
  nlohmann::json snapshot_json() const;
  void dump_snapshot_json(const std::string& path) const;
  void dump_snapshot_pickle(const std::string& path) const;  // same content, pickle protocol 2
  // Chrome trace (Perfetto, chrome://tracing): counters in_use/reserved, instant events.
  nlohmann::json chrome_trace_json() const;
  void dump_chrome_trace(const std::string& path) const;

  struct Impl;

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Impl> impl_;
};

// Process-wide allocators, created on first use and never destroyed (so no static
// destruction order problems with the CUDA runtime).
CachingAllocator& host_allocator();
// Throws std::runtime_error saying why when CUDA is not built in or `device` is unusable.
CachingAllocator& cuda_allocator(int device);

// RAII scratch memory: move-only, returns its block on destruction.
class Buffer {
 public:
  Buffer() = default;
  Buffer(CachingAllocator* owner, void* data, size_t size) : owner_(owner), data_(data), size_(size) {}
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }  // bytes requested
  explicit operator bool() const { return data_ != nullptr; }
  CachingAllocator* allocator() const { return owner_; }
  void record_stream(StreamId stream);  // see CachingAllocator::record_stream
  void reset() noexcept;                // frees now (aborts with a message on misuse)
  void* release();                      // gives up ownership; caller frees via allocator()

 private:
  CachingAllocator* owner_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

Buffer alloc_buffer(CachingAllocator& allocator, size_t bytes, StreamId stream = 0);

}  // namespace lt::alloc
