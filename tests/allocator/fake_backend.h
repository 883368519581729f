// Test backend for the caching allocator: real host memory (so poison fills can be read
// back) behind a capacity limit, a log of every raw call, and stream events that complete
// only when the test says so (complete_stream / complete_all), or when the allocator
// synchronizes them (counted, so tests can tell).
//
// Segments are carved first-fit from a private arena (an mmap of 8x the capacity,
// MAP_NORESERVE, so only touched pages cost memory): the same call sequence yields the same
// relative addresses, which makes best-fit tie-breaking, and so replays, deterministic.
#pragma once
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

#include "allocator/backend.h"

namespace lt::alloc::test {

class FakeBackend final : public Backend {
 public:
  struct Event {
    StreamId stream;
    bool complete;
    bool destroyed;
  };

  explicit FakeBackend(size_t capacity, int device = 0) : capacity_(capacity), device_(device) {
    arena_size_ = 8 * capacity + (64u << 20);
    void* p = mmap(nullptr, arena_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("FakeBackend: mmap of the arena failed");
    arena_ = static_cast<char*>(p);
    holes_[0] = arena_size_;
  }
  ~FakeBackend() override { munmap(arena_, arena_size_); }
  FakeBackend(const FakeBackend&) = delete;
  FakeBackend& operator=(const FakeBackend&) = delete;

  const char* name() const override { return "fake"; }
  int device() const override { return device_; }

  void* raw_alloc(size_t bytes) override {
    ++alloc_calls;
    if (bytes % 512 != 0) throw std::logic_error("FakeBackend: segment size not a multiple of 512");
    if (used_ + bytes > capacity_) {
      ++failed_allocs;
      return nullptr;
    }
    void* p = nullptr;
    for (auto it = holes_.begin(); it != holes_.end(); ++it) {
      if (it->second < bytes) continue;
      size_t off = it->first, len = it->second;
      holes_.erase(it);
      if (len > bytes) holes_[off + bytes] = len - bytes;
      p = arena_ + off;
      break;
    }
    if (!p) throw std::logic_error("FakeBackend: arena fragmented (test setup too tight)");
    live_[p] = bytes;
    used_ += bytes;
    alloc_log.push_back({p, bytes});
    return p;
  }
  void raw_free(void* ptr) override {
    auto it = live_.find(ptr);
    if (it == live_.end()) throw std::logic_error("FakeBackend: raw_free of an unknown segment");
    for (const Event& e : events)
      if (!e.complete && !e.destroyed) {
        // The allocator must not free memory a stream may still use; events that are
        // pending belong to blocks, so any pending event at raw_free time is a bug only
        // if it guards this segment. The allocator synchronizes before releasing, so
        // we simply require that no event is pending at all.
        throw std::logic_error("FakeBackend: raw_free while a stream event is pending");
      }
    used_ -= it->second;
    free_log.push_back({ptr, it->second});
    size_t off = static_cast<size_t>(static_cast<char*>(ptr) - arena_), len = it->second;
    live_.erase(it);
    auto next = holes_.lower_bound(off);
    if (next != holes_.end() && next->first == off + len) {
      len += next->second;
      holes_.erase(next);
    }
    auto prev = holes_.lower_bound(off);
    if (prev != holes_.begin()) {
      --prev;
      if (prev->first + prev->second == off) {
        off = prev->first;
        len += prev->second;
        holes_.erase(prev);
      }
    }
    holes_[off] = len;
  }
  bool memory_info(size_t& free_bytes, size_t& total_bytes) override {
    total_bytes = capacity_;
    free_bytes = capacity_ - used_;
    return true;
  }

  EventId event_record(StreamId stream) override {
    events.push_back({stream, false, false});
    return events.size();  // ids 1..n
  }
  bool event_query(EventId id) override { return at(id).complete; }
  void event_synchronize(EventId id) override {
    ++sync_calls;
    at(id).complete = true;
  }
  void event_destroy(EventId id) override {
    Event& e = at(id);
    if (e.destroyed) throw std::logic_error("FakeBackend: event destroyed twice");
    e.destroyed = true;
  }
  void fill(void* ptr, size_t bytes, uint8_t pattern, StreamId) override {
    ++fill_calls;
    std::memset(ptr, pattern, bytes);
  }

  // Test controls.
  void complete_stream(StreamId stream) {
    for (Event& e : events)
      if (e.stream == stream) e.complete = true;
  }
  void complete_all() {
    for (Event& e : events) e.complete = true;
  }
  size_t pending_events() const {
    size_t n = 0;
    for (const Event& e : events) n += (!e.complete && !e.destroyed);
    return n;
  }
  size_t undestroyed_events() const {
    size_t n = 0;
    for (const Event& e : events) n += !e.destroyed;
    return n;
  }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  void set_capacity(size_t c) { capacity_ = c; }

  struct Raw {
    void* ptr;
    size_t bytes;
  };
  std::vector<Raw> alloc_log, free_log;
  std::vector<Event> events;
  int64_t alloc_calls = 0, failed_allocs = 0, sync_calls = 0, fill_calls = 0;

 private:
  Event& at(EventId id) {
    if (id == 0 || id > events.size()) throw std::logic_error("FakeBackend: unknown event id");
    return events[id - 1];
  }
  size_t capacity_;
  int device_;
  size_t used_ = 0;
  std::map<void*, size_t> live_;
  char* arena_ = nullptr;
  size_t arena_size_ = 0;
  std::map<size_t, size_t> holes_;  // offset -> length, first fit
};

}  // namespace lt::alloc::test
