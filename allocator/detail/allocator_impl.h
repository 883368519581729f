// Internal state of CachingAllocator, shared by caching_allocator.cpp (pool rules, stats)
// and trace_dump.cpp (snapshot / Chrome-trace writers). Not part of the public API.
//
// Invariants (checked by tests/allocator/ through snapshot() and stats()):
//   - the blocks of a segment are linked by prev/next in address order and tile it exactly;
//   - a block is in exactly one of: its pool's free set (free, no pending events), the
//     allocated map (handed out), or neither (freed, waiting for `event_count` events);
//   - no two neighbouring blocks are both in a free set (freeing coalesces);
//   - a free set holds blocks of one stream and one pool kind, ordered by (size, address).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator/caching_allocator.h"

namespace lt::alloc {

struct Pool;
struct Segment;

struct Block {
  uintptr_t ptr = 0;
  size_t size = 0;
  size_t requested = 0;        // caller's bytes while allocated
  StreamId stream = 0;         // allocation stream (owner of the pool)
  Pool* pool = nullptr;
  Segment* segment = nullptr;
  Block* prev = nullptr;       // address-order neighbours inside the segment
  Block* next = nullptr;
  bool allocated = false;
  bool in_free_set = false;
  int event_count = 0;         // outstanding stream events before the block is free
  uint32_t stage_id = 0;       // stage tag at allocation (only while tracing)
  std::vector<StreamId> stream_uses;  // streams other than `stream` (record_stream)

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

struct Pool {
  bool is_small = true;
  StreamId stream = 0;
  std::pmr::set<Block*, BlockLess> free_blocks;
  explicit Pool(std::pmr::memory_resource* mr) : free_blocks(mr) {}
};

struct StreamPools {
  Pool small;
  Pool large;
  explicit StreamPools(std::pmr::memory_resource* mr) : small(mr), large(mr) {}
};

struct Segment {
  uintptr_t base = 0;
  size_t size = 0;
  StreamId stream = 0;
  bool is_large = false;
  Block* head = nullptr;
};

struct PendingEvent {
  EventId event;
  Block* block;
};

// A trace event as stored in the ring buffer (stage tags interned).
struct RawTraceEvent {
  TraceAction action;
  uint32_t stage_id;
  uintptr_t addr;
  size_t size;
  size_t requested_size;
  StreamId stream;
  int64_t step;
  int64_t time_us;
  int64_t allocated_bytes;  // stats after the event (Chrome-trace counters)
  int64_t reserved_bytes;
  int64_t device_free;      // oom only: backend free bytes (-1 unknown)
};

struct CachingAllocator::Impl {
  Backend* backend = nullptr;
  mutable std::mutex mutex;
  std::pmr::unsynchronized_pool_resource node_pool;  // set / map nodes (used under mutex)

  Stats stats;
  bool poison = false;
  size_t max_split_size = kMaxSplitSize;

  std::unordered_map<StreamId, std::unique_ptr<StreamPools>> stream_pools;
  StreamId last_stream = ~StreamId(0);
  StreamPools* last_pools = nullptr;

  std::pmr::unordered_map<uintptr_t, Block*> allocated;       // live allocations
  std::map<uintptr_t, std::unique_ptr<Segment>> segments;     // by base address
  std::deque<PendingEvent> pending;                           // FIFO of outstanding events
  std::vector<Block*> spare_blocks;                           // recycled Block objects

  // Trace ring buffer.
  bool tracing = false;
  size_t trace_capacity = 0;
  std::vector<RawTraceEvent> ring;
  size_t ring_next = 0;       // slot of the next write once the ring is full
  int64_t trace_dropped = 0;
  int64_t step = 0;
  std::string oom_trace_path;
  std::vector<std::string> stage_names{""};
  std::unordered_map<std::string, uint32_t> stage_ids{{"", 0}};
  const char* last_stage_ptr = nullptr;
  uint32_t last_stage_id = 0;

  Impl() : allocated(&node_pool) {}

  // Trace helpers (caller holds the mutex).
  uint32_t intern_stage(const char* tag);
  void record(TraceAction action, uintptr_t addr, size_t size, size_t requested, StreamId stream,
              int64_t device_free = -1);
  std::vector<RawTraceEvent> ordered_trace() const;
  std::vector<SegmentInfo> snapshot_locked() const;
};

// Writers in trace_dump.cpp (caller holds the mutex).
nlohmann::json snapshot_json_locked(const CachingAllocator::Impl& impl, int device);
nlohmann::json chrome_trace_locked(const CachingAllocator::Impl& impl, int device, const char* backend);
void write_file(const std::string& path, const std::string& bytes);

}  // namespace lt::alloc
