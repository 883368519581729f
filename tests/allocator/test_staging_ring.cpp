// The staging ring (allocator/staging_ring.h) on the fake backend, whose stream events
// complete only when the test says so: round-robin order, no reuse of a slot while the copy
// recorded on it is in flight, waiting for the first such copy when no slot is free,
// growth when every slot is held, events destroyed once, slots freed at the end; and a
// producer / consumer pair on the host backend.
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "allocator/staging_ring.h"
#include "tests/allocator/alloc_test_util.h"

using namespace lt::alloc;
using namespace lt::alloc::test;

namespace {

// Forwards to a FakeBackend the test keeps, so it can be inspected after the ring is gone.
class Forward final : public Backend {
 public:
  explicit Forward(FakeBackend& f) : f_(f) {}
  const char* name() const override { return f_.name(); }
  int device() const override { return -1; }
  void* raw_alloc(size_t bytes) override { return f_.raw_alloc(bytes); }
  void raw_free(void* ptr) override { f_.raw_free(ptr); }
  EventId event_record(StreamId stream) override { return f_.event_record(stream); }
  bool event_query(EventId event) override { return f_.event_query(event); }
  void event_synchronize(EventId event) override { f_.event_synchronize(event); }
  void event_destroy(EventId event) override { f_.event_destroy(event); }
  void fill(void* ptr, size_t bytes, uint8_t pattern, StreamId stream) override {
    f_.fill(ptr, bytes, pattern, stream);
  }

 private:
  FakeBackend& f_;
};

constexpr StreamId kCopyStream = 7;

}  // namespace

TEST_CASE("staging ring: round-robin, no reuse while a copy is in flight, wait, growth", "[allocator][staging]") {
  FakeBackend fake(64 * MiB);
  {
    StagingRing ring(std::make_unique<Forward>(fake), 1000, 3);
    CHECK(ring.slot_bytes() == 1024);  // rounded to 512
    CHECK(fake.alloc_calls == 3);
    // Round-robin when nothing is in flight.
    for (int expect : {0, 1, 2, 0, 1}) {
      const int s = ring.acquire();
      CHECK(s == expect);
      ring.release(s);
    }
    // Slot 2 is next; a copy reads it, then it goes back.
    int a = ring.acquire();
    REQUIRE(a == 2);
    std::memset(ring.data(a), 0xAB, ring.slot_bytes());
    ring.record(a, kCopyStream);
    ring.release(a);
    CHECK(fake.pending_events() == 1);
    // The ring hands out 0 and 1, then has nothing free: slot 2's copy is still in flight.
    const int b = ring.acquire(), c = ring.acquire();
    CHECK(b == 0);
    CHECK(c == 1);
    CHECK(ring.try_acquire() == -1);
    // acquire() waits for slot 2's copy (and only for it), then hands it out.
    const int64_t syncs = fake.sync_calls;
    const int d = ring.acquire();
    CHECK(d == 2);
    CHECK(fake.sync_calls == syncs + 1);
    CHECK(fake.pending_events() == 0);
    CHECK(ring.stats().waits == 1);
    // Every slot held: the ring grows by one.
    const int e = ring.acquire();
    CHECK(e == 3);
    CHECK(fake.alloc_calls == 4);
    CHECK(ring.stats().grown == 1);
    CHECK(ring.stats().slots == 4);
    for (int s : {b, c, d, e}) ring.release(s);
    // A completed copy does not hold its slot back.
    int f = ring.acquire();
    ring.record(f, kCopyStream);
    ring.release(f);
    fake.complete_stream(kCopyStream);
    int seen = 0;
    for (int i = 0; i < 4; ++i) {
      const int s = ring.try_acquire();
      REQUIRE(s >= 0);
      seen |= 1 << s;
    }
    CHECK(seen == 0xF);
    CHECK(ring.try_acquire() == -1);
    for (int s = 0; s < 4; ++s) ring.release(s);
    CHECK(ring.stats().acquires == 5 + 1 + 2 + 1 + 1 + 1 + 4);
    // A copy still in flight when the ring goes: the destructor waits for it.
    int g = ring.acquire();
    ring.record(g, kCopyStream);
    ring.release(g);
    CHECK(fake.pending_events() == 1);
  }
  CHECK(fake.pending_events() == 0);
  CHECK(fake.undestroyed_events() == 0);
  CHECK(fake.free_log.size() == 4);
  CHECK(fake.used() == 0);
}

TEST_CASE("staging ring: a device -> host copy into a held slot is read once ready", "[allocator][staging]") {
  FakeBackend fake(64 * MiB);
  StagingRing ring(std::make_unique<Forward>(fake), 24, 2);
  const int s = ring.acquire();
  CHECK(ring.ready(s));  // nothing recorded yet
  ring.record(s, kCopyStream);
  CHECK_FALSE(ring.ready(s));
  // A second copy into the same slot replaces the first's event (destroyed, not leaked).
  ring.record(s, kCopyStream);
  CHECK(fake.undestroyed_events() == 1);
  fake.complete_stream(kCopyStream);
  CHECK(ring.ready(s));
  CHECK(fake.undestroyed_events() == 0);
  ring.record(s, kCopyStream);
  const int64_t syncs = fake.sync_calls;
  ring.wait(s);
  CHECK(fake.sync_calls == syncs + 1);
  CHECK(ring.ready(s));
  ring.release(s);
  // Misuse names the slot.
  CHECK_THROWS_WITH(ring.release(s), Catch::Contains("slot 0 is not held"));
  CHECK_THROWS_WITH(ring.record(s, kCopyStream), Catch::Contains("slot 0 is not held"));
  CHECK_THROWS_WITH(ring.release(9), Catch::Contains("no slot 9"));
  CHECK_THROWS_AS(StagingRing(std::make_unique<Forward>(fake), 0, 2), std::invalid_argument);
  CHECK_THROWS_AS(StagingRing(std::make_unique<Forward>(fake), 64, 0), std::invalid_argument);
}

TEST_CASE("staging ring: an exhausted backend is an error naming it", "[allocator][staging]") {
  FakeBackend fake(4 * KiB);
  CHECK_THROWS_WITH(StagingRing(std::make_unique<Forward>(fake), 2 * KiB, 3),
                    Catch::Contains("fake backend has no memory for 3 slots"));
  CHECK(fake.used() == 0);  // the slots it got were returned
}

TEST_CASE("staging ring: a producer thread and a consumer pass slots without corruption", "[allocator][staging]") {
  StagingRing ring(std::make_unique<HostBackend>(), 256, 3);
  constexpr int kItems = 3000;
  std::mutex mu;
  std::deque<std::pair<int, int>> queue;  // (slot, item)
  std::thread producer([&] {
    for (int i = 0; i < kItems; ++i) {
      const int s = ring.acquire();
      std::memset(ring.data(s), i & 0xFF, ring.slot_bytes());
      for (;;) {
        std::lock_guard<std::mutex> lk(mu);
        if (queue.size() < 2) {
          queue.emplace_back(s, i);
          break;
        }
      }
    }
  });
  int bad = 0;
  for (int got = 0; got < kItems;) {
    std::pair<int, int> item{-1, -1};
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!queue.empty()) {
        item = queue.front();
        queue.pop_front();
      }
    }
    if (item.first < 0) continue;
    const auto* p = static_cast<const unsigned char*>(ring.data(item.first));
    for (size_t k = 0; k < ring.slot_bytes(); ++k) bad += p[k] != (item.second & 0xFF);
    CHECK(item.second == got);
    ring.record(item.first, 0);
    ring.release(item.first);
    ++got;
  }
  producer.join();
  CHECK(bad == 0);
  // Two queued, one being filled, one with the consumer: at most one slot beyond the three.
  CHECK(ring.stats().slots <= 4);
  CHECK(ring.stats().acquires == kItems);
}
