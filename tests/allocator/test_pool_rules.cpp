// Pool rules of the caching allocator on a fake backend: rounding, segment sizes, pool
// choice, best fit, splitting thresholds, coalescing, empty_cache, Buffer, argument errors.
#include <thread>
#include <vector>

#include "tests/allocator/alloc_test_util.h"

using namespace lt::alloc;
using namespace lt::alloc::test;

namespace {
uintptr_t u(const void* p) { return reinterpret_cast<uintptr_t>(p); }
}  // namespace

TEST_CASE("round_size and segment_size_for follow the documented constants", "[allocator]") {
  CHECK(round_size(1) == 512);
  CHECK(round_size(512) == 512);
  CHECK(round_size(513) == 1024);
  CHECK(round_size(1 * MiB) == 1 * MiB);
  CHECK(round_size(1 * MiB + 1) == 1 * MiB + 512);
  CHECK(segment_size_for(512) == 2 * MiB);
  CHECK(segment_size_for(1 * MiB) == 2 * MiB);         // small pool
  CHECK(segment_size_for(1 * MiB + 512) == 20 * MiB);  // large, < 10 MiB
  CHECK(segment_size_for(10 * MiB - 512) == 20 * MiB);
  CHECK(segment_size_for(10 * MiB) == 10 * MiB);  // >= 10 MiB: round to 2 MiB
  CHECK(segment_size_for(13 * MiB + 512) == 14 * MiB);
  CHECK(segment_size_for(256 * MiB) == 256 * MiB);
}

TEST_CASE("small requests share a 2 MiB segment, split exactly, and coalesce back", "[allocator]") {
  auto fa = make_fake_allocator(64 * MiB);
  CachingAllocator& a = *fa;
  void* p1 = a.allocate(100);
  void* p2 = a.allocate(1000);
  void* p3 = a.allocate(4096);
  REQUIRE(fa.fake->alloc_log.size() == 1);
  REQUIRE(fa.fake->alloc_log[0].bytes == 2 * MiB);
  // Consecutive carving of one segment: 512, 1024, 4096.
  CHECK(u(p1) == u(fa.fake->alloc_log[0].ptr));
  CHECK(u(p2) == u(p1) + 512);
  CHECK(u(p3) == u(p2) + 1024);
  CHECK(a.block_size(p1) == 512);
  CHECK(a.block_size(p2) == 1024);
  Stats st = a.stats();
  CHECK(st.allocation.current == 3);
  CHECK(st.allocated_bytes.current == 512 + 1024 + 4096);
  CHECK(st.requested_bytes.current == 100 + 1000 + 4096);
  CHECK(st.reserved_bytes.current == int64_t(2 * MiB));
  CHECK(st.num_device_alloc == 1);
  CHECK(st.num_cache_hits == 2);
  CHECK(st.inactive_split.current == 1);  // the tail of the segment
  check_invariants(a);

  // Free the middle one: it cannot merge (neighbours allocated) -> a second free split block.
  a.free(p2);
  CHECK(a.stats().inactive_split.current == 2);
  check_invariants(a);
  // Freeing p1 merges with p2's hole; freeing p3 then merges everything into one block.
  a.free(p1);
  CHECK(a.stats().inactive_split.current == 2);
  a.free(p3);
  st = a.stats();
  CHECK(st.inactive_split.current == 0);
  CHECK(st.allocation.current == 0);
  auto segs = a.snapshot();
  REQUIRE(segs.size() == 1);
  REQUIRE(segs[0].blocks.size() == 1);
  CHECK(segs[0].blocks[0].size == 2 * MiB);
  check_invariants(a);
  // Hit path: the same segment serves again, no backend call.
  void* p4 = a.allocate(700);
  CHECK(u(p4) == u(fa.fake->alloc_log[0].ptr));
  CHECK(fa.fake->alloc_calls == 1);
  a.free(p4);
}

TEST_CASE("best fit picks the smallest adequate free block, lowest address on ties", "[allocator]") {
  auto fa = make_fake_allocator(64 * MiB);
  CachingAllocator& a = *fa;
  // Carve: [A 4K][x 512][B 2K][y 512][C 2K][z 512][tail]
  void* A = a.allocate(4096);
  void* x = a.allocate(512);
  void* B = a.allocate(2048);
  void* y = a.allocate(512);
  void* C = a.allocate(2048);
  void* z = a.allocate(512);
  a.free(A);
  a.free(B);
  a.free(C);
  check_invariants(a);
  // 1.5 KiB -> 2 KiB blocks B and C fit best (not A=4K, not the big tail); B has the lower address.
  void* p = a.allocate(1536);
  CHECK(p == B);
  // Next 2K request takes C; then a 3K request takes A (4K, split leaves 1K).
  void* q = a.allocate(2048);
  CHECK(q == C);
  void* r = a.allocate(3072);
  CHECK(r == A);
  CHECK(a.block_size(r) == 3072);
  check_invariants(a);
  for (void* v : {x, y, z, p, q, r}) a.free(v);
  check_invariants(a);
  CHECK(a.snapshot()[0].blocks.size() == 1);
}

TEST_CASE("large pool: 20 MiB segments for mid requests, split only when > 1 MiB remains", "[allocator]") {
  auto fa = make_fake_allocator(256 * MiB);
  CachingAllocator& a = *fa;
  void* p = a.allocate(3 * MiB);
  REQUIRE(fa.fake->alloc_log.back().bytes == 20 * MiB);
  CHECK(a.block_size(p) == 3 * MiB);
  // 20 - 3 = 17 MiB remains; a request leaving exactly 1 MiB is not split (remainder must be > 1 MiB).
  void* q = a.allocate(16 * MiB);
  CHECK(u(q) == u(p) + 3 * MiB);
  CHECK(a.block_size(q) == 17 * MiB);
  Stats st = a.stats();
  CHECK(st.allocated_bytes.current == int64_t(20 * MiB));
  CHECK(st.requested_bytes.current == int64_t(19 * MiB));
  CHECK(st.num_device_alloc == 1);
  check_invariants(a);
  // A small request never comes from the large pool.
  void* s = a.allocate(64 * KiB);
  CHECK(fa.fake->alloc_log.size() == 2);
  CHECK(fa.fake->alloc_log.back().bytes == 2 * MiB);
  // >= 10 MiB: a segment of the request rounded to 2 MiB.
  void* big = a.allocate(13 * MiB + 1);
  CHECK(fa.fake->alloc_log.back().bytes == 14 * MiB);
  CHECK(a.block_size(big) == 14 * MiB);  // 14 MiB - (13 MiB + 512) < 1 MiB: not split
  auto segs = a.snapshot();
  int larges = 0;
  for (auto& sg : segs) larges += sg.is_large;
  CHECK(larges == 2);
  check_invariants(a);
  for (void* v : {p, q, s, big}) a.free(v);
  check_invariants(a);
}

TEST_CASE("empty_cache returns wholly free segments only", "[allocator]") {
  auto fa = make_fake_allocator(256 * MiB);
  CachingAllocator& a = *fa;
  void* keep = a.allocate(1000);           // small segment stays (in use)
  void* gone = a.allocate(5 * MiB);        // large segment becomes free
  void* gone2 = a.allocate(100 * KiB, 3);  // small segment of stream 3 becomes free
  a.free(gone);
  a.free(gone2);
  CHECK(a.stats().segment.current == 3);
  a.empty_cache();
  Stats st = a.stats();
  CHECK(st.segment.current == 1);
  CHECK(st.reserved_bytes.current == int64_t(2 * MiB));
  CHECK(st.num_device_free == 2);
  CHECK(fa.fake->used() == 2 * MiB);
  check_invariants(a);
  a.free(keep);
  a.empty_cache();
  CHECK(a.stats().reserved_bytes.current == 0);
  CHECK(fa.fake->used() == 0);
  CHECK(a.stats().segment.peak == 3);
}

TEST_CASE("zero-byte requests and free(nullptr)", "[allocator]") {
  auto fa = make_fake_allocator(8 * MiB);
  CHECK(fa->allocate(0) == nullptr);
  fa->free(nullptr);
  CHECK(fa->stats().allocation.allocated == 0);
  CHECK(fa.fake->alloc_calls == 0);
}

TEST_CASE("double free, foreign pointers and the wrong allocator are errors naming the pointer", "[allocator]") {
  auto fa = make_fake_allocator(8 * MiB, 0);
  auto fb = make_fake_allocator(8 * MiB, 1);
  void* p = fa->allocate(4096);
  void* q = fa->allocate(4096);
  fa->free(p);
  char hexp[32];
  std::snprintf(hexp, sizeof hexp, "%p", p);
  CHECK_THROWS_WITH(fa->free(p), Catch::Contains("double free") && Catch::Contains(hexp));
  // Interior pointer of a live block.
  CHECK_THROWS_AS(fa->free(static_cast<char*>(q) + 16), std::invalid_argument);
  // A pointer of another allocator (device 1) freed on device 0's allocator.
  void* other = fb->allocate(4096);
  char hexo[32];
  std::snprintf(hexo, sizeof hexo, "%p", other);
  CHECK_THROWS_WITH(fa->free(other), Catch::Contains("not allocated by this allocator") && Catch::Contains(hexo));
  int on_stack = 0;
  CHECK_THROWS_AS(fa->free(&on_stack), std::invalid_argument);
  CHECK_THROWS_AS(fa->record_stream(p, 5), std::invalid_argument);
  CHECK_THROWS_AS(fa->block_size(p), std::invalid_argument);
  // Nothing was corrupted by the failed calls.
  check_invariants(*fa);
  CHECK(fa->stats().allocation.current == 1);
  fa->free(q);
  fb->free(other);
  check_invariants(*fa);
  check_invariants(*fb);
}

TEST_CASE("Buffer is move-only RAII over the allocator", "[allocator]") {
  auto fa = make_fake_allocator(8 * MiB);
  CachingAllocator& a = *fa;
  {
    Buffer b = alloc_buffer(a, 3000);
    REQUIRE(b);
    CHECK(b.size() == 3000);
    CHECK(a.owns(b.data()));
    Buffer c = std::move(b);
    CHECK_FALSE(b);  // NOLINT(bugprone-use-after-move): a moved-from Buffer is empty by contract
    CHECK(c.data() != nullptr);
    CHECK(a.stats().allocation.current == 1);
    Buffer d = alloc_buffer(a, 10);
    d = std::move(c);  // d's old block is freed
    CHECK(a.stats().allocation.current == 1);
    void* raw = d.release();
    CHECK(a.stats().allocation.current == 1);
    a.free(raw);
    Buffer e = alloc_buffer(a, 64);
    e.reset();
    CHECK_FALSE(e);
  }
  CHECK(a.stats().allocation.current == 0);
  CHECK(a.stats().allocation.allocated == 3);
  check_invariants(a);
}

TEST_CASE("concurrent alloc/free from several threads keeps exact stats", "[allocator]") {
  auto fa = make_fake_allocator(512 * MiB);
  CachingAllocator& a = *fa;
  constexpr int kThreads = 4, kIters = 4000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&a, t] {
      std::vector<void*> live;
      uint64_t x = 0x9E3779B97F4A7C15ull * (t + 1);
      for (int i = 0; i < kIters; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (live.size() < 16 && (x & 3) != 0) {
          size_t bytes = 1 + (x >> 8) % (3 * MiB);
          void* p = a.allocate(bytes, StreamId(t % 2));
          static_cast<unsigned char*>(p)[0] = 1;  // the memory is real and ours
          live.push_back(p);
        } else if (!live.empty()) {
          size_t k = (x >> 20) % live.size();
          a.free(live[k]);
          live.erase(live.begin() + static_cast<ptrdiff_t>(k));
        }
      }
      for (void* p : live) a.free(p);
    });
  for (auto& th : threads) th.join();
  Stats st = a.stats();
  CHECK(st.allocation.current == 0);
  CHECK(st.allocated_bytes.current == 0);
  CHECK(st.allocation.allocated == st.allocation.freed);
  CHECK(st.num_cache_hits + st.num_device_alloc >= st.allocation.allocated);
  check_invariants(a);
}

TEST_CASE("oversize blocks are not carved up by smaller requests (max_split_size)", "[allocator]") {
  auto fa = make_fake_allocator(1024 * MiB);
  CachingAllocator& a = *fa;
  REQUIRE(a.max_split_size() == kMaxSplitSize);
  void* huge = a.allocate(500 * MiB);
  a.free(huge);
  // A medium request does not split the cached 500 MiB block: it gets its own segment.
  void* mid = a.allocate(12 * MiB);
  CHECK(fa.fake->alloc_log.size() == 2);
  CHECK(a.snapshot().size() == 2);
  // A huge request less than 20 MiB smaller takes the whole block, unsplit.
  void* huge2 = a.allocate(490 * MiB);
  CHECK(huge2 == huge);
  CHECK(a.block_size(huge2) == 500 * MiB);
  a.free(huge2);
  // A huge request 20 MiB or more smaller does not: new segment.
  void* huge3 = a.allocate(400 * MiB);
  CHECK(huge3 != huge);
  CHECK(fa.fake->alloc_log.size() == 3);
  check_invariants(a);
  a.free(huge3);
  a.free(mid);
  // With the rule off (PyTorch's default), the 500 MiB block is split for a medium request.
  a.empty_cache();
  a.set_max_split_size(SIZE_MAX);
  void* h = a.allocate(500 * MiB);
  a.free(h);
  void* m = a.allocate(12 * MiB);
  CHECK(m == h);
  CHECK(a.block_size(m) == 12 * MiB);
  a.free(m);
  check_invariants(a);
}
