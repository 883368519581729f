// Randomized alloc / free / record_stream / event-completion / empty_cache sequences (fixed
// seeds, thousands of operations) run against the allocator and against an independent,
// deliberately naive model of the pool rules (segments as vectors of blocks, linear-scan
// best fit). After every operation the model must predict the exact pointer returned (or
// the OOM), and every statistic: current, peak, allocated and freed.
#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "tests/allocator/alloc_test_util.h"

using namespace lt::alloc;
using namespace lt::alloc::test;

namespace {

class Model {
 public:
  static constexpr size_t kMaxSplit = 64u << 20;
  explicit Model(FakeBackend& fake) : fake_(fake) {}

  struct B {
    uintptr_t ptr = 0;
    size_t size = 0;
    size_t req = 0;
    bool alloc = false;
    int pending = 0;
    std::vector<StreamId> uses;
    bool is_free() const { return !alloc && pending == 0; }
  };
  struct Seg {
    uintptr_t base;
    size_t size;
    StreamId stream;
    bool small;
    std::vector<B> blocks;  // address order
  };

  // Returns the predicted pointer, or 0 when the allocation must fail with OOM.
  // Must be called after the real allocate (segment addresses are read from the backend log).
  uintptr_t alloc(size_t bytes, StreamId stream) {
    process_events();
    const size_t size = bytes < 512 ? 512 : (bytes + 511) / 512 * 512;
    const bool small = size <= (1u << 20);
    auto found = best_fit(size, stream, small);
    if (found.first >= 0) {
      ++st.num_cache_hits;
    } else if (has_room(seg_size(size))) {
      found = new_segment(size, stream, small);
    } else {
      ++st.num_alloc_retries;
      sync_all();
      found = best_fit(size, stream, small);
      if (found.first >= 0) {
        ++st.num_cache_hits;
      } else {
        release_free_segments();
        if (!has_room(seg_size(size))) {
          ++st.num_ooms;
          return 0;
        }
        found = new_segment(size, stream, small);
      }
    }
    Seg& s = segs[static_cast<size_t>(found.first)];
    size_t bi = static_cast<size_t>(found.second);
    size_t rem = s.blocks[bi].size - size;
    if (small ? rem >= 512 : (size < kMaxSplit && rem > (1u << 20))) {
      B rest;
      rest.ptr = s.blocks[bi].ptr + size;
      rest.size = rem;
      s.blocks[bi].size = size;
      s.blocks.insert(s.blocks.begin() + static_cast<ptrdiff_t>(bi) + 1, rest);
    }
    B& b = s.blocks[bi];
    b.alloc = true;
    b.req = bytes;
    inc(st.allocation, 1);
    inc(st.allocated_bytes, int64_t(b.size));
    inc(st.active, 1);
    inc(st.active_bytes, int64_t(b.size));
    inc(st.requested_bytes, int64_t(bytes));
    update_split_stats();
    return b.ptr;
  }

  // Called after the real free (events recorded by it are read from the backend).
  void free(uintptr_t ptr, size_t events_before) {
    auto [si, bi] = find(ptr);
    B& b = segs[si].blocks[bi];
    REQUIRE(b.alloc);
    b.alloc = false;
    dec(st.allocation, 1);
    dec(st.allocated_bytes, int64_t(b.size));
    dec(st.requested_bytes, int64_t(b.req));
    if (b.uses.empty()) {
      free_block(ptr);
      return;
    }
    REQUIRE(fake_.events.size() == events_before + b.uses.size());
    for (size_t k = 0; k < b.uses.size(); ++k) {
      REQUIRE(fake_.events[events_before + k].stream == b.uses[k]);
      pending_.push_back({EventId(events_before + k + 1), ptr});
    }
    b.pending = static_cast<int>(b.uses.size());
  }

  void record_stream(uintptr_t ptr, StreamId stream) {
    auto [si, bi] = find(ptr);
    Seg& s = segs[si];
    B& b = s.blocks[bi];
    if (stream != s.stream && std::find(b.uses.begin(), b.uses.end(), stream) == b.uses.end()) b.uses.push_back(stream);
  }

  // Records which events are complete now, before a real call that may synchronize them.
  void observe_events() {
    complete_.resize(fake_.events.size());
    for (size_t i = 0; i < fake_.events.size(); ++i) complete_[i] = fake_.events[i].complete;
  }

  void empty_cache() {
    sync_all();
    release_free_segments();
  }

  Stats st;
  std::vector<Seg> segs;

 private:
  struct Pending {
    EventId id;
    uintptr_t ptr;
  };

  static void inc(StatCounter& c, int64_t n) {
    c.current += n;
    c.allocated += n;
    c.peak = std::max(c.peak, c.current);
  }
  static void dec(StatCounter& c, int64_t n) {
    c.current -= n;
    c.freed += n;
  }

  static size_t seg_size(size_t size) {
    if (size <= (1u << 20)) return 2u << 20;
    if (size < (10u << 20)) return 20u << 20;
    return (size + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  }
  bool has_room(size_t bytes) const { return size_t(st.reserved_bytes.current) + bytes <= fake_.capacity(); }

  std::pair<int, int> best_fit(size_t size, StreamId stream, bool small) const {
    std::pair<int, int> best{-1, -1};
    size_t best_size = 0;
    uintptr_t best_ptr = 0;
    for (size_t i = 0; i < segs.size(); ++i) {
      if (segs[i].stream != stream || segs[i].small != small) continue;
      for (size_t j = 0; j < segs[i].blocks.size(); ++j) {
        const B& b = segs[i].blocks[j];
        if (!b.is_free() || b.size < size) continue;
        if (best.first < 0 || b.size < best_size || (b.size == best_size && b.ptr < best_ptr)) {
          best = {int(i), int(j)};
          best_size = b.size;
          best_ptr = b.ptr;
        }
      }
    }
    // Oversize blocks: only for oversize requests less than 20 MiB smaller.
    if (best.first >= 0 && size < kMaxSplit && best_size >= kMaxSplit) return {-1, -1};
    if (best.first >= 0 && size >= kMaxSplit && best_size >= size + (20u << 20)) return {-1, -1};
    return best;
  }

  std::pair<int, int> new_segment(size_t size, StreamId stream, bool small) {
    REQUIRE(next_log_ < fake_.alloc_log.size());
    const auto& raw = fake_.alloc_log[next_log_++];
    REQUIRE(raw.bytes == seg_size(size));
    Seg s{reinterpret_cast<uintptr_t>(raw.ptr), raw.bytes, stream, small, {}};
    B whole;
    whole.ptr = s.base;
    whole.size = s.size;
    s.blocks.push_back(whole);
    segs.push_back(std::move(s));
    ++st.num_device_alloc;
    inc(st.segment, 1);
    inc(st.reserved_bytes, int64_t(raw.bytes));
    return {int(segs.size() - 1), 0};
  }

  std::pair<size_t, size_t> find(uintptr_t ptr) const {
    for (size_t i = 0; i < segs.size(); ++i)
      for (size_t j = 0; j < segs[i].blocks.size(); ++j)
        if (segs[i].blocks[j].ptr == ptr) return {i, j};
    FAIL("model: unknown pointer");
    return {0, 0};
  }

  void free_block(uintptr_t ptr) {
    auto [si, bi] = find(ptr);
    auto& v = segs[si].blocks;
    v[bi].uses.clear();
    v[bi].req = 0;
    dec(st.active, 1);
    dec(st.active_bytes, int64_t(v[bi].size));
    if (bi + 1 < v.size() && v[bi + 1].is_free()) {
      v[bi].size += v[bi + 1].size;
      v.erase(v.begin() + static_cast<ptrdiff_t>(bi) + 1);
    }
    if (bi > 0 && v[bi - 1].is_free()) {
      v[bi - 1].size += v[bi].size;
      v.erase(v.begin() + static_cast<ptrdiff_t>(bi));
    }
    update_split_stats();
  }

  void process_events() {
    for (size_t k = 0; k < pending_.size();) {
      if (!complete_[pending_[k].id - 1]) {
        ++k;
        continue;
      }
      uintptr_t ptr = pending_[k].ptr;
      pending_.erase(pending_.begin() + static_cast<ptrdiff_t>(k));
      auto [si, bi] = find(ptr);
      if (--segs[si].blocks[bi].pending == 0) free_block(ptr);
    }
  }

  void sync_all() {
    ++st.num_sync_all_streams;
    while (!pending_.empty()) {
      uintptr_t ptr = pending_.front().ptr;
      pending_.erase(pending_.begin());
      auto [si, bi] = find(ptr);
      if (--segs[si].blocks[bi].pending == 0) free_block(ptr);
    }
  }

  void release_free_segments() {
    for (size_t i = 0; i < segs.size();) {
      if (segs[i].blocks.size() == 1 && segs[i].blocks[0].is_free()) {
        ++st.num_device_free;
        dec(st.segment, 1);
        dec(st.reserved_bytes, int64_t(segs[i].size));
        segs.erase(segs.begin() + static_cast<ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    update_split_stats();
  }

  // inactive_split is derived from the layout; only current and peak are modelled.
  void update_split_stats() {
    int64_t n = 0, bytes = 0;
    for (const Seg& s : segs)
      if (s.blocks.size() > 1)
        for (const B& b : s.blocks)
          if (b.is_free()) {
            ++n;
            bytes += int64_t(b.size);
          }
    st.inactive_split.current = n;
    st.inactive_split.peak = std::max(st.inactive_split.peak, n);
    st.inactive_split_bytes.current = bytes;
    st.inactive_split_bytes.peak = std::max(st.inactive_split_bytes.peak, bytes);
  }

  FakeBackend& fake_;
  std::vector<Pending> pending_;
  std::vector<bool> complete_;  // event completion as seen before the current real call
  size_t next_log_ = 0;
};

void check_counter(const char* name, const StatCounter& got, const StatCounter& want, bool totals = true) {
  INFO("counter " << name);
  CHECK(got.current == want.current);
  CHECK(got.peak == want.peak);
  if (totals) {
    CHECK(got.allocated == want.allocated);
    CHECK(got.freed == want.freed);
  }
}

void check_stats(const Stats& got, const Stats& want) {
  check_counter("allocation", got.allocation, want.allocation);
  check_counter("segment", got.segment, want.segment);
  check_counter("active", got.active, want.active);
  check_counter("allocated_bytes", got.allocated_bytes, want.allocated_bytes);
  check_counter("reserved_bytes", got.reserved_bytes, want.reserved_bytes);
  check_counter("active_bytes", got.active_bytes, want.active_bytes);
  check_counter("requested_bytes", got.requested_bytes, want.requested_bytes);
  check_counter("inactive_split", got.inactive_split, want.inactive_split, false);
  check_counter("inactive_split_bytes", got.inactive_split_bytes, want.inactive_split_bytes, false);
  CHECK(got.num_device_alloc == want.num_device_alloc);
  CHECK(got.num_device_free == want.num_device_free);
  CHECK(got.num_cache_hits == want.num_cache_hits);
  CHECK(got.num_alloc_retries == want.num_alloc_retries);
  CHECK(got.num_ooms == want.num_ooms);
  CHECK(got.num_sync_all_streams == want.num_sync_all_streams);
}

size_t random_size(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  double r = unit(rng);
  if (r < 0.6) return 1 + size_t(std::exp2(unit(rng) * 20.0));         // 1 B .. 1 MiB, log-uniform
  if (r < 0.9) return (1u << 20) + size_t(unit(rng) * (9u << 20));     // 1 .. 10 MiB
  if (r < 0.97) return (10u << 20) + size_t(unit(rng) * (30u << 20));  // 10 .. 40 MiB
  return (48u << 20) + size_t(unit(rng) * (112u << 20));               // 48 .. 160 MiB (oversize rule)
}

void run_random(uint64_t seed, int ops, size_t capacity) {
  auto fa = make_fake_allocator(capacity);
  CachingAllocator& a = *fa;
  FakeBackend& fake = *fa.fake;
  Model model(fake);
  std::mt19937_64 rng(seed);
  const StreamId streams[] = {0, 0x1000, 0x2000};
  std::vector<void*> live;
  int ooms = 0, allocs = 0;
  for (int op = 0; op < ops; ++op) {
    INFO("seed " << seed << " op " << op);
    int kind = int(rng() % 100);
    if (kind < 45 || live.empty()) {
      size_t bytes = random_size(rng);
      StreamId s = streams[rng() % 3];
      void* p = nullptr;
      bool oom = false;
      model.observe_events();  // the real call may synchronize (complete) events
      try {
        p = a.allocate(bytes, s);
      } catch (const OutOfMemoryError&) { oom = true; }
      uintptr_t want = model.alloc(bytes, s);
      INFO("alloc " << bytes << " on stream " << s << " reserved " << model.st.reserved_bytes.current << " fake used "
                    << fake.used() << " failed " << fake.failed_allocs);
      REQUIRE(oom == (want == 0));
      if (!oom) {
        REQUIRE(reinterpret_cast<uintptr_t>(p) == want);
        live.push_back(p);
        ++allocs;
      } else {
        ++ooms;
      }
    } else if (kind < 80) {
      size_t k = rng() % live.size();
      size_t before = fake.events.size();
      a.free(live[k]);
      model.free(reinterpret_cast<uintptr_t>(live[k]), before);
      live.erase(live.begin() + static_cast<ptrdiff_t>(k));
    } else if (kind < 90) {
      void* p = live[rng() % live.size()];
      StreamId s = streams[rng() % 3];
      a.record_stream(p, s);
      model.record_stream(reinterpret_cast<uintptr_t>(p), s);
    } else if (kind < 98) {
      fake.complete_stream(streams[rng() % 3]);
    } else {
      a.empty_cache();
      model.empty_cache();
    }
    check_stats(a.stats(), model.st);
    if (op % 97 == 0) check_invariants(a);
  }
  // Drain: free everything, complete all events, release the cache.
  for (void* p : live) {
    size_t before = fake.events.size();
    a.free(p);
    model.free(reinterpret_cast<uintptr_t>(p), before);
  }
  fake.complete_all();
  a.empty_cache();
  model.empty_cache();
  check_stats(a.stats(), model.st);
  check_invariants(a);
  CHECK(a.stats().reserved_bytes.current == 0);
  CHECK(fake.used() == 0);
  CHECK(fake.undestroyed_events() == 0);
  // The sequences must exercise the interesting paths, or the test proves little.
  CHECK(allocs > ops / 4);
  CHECK(model.st.num_cache_hits > 0);
  CHECK(model.st.inactive_split.peak > 0);
  INFO("ooms " << ooms << " retries " << model.st.num_alloc_retries);
  if (capacity < (128u << 20)) {
    CHECK(model.st.num_alloc_retries > 0);
    CHECK(ooms > 0);
  }
}

}  // namespace

TEST_CASE("random sequences match an independent model of pointers and stats", "[allocator]") {
  SECTION("roomy backend, seed 1") { run_random(1, 4000, 512u << 20); }
  SECTION("tight backend (OOM retries), seed 2") { run_random(2, 4000, 96u << 20); }
  SECTION("tight backend (OOM retries), seed 3") { run_random(3, 4000, 64u << 20); }
  SECTION("mid backend, seed 4") { run_random(4, 4000, 160u << 20); }
}
