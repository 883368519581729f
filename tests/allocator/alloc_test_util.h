// Shared helpers for the allocator tests: a fake-backed allocator and a checker of the
// structural invariants that must hold between any two calls (see detail/allocator_impl.h).
#pragma once
#include <catch2/catch.hpp>
#include <memory>

#include "allocator/caching_allocator.h"
#include "tests/allocator/fake_backend.h"

namespace lt::alloc::test {

struct FakeAllocator {
  FakeBackend* fake;
  std::unique_ptr<CachingAllocator> alloc;
  CachingAllocator* operator->() { return alloc.get(); }
  CachingAllocator& operator*() { return *alloc; }
};

inline FakeAllocator make_fake_allocator(size_t capacity, int device = 0) {
  auto backend = std::make_unique<FakeBackend>(capacity, device);
  FakeBackend* raw = backend.get();
  auto a = std::make_unique<CachingAllocator>(std::move(backend));
  a->set_poison(false);  // independent of LINTRAIN_ALLOC_POISON in the environment
  return {raw, std::move(a)};
}

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Every segment is tiled exactly by its blocks; no two neighbouring blocks are both free;
// the current value of every statistic equals what the snapshot shows.
inline void check_invariants(const CachingAllocator& a) {
  const std::vector<SegmentInfo> segs = a.snapshot();
  const Stats st = a.stats();
  int64_t reserved = 0, allocated = 0, allocations = 0, active = 0, active_bytes = 0, inactive_split = 0,
          inactive_split_bytes = 0, requested = 0;
  for (const SegmentInfo& s : segs) {
    reserved += static_cast<int64_t>(s.total_size);
    REQUIRE(!s.blocks.empty());
    REQUIRE(s.blocks.front().address == s.address);
    uintptr_t next = s.address;
    bool prev_free = false;
    for (const BlockInfo& b : s.blocks) {
      REQUIRE(b.address == next);
      REQUIRE(b.size > 0);
      REQUIRE(b.size % kMinBlockSize == 0);
      next += b.size;
      const bool is_free = !b.active;
      REQUIRE_FALSE((is_free && prev_free));  // coalescing leaves no free neighbours
      prev_free = is_free;
      if (b.allocated) {
        ++allocations;
        allocated += static_cast<int64_t>(b.size);
        requested += static_cast<int64_t>(b.requested_size);
        REQUIRE(b.requested_size <= b.size);
      }
      if (b.active) {
        ++active;
        active_bytes += static_cast<int64_t>(b.size);
      }
      if (is_free && s.blocks.size() > 1) {
        ++inactive_split;
        inactive_split_bytes += static_cast<int64_t>(b.size);
      }
      if (!s.is_large) REQUIRE(b.size <= kSmallBuffer);
    }
    REQUIRE(next == s.address + s.total_size);
    if (!s.is_large) REQUIRE(s.total_size == kSmallBuffer);
  }
  CHECK(st.segment.current == static_cast<int64_t>(segs.size()));
  CHECK(st.reserved_bytes.current == reserved);
  CHECK(st.allocation.current == allocations);
  CHECK(st.allocated_bytes.current == allocated);
  CHECK(st.requested_bytes.current == requested);
  CHECK(st.active.current == active);
  CHECK(st.active_bytes.current == active_bytes);
  CHECK(st.inactive_split.current == inactive_split);
  CHECK(st.inactive_split_bytes.current == inactive_split_bytes);
  for (const StatCounter* c : {&st.allocation, &st.segment, &st.active, &st.inactive_split, &st.allocated_bytes,
                               &st.reserved_bytes, &st.active_bytes, &st.inactive_split_bytes, &st.requested_bytes}) {
    CHECK(c->peak >= c->current);
    CHECK(c->allocated - c->freed == c->current);
  }
}

}  // namespace lt::alloc::test
