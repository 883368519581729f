// Out-of-memory retry, cross-stream reuse through events, private (graph) streams and poison
// mode, on a fake backend whose capacity is limited and whose stream events the test
// completes by hand.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/allocator/alloc_test_util.h"

using namespace lt::alloc;
using namespace lt::alloc::test;

TEST_CASE("OOM: free the cache and retry once, then throw a PyTorch-like message", "[allocator]") {
  auto fa = make_fake_allocator(48 * MiB);
  CachingAllocator& a = *fa;
  // Fill the cache with two free large segments (20 MiB and 16 MiB, cached, unused).
  void* x = a.allocate(5 * MiB);
  void* y = a.allocate(16 * MiB);
  REQUIRE(a.stats().reserved_bytes.current == int64_t(36 * MiB));
  a.free(x);
  a.free(y);
  void* small = a.allocate(1000);  // a 1 KiB block; its 2 MiB small segment stays in use
  // 30 MiB needs a 30 MiB segment: 38 + 30 > 48 fails, so the retry frees both cached
  // large segments (36 MiB) and succeeds.
  void* big = a.allocate(30 * MiB);
  Stats st = a.stats();
  CHECK(st.num_alloc_retries == 1);
  CHECK(st.num_ooms == 0);
  CHECK(st.num_device_free == 2);
  CHECK(st.reserved_bytes.current == int64_t(32 * MiB));
  CHECK(fa.fake->failed_allocs == 1);
  check_invariants(a);

  // Now 20 MiB more cannot fit even after the retry (nothing cached): OutOfMemoryError.
  std::string msg;
  try {
    a.allocate(17 * MiB + 3);
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError& e) { msg = e.what(); }
  INFO(msg);
  CHECK_THAT(msg, Catch::Contains("out of memory"));
  CHECK_THAT(msg, Catch::Contains("Tried to allocate 17.00 MiB"));
  CHECK_THAT(msg, Catch::Contains(std::to_string(17 * MiB + 3) + " bytes requested"));
  CHECK_THAT(msg, Catch::Contains("total capacity of 48.00 MiB of which 16.00 MiB is free"));
  CHECK_THAT(msg, Catch::Contains("30.00 MiB is allocated by lintrain"));
  CHECK_THAT(msg, Catch::Contains("2.00 MiB is reserved by lintrain but unallocated"));
  CHECK_THAT(msg, Catch::Contains("In use: " + std::to_string(30 * MiB + 1024) + " bytes in 2 allocations"));
  CHECK_THAT(msg, Catch::Contains("reserved: " + std::to_string(32 * MiB) + " bytes in 2 segments"));
  CHECK_THAT(msg, Catch::Contains("largest free block: " + std::to_string(2 * MiB - 1024) + " bytes"));
  st = a.stats();
  CHECK(st.num_alloc_retries == 2);
  CHECK(st.num_ooms == 1);
  CHECK(st.allocation.current == 2);  // the failed call changed nothing else
  check_invariants(a);
  a.free(big);
  a.free(small);
}

TEST_CASE("OOM with tracing on writes the snapshot to the configured path", "[allocator]") {
  auto fa = make_fake_allocator(24 * MiB);
  CachingAllocator& a = *fa;
  const std::string path = "lt_alloc_test_oom_snapshot.json";
  std::remove(path.c_str());
  a.set_trace(true);
  a.set_oom_trace_path(path);
  a.set_step(7);
  void* p = a.allocate(4 * MiB);
  CHECK_THROWS_WITH(a.allocate(21 * MiB + 100), Catch::Contains("Allocator trace written to " + path));
  std::ifstream f(path);
  REQUIRE(f.good());
  nlohmann::json snap = nlohmann::json::parse(f);
  const auto& trace = snap["device_traces"][0];
  REQUIRE(trace.size() >= 3);
  const auto& last = trace.back();
  CHECK(last["action"] == "oom");
  CHECK(last["size"] == 21 * MiB + 512);  // rounded request
  CHECK(last["requested_size"] == 21 * MiB + 100);
  CHECK(last["device_free"] == 4 * MiB);
  CHECK(last["step"] == 7);
  CHECK(snap["segments"].size() == 1);
  a.free(p);
  std::remove(path.c_str());
}

TEST_CASE("cross-stream use: a freed block returns only after the other stream's event", "[allocator]") {
  auto fa = make_fake_allocator(64 * MiB);
  CachingAllocator& a = *fa;
  FakeBackend& fake = *fa.fake;
  const StreamId s0 = 0x100, s1 = 0x200, s2 = 0x300;
  void* p = a.allocate(64 * KiB, s0);
  a.record_stream(p, s1);
  a.record_stream(p, s1);  // recorded once
  a.record_stream(p, s2);
  a.record_stream(p, s0);  // own stream: no event needed
  a.free(p);
  REQUIRE(fake.events.size() == 2);
  CHECK(fake.events[0].stream == s1);
  CHECK(fake.events[1].stream == s2);
  Stats st = a.stats();
  CHECK(st.allocation.current == 0);  // free requested ...
  CHECK(st.allocated_bytes.current == 0);
  CHECK(st.active.current == 1);  // ... but not completed
  CHECK(st.active_bytes.current == int64_t(64 * KiB));
  auto segs = a.snapshot();
  REQUIRE(segs[0].blocks.size() == 2);
  CHECK(segs[0].blocks[0].active);
  CHECK_FALSE(segs[0].blocks[0].allocated);
  check_invariants(a);

  // The same size on the same stream cannot reuse it yet: it gets the next block.
  void* q = a.allocate(64 * KiB, s0);
  CHECK(q != p);
  CHECK(reinterpret_cast<uintptr_t>(q) == reinterpret_cast<uintptr_t>(p) + 64 * KiB);
  // Completing only s1 is not enough.
  fake.complete_stream(s1);
  void* r = a.allocate(64 * KiB, s0);
  CHECK(r != p);
  CHECK(a.stats().active.current == 3);
  // Completing s2 frees it at the next allocation, which reuses it (best fit, lowest address).
  fake.complete_stream(s2);
  void* t = a.allocate(64 * KiB, s0);
  CHECK(t == p);
  CHECK(fake.undestroyed_events() == 0);
  check_invariants(a);

  // A block never moves to another stream's pool: s1 gets its own segment.
  size_t segs_before = a.snapshot().size();
  void* w = a.allocate(64 * KiB, s1);
  CHECK(a.snapshot().size() == segs_before + 1);
  for (void* v : {q, r, t, w}) a.free(v);
  check_invariants(a);
}

TEST_CASE("empty_cache synchronizes pending stream events before releasing", "[allocator]") {
  auto fa = make_fake_allocator(64 * MiB);
  CachingAllocator& a = *fa;
  void* p = a.allocate(3 * MiB, 1);
  a.record_stream(p, 2);
  a.free(p);
  CHECK(fa.fake->pending_events() == 1);
  a.empty_cache();  // FakeBackend::raw_free throws if an event were still pending
  CHECK(fa.fake->sync_calls == 1);
  CHECK(a.stats().reserved_bytes.current == 0);
  CHECK(a.stats().active.current == 0);
  CHECK(a.stats().num_sync_all_streams == 1);
  check_invariants(a);
}

TEST_CASE("OOM retry waits for stream events and reuses the released block", "[allocator]") {
  auto fa = make_fake_allocator(20 * MiB);
  CachingAllocator& a = *fa;
  // 19.5 MiB fills the 20 MiB segment (a 0.5 MiB remainder is not split off).
  void* p = a.allocate(19 * MiB + 512 * KiB);
  a.record_stream(p, 9);
  a.free(p);
  // No room for a second 20 MiB segment; the retry synchronizes the event and reuses p.
  void* q = a.allocate(19 * MiB + 512 * KiB);
  CHECK(q == p);
  Stats st = a.stats();
  CHECK(st.num_alloc_retries == 1);
  CHECK(st.num_device_alloc == 1);
  CHECK(st.num_ooms == 0);
  a.free(q);
}

TEST_CASE("a private stream's segments stay reserved through empty_cache and the OOM retry", "[allocator]") {
  auto fa = make_fake_allocator(48 * MiB);
  CachingAllocator& a = *fa;
  const StreamId graph = 5;
  // What a capture leaves: a live block and a freed one on the graph's stream.
  void* kept = a.allocate(5 * MiB, graph);
  void* freed = a.allocate(16 * MiB, graph);
  a.free(freed);
  a.set_stream_private(graph, true);
  CHECK(a.stream_private(graph));
  CHECK_FALSE(a.stream_private(0));
  const int64_t reserved = a.stats().reserved_bytes.current;
  REQUIRE(reserved == int64_t(36 * MiB));
  a.empty_cache();
  CHECK(a.stats().reserved_bytes.current == reserved);
  // Another stream's request that needs the private segments' room fails instead of taking it.
  CHECK_THROWS_AS(a.allocate(20 * MiB, 0), OutOfMemoryError);
  CHECK(a.stats().reserved_bytes.current == reserved);
  // The freed block serves its own stream again, at the same address.
  void* again = a.allocate(16 * MiB, graph);
  CHECK(again == freed);
  a.free(again);
  // Released once the stream is no longer private.
  a.free(kept);
  a.set_stream_private(graph, false);
  a.empty_cache();
  CHECK(a.stats().reserved_bytes.current == 0);
  check_invariants(a);
}

TEST_CASE("poison mode fills every block handed out with 0xFF (NaN in f32/bf16/f16)", "[allocator]") {
  auto fa = make_fake_allocator(64 * MiB);
  CachingAllocator& a = *fa;
  // Without poison, recycled memory keeps what was written.
  float* f = static_cast<float*>(a.allocate(1024 * sizeof(float)));
  for (int i = 0; i < 1024; ++i) f[i] = 1.0f;
  a.free(f);
  float* g = static_cast<float*>(a.allocate(1024 * sizeof(float)));
  REQUIRE(g == f);
  CHECK(g[0] == 1.0f);
  a.free(g);

  a.set_poison(true);
  CHECK(a.poison());
  for (size_t bytes : {size_t(4), size_t(1000), size_t(3 * MiB + 17)}) {
    unsigned char* p = static_cast<unsigned char*>(a.allocate(bytes));
    const size_t block = a.block_size(p);
    size_t bad = 0;
    for (size_t i = 0; i < block; ++i) bad += p[i] != 0xFF;
    CHECK(bad == 0);
    float v;
    std::memcpy(&v, p, sizeof v);
    CHECK(std::isnan(v));
    uint16_t h;  // bf16 / f16: exponent all ones, mantissa non-zero
    std::memcpy(&h, p, sizeof h);
    CHECK((h & 0x7F80) == 0x7F80);
    CHECK((h & 0x007F) != 0);
    CHECK((h & 0x7C00) == 0x7C00);
    CHECK((h & 0x03FF) != 0);
    std::memset(p, 0, block);
    a.free(p);
  }
  // A reused block is poisoned again.
  float* h = static_cast<float*>(a.allocate(1024 * sizeof(float)));
  CHECK(std::isnan(h[0]));
  CHECK(std::isnan(h[1023]));
  a.free(h);
  CHECK(fa.fake->fill_calls == 4);
}

TEST_CASE("LINTRAIN_ALLOC_POISON=1 turns poison mode on at construction", "[allocator]") {
  const char* old = std::getenv("LINTRAIN_ALLOC_POISON");
  std::string saved = old ? old : "";
  ::setenv("LINTRAIN_ALLOC_POISON", "1", 1);
  {
    CachingAllocator a(std::make_unique<FakeBackend>(8 * MiB));
    CHECK(a.poison());
    unsigned char* p = static_cast<unsigned char*>(a.allocate(100));
    CHECK(p[0] == 0xFF);
    CHECK(p[511] == 0xFF);
    a.free(p);
  }
  ::setenv("LINTRAIN_ALLOC_POISON", "0", 1);
  {
    CachingAllocator a(std::make_unique<FakeBackend>(8 * MiB));
    CHECK_FALSE(a.poison());
  }
  if (old) ::setenv("LINTRAIN_ALLOC_POISON", saved.c_str(), 1);
  else ::unsetenv("LINTRAIN_ALLOC_POISON");
}
