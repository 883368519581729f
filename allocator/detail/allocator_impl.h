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
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator/caching_allocator.h"

namespace lt::alloc {

struct Block;
struct Pool;
struct Segment;

// Free-list node storage for the pools' std::set nodes: every node has the same size, so
// a recycled node is a pointer pop (the hit path inserts and erases set nodes on every
// split / coalesce; malloc there cost more than the rest of the hit path together).
// Used under the allocator's mutex only; nodes are returned to the OS when the allocator dies.
class NodeStore {
 public:
  NodeStore() = default;
  NodeStore(const NodeStore&) = delete;
  NodeStore& operator=(const NodeStore&) = delete;
  ~NodeStore() {
    for (void* c : chunks_) ::operator delete(c);
  }
  void* get(size_t bytes) {
    if (node_size_ == 0) node_size_ = bytes < sizeof(void*) ? sizeof(void*) : bytes;
    if (bytes > node_size_) return ::operator new(bytes);  // not expected: one node type per store
    if (!head_) refill();
    void* n = head_;
    head_ = *static_cast<void**>(n);
    return n;
  }
  void put(void* p, size_t bytes) {
    if (bytes > node_size_) {
      ::operator delete(p);
      return;
    }
    *static_cast<void**>(p) = head_;
    head_ = p;
  }

 private:
  void refill() {
    constexpr size_t kNodes = 256;
    const size_t stride =
        (node_size_ + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) * alignof(std::max_align_t);
    char* chunk = static_cast<char*>(::operator new(stride* kNodes));
    chunks_.push_back(chunk);
    for (size_t i = 0; i < kNodes; ++i) put(chunk + i * stride, node_size_);
  }
  size_t node_size_ = 0;
  void* head_ = nullptr;
  std::vector<void*> chunks_;
};

template <class T>
struct NodeAllocator {
  using value_type = T;
  NodeStore* store;
  explicit NodeAllocator(NodeStore* s) : store(s) {}
  template <class U>
  NodeAllocator(const NodeAllocator<U>& o) : store(o.store) {}
  T* allocate(size_t n) {
    return n == 1 ? static_cast<T*>(store->get(sizeof(T))) : static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n == 1) store->put(p, sizeof(T));
    else ::operator delete(p);
  }
  template <class U>
  bool operator==(const NodeAllocator<U>& o) const {
    return store == o.store;
  }
};

// Open-addressing map from a block's address to its Block (linear probing, backward-shift
// deletion, power-of-two capacity, load <= 1/2). Keys are never 0.
class BlockMap {
 public:
  BlockMap() { rehash(1024); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Block* find(uintptr_t key) const {
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return vals_[i];
      if (keys_[i] == 0) return nullptr;
    }
  }
  void insert(uintptr_t key, Block* value) {
    if (2 * (size_ + 1) > keys_.size()) rehash(keys_.size() * 2);
    size_t i = slot(key);
    while (keys_[i] != 0) i = (i + 1) & mask_;
    keys_[i] = key;
    vals_[i] = value;
    ++size_;
  }
  // Removes `key` (which must be present) and returns its value.
  Block* erase(uintptr_t key) {
    size_t i = slot(key);
    while (keys_[i] != key) i = (i + 1) & mask_;
    Block* v = vals_[i];
    // Backward shift: pull later entries of the probe run into the hole.
    for (size_t j = (i + 1) & mask_; keys_[j] != 0; j = (j + 1) & mask_) {
      size_t home = slot(keys_[j]);
      // Entry j may move to i if i lies cyclically in [home, j).
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        keys_[i] = keys_[j];
        vals_[i] = vals_[j];
        i = j;
      }
    }
    keys_[i] = 0;
    vals_[i] = nullptr;
    --size_;
    return v;
  }
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < keys_.size(); ++i)
      if (keys_[i] != 0) f(keys_[i], vals_[i]);
  }

 private:
  size_t slot(uintptr_t key) const { return static_cast<size_t>(((key >> 9) * 0x9E3779B97F4A7C15ull) >> shift_); }
  void rehash(size_t capacity) {
    std::vector<uintptr_t> old_keys = std::move(keys_);
    std::vector<Block*> old_vals = std::move(vals_);
    keys_.assign(capacity, 0);
    vals_.assign(capacity, nullptr);
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != 0) insert(old_keys[i], old_vals[i]);
  }
  std::vector<uintptr_t> keys_;
  std::vector<Block*> vals_;
  size_t mask_ = 0;
  unsigned shift_ = 0;
  size_t size_ = 0;
};

// Free-set order: (size, address) — best fit is lower_bound, ties go to the lowest address.
struct BlockLess {
  bool operator()(const Block* a, const Block* b) const;
};

struct Block {
  uintptr_t ptr = 0;
  size_t size = 0;
  size_t requested = 0;  // caller's bytes while allocated
  StreamId stream = 0;   // allocation stream (owner of the pool)
  Pool* pool = nullptr;
  Segment* segment = nullptr;
  Block* prev = nullptr;  // address-order neighbours inside the segment
  Block* next = nullptr;
  bool allocated = false;
  bool in_free_set = false;
  std::set<Block*, BlockLess, NodeAllocator<Block*>>::iterator free_it{};  // valid while in_free_set
  int event_count = 0;                // outstanding stream events before the block is free
  uint32_t stage_id = 0;              // stage tag at allocation (only while tracing)
  std::vector<StreamId> stream_uses;  // streams other than `stream` (record_stream)

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

inline bool BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

using FreeSet = std::set<Block*, BlockLess, NodeAllocator<Block*>>;

struct Pool {
  bool is_small = true;
  StreamId stream = 0;
  FreeSet free_blocks;
  explicit Pool(NodeStore* nodes) : free_blocks(BlockLess(), NodeAllocator<Block*>(nodes)) {}
};

struct StreamPools {
  Pool small;
  Pool large;
  explicit StreamPools(NodeStore* nodes) : small(nodes), large(nodes) {}
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
  int64_t device_free;  // oom only: backend free bytes (-1 unknown)
};

struct CachingAllocator::Impl {
  Backend* backend = nullptr;
  mutable std::mutex mutex;
  NodeStore nodes;  // free-set nodes (declared first: destroyed after the pools)

  Stats stats;
  bool poison = false;
  size_t max_split_size = kMaxSplitSize;

  std::unordered_map<StreamId, std::unique_ptr<StreamPools>> stream_pools;
  StreamId last_stream = ~StreamId(0);
  StreamPools* last_pools = nullptr;
  std::vector<StreamId> private_streams;  // set_stream_private: segments never released

  BlockMap allocated;                                      // live allocations
  std::map<uintptr_t, std::unique_ptr<Segment>> segments;  // by base address
  std::deque<PendingEvent> pending;                        // FIFO of outstanding events
  std::vector<Block*> spare_blocks;                        // recycled Block objects

  // Trace ring buffer.
  bool tracing = false;
  size_t trace_capacity = 0;
  std::vector<RawTraceEvent> ring;
  size_t ring_next = 0;  // slot of the next write once the ring is full
  int64_t trace_dropped = 0;
  int64_t step = 0;
  std::string oom_trace_path;
  std::vector<std::string> stage_names{""};
  std::unordered_map<std::string, uint32_t> stage_ids{{"", 0}};
  const char* last_stage_ptr = nullptr;
  uint32_t last_stage_id = 0;

  Impl() = default;

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
