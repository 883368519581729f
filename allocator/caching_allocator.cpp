// Pool rules of the caching allocator: rounding, small/large pools per stream, best fit,
// splitting, coalescing, stream events, OOM retry, statistics. See caching_allocator.h for
// the rules and detail/allocator_impl.h for the invariants.
#include "allocator/caching_allocator.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "allocator/detail/allocator_impl.h"
#include "allocator/stage_tag.h"

namespace lt::alloc {

size_t round_size(size_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

size_t segment_size_for(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

const char* trace_action_name(TraceAction action) {
  switch (action) {
    case TraceAction::alloc: return "alloc";
    case TraceAction::free_requested: return "free_requested";
    case TraceAction::free_completed: return "free_completed";
    case TraceAction::segment_alloc: return "segment_alloc";
    case TraceAction::segment_free: return "segment_free";
    case TraceAction::oom: return "oom";
    case TraceAction::empty_cache: return "empty_cache";
  }
  return "unknown";
}

namespace {

inline void stat_inc(StatCounter& c, int64_t n) {
  c.current += n;
  c.allocated += n;
  if (c.current > c.peak) c.peak = c.current;
}
inline void stat_dec(StatCounter& c, int64_t n) {
  c.current -= n;
  c.freed += n;
}

std::string hex_ptr(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(p));
  return buf;
}

// PyTorch's format_size: "512 bytes", "1.50 KiB", "20.00 MiB", "1.25 GiB".
std::string format_size(uint64_t bytes) {
  char buf[64];
  if (bytes <= 1024) std::snprintf(buf, sizeof buf, "%" PRIu64 " bytes", bytes);
  else if (bytes <= 1048576) std::snprintf(buf, sizeof buf, "%.2f KiB", bytes / 1024.0);
  else if (bytes <= 1073741824) std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
  return buf;
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool env_poison() {
  const char* v = std::getenv("LINTRAIN_ALLOC_POISON");
  return v && (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0 || std::strcmp(v, "on") == 0);
}

std::string device_label(const Backend& b) {
  if (b.device() < 0) return std::string(b.name());
  return std::string(b.name()) + ":" + std::to_string(b.device());
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Trace helpers
// ---------------------------------------------------------------------------------------

uint32_t CachingAllocator::Impl::intern_stage(const char* tag) {
  if (!tag) tag = "";
  // The tag pointer is reused by StageScope for different contents, so compare text.
  if (tag == last_stage_ptr && stage_names[last_stage_id] == tag) return last_stage_id;
  auto it = stage_ids.find(tag);
  uint32_t id;
  if (it != stage_ids.end()) {
    id = it->second;
  } else {
    id = static_cast<uint32_t>(stage_names.size());
    stage_names.emplace_back(tag);
    stage_ids.emplace(stage_names.back(), id);
  }
  last_stage_ptr = tag;
  last_stage_id = id;
  return id;
}

void CachingAllocator::Impl::record(TraceAction action, uintptr_t addr, size_t size, size_t requested, StreamId stream,
                                    int64_t device_free) {
  RawTraceEvent e{action,
                  intern_stage(stage_tag()),
                  addr,
                  size,
                  requested,
                  stream,
                  step,
                  now_us(),
                  stats.allocated_bytes.current,
                  stats.reserved_bytes.current,
                  device_free};
  if (ring.size() < trace_capacity) {
    ring.push_back(e);
  } else {
    ring[ring_next] = e;
    ring_next = (ring_next + 1) % trace_capacity;
    ++trace_dropped;
  }
}

std::vector<RawTraceEvent> CachingAllocator::Impl::ordered_trace() const {
  std::vector<RawTraceEvent> out;
  out.reserve(ring.size());
  if (ring.size() < trace_capacity || ring_next == 0) {
    out = ring;
  } else {
    out.insert(out.end(), ring.begin() + static_cast<ptrdiff_t>(ring_next), ring.end());
    out.insert(out.end(), ring.begin(), ring.begin() + static_cast<ptrdiff_t>(ring_next));
  }
  return out;
}

std::vector<SegmentInfo> CachingAllocator::Impl::snapshot_locked() const {
  std::vector<SegmentInfo> out;
  out.reserve(segments.size());
  for (const auto& [base, seg] : segments) {
    SegmentInfo si;
    si.device = backend->device();
    si.address = base;
    si.total_size = seg->size;
    si.stream = seg->stream;
    si.is_large = seg->is_large;
    for (const Block* b = seg->head; b; b = b->next) {
      BlockInfo bi;
      bi.address = b->ptr;
      bi.size = b->size;
      bi.allocated = b->allocated;
      bi.active = b->allocated || b->event_count > 0;
      bi.requested_size = bi.active ? b->requested : 0;
      if (bi.allocated) {
        si.allocated_size += b->size;
        si.requested_size += b->requested;
      }
      if (bi.active) si.active_size += b->size;
      si.blocks.push_back(bi);
    }
    out.push_back(std::move(si));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Pool operations (all called with the mutex held)
// ---------------------------------------------------------------------------------------

namespace {

using Impl = CachingAllocator::Impl;

StreamPools& pools_for(Impl& s, StreamId stream) {
  if (stream == s.last_stream) return *s.last_pools;
  auto& slot = s.stream_pools[stream];
  if (!slot) {
    slot = std::make_unique<StreamPools>(&s.nodes);
    slot->small.is_small = true;
    slot->small.stream = stream;
    slot->large.is_small = false;
    slot->large.stream = stream;
  }
  s.last_stream = stream;
  s.last_pools = slot.get();
  return *slot;
}

Block* new_block(Impl& s) {
  if (!s.spare_blocks.empty()) {
    Block* b = s.spare_blocks.back();
    s.spare_blocks.pop_back();
    return b;
  }
  return new Block();
}

void recycle_block(Impl& s, Block* b) {
  *b = Block();
  s.spare_blocks.push_back(b);
}

void insert_free(Impl& s, Block* b) {
  b->free_it = b->pool->free_blocks.insert(b).first;
  b->in_free_set = true;
  if (b->is_split()) {
    stat_inc(s.stats.inactive_split, 1);
    stat_inc(s.stats.inactive_split_bytes, static_cast<int64_t>(b->size));
  }
}

void erase_free(Impl& s, Block* b) {
  b->pool->free_blocks.erase(b->free_it);
  b->in_free_set = false;
  if (b->is_split()) {
    stat_dec(s.stats.inactive_split, 1);
    stat_dec(s.stats.inactive_split_bytes, static_cast<int64_t>(b->size));
  }
}

// Smallest free block of `pool` with size >= `size` (ties: lowest address), or nullptr.
// Oversize blocks (>= max_split) serve only oversize requests, and only when they are less
// than kLargeBuffer bigger (PyTorch's max_split_size rule): a huge cached block is not
// carved up by medium requests, so the next huge request finds it whole.
Block* find_best_fit(Pool& pool, size_t size, size_t max_split) {
  Block key;
  key.size = size;
  key.ptr = 0;
  auto it = pool.free_blocks.lower_bound(&key);
  if (it == pool.free_blocks.end()) return nullptr;
  Block* b = *it;
  if (size < max_split && b->size >= max_split) return nullptr;
  if (size >= max_split && b->size >= size + kLargeBuffer) return nullptr;
  return b;
}

bool should_split(const Block* b, size_t size, size_t max_split) {
  size_t remaining = b->size - size;
  return b->pool->is_small ? remaining >= kMinBlockSize : (size < max_split && remaining > kSmallSize);
}

// A free block returns to its pool: stats, trace, coalescing with free neighbours.
void free_block(Impl& s, Block* b) {
  stat_dec(s.stats.active, 1);
  stat_dec(s.stats.active_bytes, static_cast<int64_t>(b->size));
  if (s.tracing) s.record(TraceAction::free_completed, b->ptr, b->size, b->requested, b->stream);
  b->requested = 0;
  b->stream_uses.clear();
  if (Block* p = b->prev; p && p->in_free_set) {
    erase_free(s, p);
    p->size += b->size;
    p->next = b->next;
    if (p->next) p->next->prev = p;
    recycle_block(s, b);
    b = p;
  }
  if (Block* n = b->next; n && n->in_free_set) {
    erase_free(s, n);
    b->size += n->size;
    b->next = n->next;
    if (b->next) b->next->prev = b;
    recycle_block(s, n);
  }
  insert_free(s, b);
}

void process_events(Impl& s) {
  for (auto it = s.pending.begin(); it != s.pending.end();) {
    if (!s.backend->event_query(it->event)) {
      ++it;
      continue;
    }
    s.backend->event_destroy(it->event);
    Block* b = it->block;
    it = s.pending.erase(it);
    if (--b->event_count == 0) free_block(s, b);
  }
}

void synchronize_and_free_events(Impl& s) {
  ++s.stats.num_sync_all_streams;
  while (!s.pending.empty()) {
    PendingEvent pe = s.pending.front();
    s.pending.pop_front();
    s.backend->event_synchronize(pe.event);
    s.backend->event_destroy(pe.event);
    if (--pe.block->event_count == 0) free_block(s, pe.block);
  }
}

// A new segment for a request of rounded size `size` in `pool`; nullptr when the backend
// is out of memory.
Block* alloc_segment(Impl& s, Pool& pool, size_t size) {
  size_t seg_size = segment_size_for(size);
  void* raw = s.backend->raw_alloc(seg_size);
  if (!raw) return nullptr;
  auto seg = std::make_unique<Segment>();
  seg->base = reinterpret_cast<uintptr_t>(raw);
  seg->size = seg_size;
  seg->stream = pool.stream;
  seg->is_large = !pool.is_small;
  Block* b = new_block(s);
  b->ptr = seg->base;
  b->size = seg_size;
  b->stream = pool.stream;
  b->pool = &pool;
  b->segment = seg.get();
  seg->head = b;
  s.segments.emplace(seg->base, std::move(seg));
  ++s.stats.num_device_alloc;
  stat_inc(s.stats.segment, 1);
  stat_inc(s.stats.reserved_bytes, static_cast<int64_t>(seg_size));
  if (s.tracing) s.record(TraceAction::segment_alloc, b->ptr, seg_size, 0, pool.stream);
  return b;
}

bool is_private(const Impl& s, StreamId stream) {
  return std::find(s.private_streams.begin(), s.private_streams.end(), stream) != s.private_streams.end();
}

// Returns every wholly free segment to the backend, except those of private streams.
size_t release_cached_segments(Impl& s) {
  size_t released = 0;
  for (auto it = s.segments.begin(); it != s.segments.end();) {
    Segment* seg = it->second.get();
    Block* head = seg->head;
    if (head->next == nullptr && head->in_free_set && !is_private(s, seg->stream)) {
      erase_free(s, head);
      s.backend->raw_free(reinterpret_cast<void*>(seg->base));
      ++s.stats.num_device_free;
      stat_dec(s.stats.segment, 1);
      stat_dec(s.stats.reserved_bytes, static_cast<int64_t>(seg->size));
      if (s.tracing) s.record(TraceAction::segment_free, seg->base, seg->size, 0, seg->stream);
      released += seg->size;
      recycle_block(s, head);
      it = s.segments.erase(it);
    } else {
      ++it;
    }
  }
  return released;
}

size_t largest_free_block(const Impl& s) {
  size_t best = 0;
  for (const auto& [stream, pools] : s.stream_pools) {
    (void)stream;
    if (!pools->small.free_blocks.empty()) best = std::max(best, (*pools->small.free_blocks.rbegin())->size);
    if (!pools->large.free_blocks.empty()) best = std::max(best, (*pools->large.free_blocks.rbegin())->size);
  }
  return best;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// CachingAllocator
// ---------------------------------------------------------------------------------------

CachingAllocator::CachingAllocator(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)), impl_(std::make_unique<Impl>()) {
  if (!backend_) throw std::invalid_argument("lt::alloc::CachingAllocator: null backend");
  impl_->backend = backend_.get();
  impl_->poison = env_poison();
}

CachingAllocator::~CachingAllocator() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  try {
    while (!s.pending.empty()) {
      s.backend->event_synchronize(s.pending.front().event);
      s.backend->event_destroy(s.pending.front().event);
      s.pending.pop_front();
    }
    if (!s.allocated.empty())
      std::fprintf(stderr,
                   "lt::alloc: %s allocator destroyed with %zu live allocations (%" PRId64
                   " bytes); their segments are released\n",
                   device_label(*s.backend).c_str(), s.allocated.size(), s.stats.allocated_bytes.current);
    for (auto& [base, seg] : s.segments) {
      s.backend->raw_free(reinterpret_cast<void*>(base));
      for (Block* b = seg->head; b;) {
        Block* n = b->next;
        delete b;
        b = n;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lt::alloc: error while destroying the allocator: %s\n", e.what());
  }
  for (Block* b : s.spare_blocks) delete b;
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  if (bytes == 0) return nullptr;
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.pending.empty()) process_events(s);

  const size_t size = round_size(bytes);
  StreamPools& pools = pools_for(s, stream);
  Pool& pool = size <= kSmallSize ? pools.small : pools.large;

  Block* b = find_best_fit(pool, size, s.max_split_size);
  if (b) {
    erase_free(s, b);
    ++s.stats.num_cache_hits;
  } else {
    b = alloc_segment(s, pool, size);
    if (!b) {
      // Retry once: wait for blocks held by stream events, reuse one if it now fits,
      // else return every cached segment and ask the backend again.
      ++s.stats.num_alloc_retries;
      synchronize_and_free_events(s);
      b = find_best_fit(pool, size, s.max_split_size);
      if (b) {
        erase_free(s, b);
        ++s.stats.num_cache_hits;
      } else {
        release_cached_segments(s);
        b = alloc_segment(s, pool, size);
      }
    }
    if (!b) {
      ++s.stats.num_ooms;
      size_t dev_free = 0, dev_total = 0;
      bool known = s.backend->memory_info(dev_free, dev_total);
      if (s.tracing) s.record(TraceAction::oom, 0, size, bytes, stream, known ? int64_t(dev_free) : -1);
      const Stats& st = s.stats;
      std::string msg = device_label(*s.backend) + " out of memory. Tried to allocate " + format_size(bytes) + " (" +
                        std::to_string(bytes) + " bytes requested, " + std::to_string(size) +
                        " after rounding, stream " + hex_ptr(reinterpret_cast<void*>(stream)) + "). ";
      if (known)
        msg += "Device has a total capacity of " + format_size(dev_total) + " of which " + format_size(dev_free) +
               " is free. ";
      int64_t unalloc = st.reserved_bytes.current - st.allocated_bytes.current;
      msg += "Of the allocated memory " + format_size(uint64_t(st.allocated_bytes.current)) +
             " is allocated by lintrain, and " + format_size(uint64_t(unalloc)) +
             " is reserved by lintrain but unallocated. In use: " + std::to_string(st.allocated_bytes.current) +
             " bytes in " + std::to_string(st.allocation.current) +
             " allocations; reserved: " + std::to_string(st.reserved_bytes.current) + " bytes in " +
             std::to_string(st.segment.current) +
             " segments; largest free block: " + std::to_string(largest_free_block(s)) + " bytes.";
      if (s.tracing) {
        std::string path = s.oom_trace_path.empty() ? "lintrain_oom_snapshot.json" : s.oom_trace_path;
        try {
          auto ends_with = [&](const char* suf) {
            size_t n = std::strlen(suf);
            return path.size() >= n && path.compare(path.size() - n, n, suf) == 0;
          };
          std::string bytes_out;
          if (ends_with(".pickle")) bytes_out = pickle_dumps(snapshot_json_locked(s, s.backend->device()));
          else if (ends_with(".trace.json") || ends_with(".chrome.json"))
            bytes_out = chrome_trace_locked(s, s.backend->device(), s.backend->name()).dump();
          else bytes_out = snapshot_json_locked(s, s.backend->device()).dump();
          write_file(path, bytes_out);
          msg += " Allocator trace written to " + path + ".";
        } catch (const std::exception& e) {
          msg += std::string(" (writing the allocator trace to ") + path + " failed: " + e.what() + ")";
        }
      }
      throw OutOfMemoryError(msg);
    }
  }

  if (should_split(b, size, s.max_split_size)) {
    Block* rest = new_block(s);
    rest->ptr = b->ptr + size;
    rest->size = b->size - size;
    rest->stream = b->stream;
    rest->pool = b->pool;
    rest->segment = b->segment;
    rest->prev = b;
    rest->next = b->next;
    if (rest->next) rest->next->prev = rest;
    b->next = rest;
    b->size = size;
    insert_free(s, rest);
  }

  b->allocated = true;
  b->requested = bytes;
  s.allocated.insert(b->ptr, b);
  Stats& st = s.stats;
  stat_inc(st.allocation, 1);
  stat_inc(st.allocated_bytes, static_cast<int64_t>(b->size));
  stat_inc(st.active, 1);
  stat_inc(st.active_bytes, static_cast<int64_t>(b->size));
  stat_inc(st.requested_bytes, static_cast<int64_t>(bytes));
  if (s.tracing) {
    s.record(TraceAction::alloc, b->ptr, b->size, bytes, stream);
    b->stage_id = s.last_stage_id;
  }
  void* p = reinterpret_cast<void*>(b->ptr);
  if (s.poison) s.backend->fill(p, b->size, 0xFF, stream);
  return p;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  Block* b = s.allocated.find(reinterpret_cast<uintptr_t>(ptr));
  if (!b) {
    uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    auto seg = s.segments.upper_bound(p);
    std::string where = device_label(*s.backend);
    if (seg != s.segments.begin() && p < std::prev(seg)->first + std::prev(seg)->second->size)
      throw std::invalid_argument("lt::alloc: free(" + hex_ptr(ptr) + ") on the " + where +
                                  " allocator: the pointer lies inside one of its segments but is not a live "
                                  "allocation (double free, or a pointer into the middle of a block)");
    throw std::invalid_argument("lt::alloc: free(" + hex_ptr(ptr) + ") on the " + where +
                                " allocator: the pointer was not allocated by this allocator (foreign pointer, "
                                "or freed on the wrong device/allocator)");
  }
  s.allocated.erase(b->ptr);
  b->allocated = false;
  Stats& st = s.stats;
  stat_dec(st.allocation, 1);
  stat_dec(st.allocated_bytes, static_cast<int64_t>(b->size));
  stat_dec(st.requested_bytes, static_cast<int64_t>(b->requested));
  if (s.tracing) s.record(TraceAction::free_requested, b->ptr, b->size, b->requested, b->stream);
  if (b->stream_uses.empty()) {
    free_block(s, b);
    return;
  }
  for (StreamId use : b->stream_uses) {
    EventId ev = s.backend->event_record(use);
    s.pending.push_back({ev, b});
    ++b->event_count;
  }
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  if (!ptr) return;
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  Block* b = s.allocated.find(reinterpret_cast<uintptr_t>(ptr));
  if (!b)
    throw std::invalid_argument("lt::alloc: record_stream(" + hex_ptr(ptr) + ") on the " + device_label(*s.backend) +
                                " allocator: not a live allocation of this allocator");
  if (stream == b->stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
}

void CachingAllocator::set_stream_private(StreamId stream, bool on) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = std::find(s.private_streams.begin(), s.private_streams.end(), stream);
  if (on && it == s.private_streams.end()) s.private_streams.push_back(stream);
  if (!on && it != s.private_streams.end()) s.private_streams.erase(it);
}

bool CachingAllocator::stream_private(StreamId stream) const {
  const Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  return is_private(s, stream);
}

void CachingAllocator::empty_cache() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mutex);
  synchronize_and_free_events(s);
  size_t released = release_cached_segments(s);
  if (s.tracing) s.record(TraceAction::empty_cache, 0, released, 0, 0);
}

Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

namespace {
template <class F>
void for_each_counter(Stats& st, F&& f) {
  f(st.allocation);
  f(st.segment);
  f(st.active);
  f(st.inactive_split);
  f(st.allocated_bytes);
  f(st.reserved_bytes);
  f(st.active_bytes);
  f(st.inactive_split_bytes);
  f(st.requested_bytes);
}
}  // namespace

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for_each_counter(impl_->stats, [](StatCounter& c) { c.peak = c.current; });
}

void CachingAllocator::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Stats& st = impl_->stats;
  for_each_counter(st, [](StatCounter& c) { c.allocated = c.freed = 0; });
  st.num_device_alloc = st.num_device_free = st.num_cache_hits = st.num_alloc_retries = st.num_ooms =
      st.num_sync_all_streams = 0;
}

namespace {
const std::pair<const char*, StatCounter Stats::*> kCounters[] = {
    {"allocation", &Stats::allocation},
    {"segment", &Stats::segment},
    {"active", &Stats::active},
    {"inactive_split", &Stats::inactive_split},
    {"allocated_bytes", &Stats::allocated_bytes},
    {"reserved_bytes", &Stats::reserved_bytes},
    {"active_bytes", &Stats::active_bytes},
    {"inactive_split_bytes", &Stats::inactive_split_bytes},
    {"requested_bytes", &Stats::requested_bytes},
};
const std::pair<const char*, int64_t Stats::*> kScalars[] = {
    {"num_device_alloc", &Stats::num_device_alloc},
    {"num_device_free", &Stats::num_device_free},
    {"num_cache_hits", &Stats::num_cache_hits},
    {"num_alloc_retries", &Stats::num_alloc_retries},
    {"num_ooms", &Stats::num_ooms},
    {"num_sync_all_streams", &Stats::num_sync_all_streams},
};
}  // namespace

nlohmann::json CachingAllocator::stats_json() const {
  Stats st = stats();
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, member] : kCounters) {
    const StatCounter& c = st.*member;
    j[name] = {{"current", c.current}, {"peak", c.peak}, {"allocated", c.allocated}, {"freed", c.freed}};
  }
  for (const auto& [name, member] : kScalars) j[name] = st.*member;
  return j;
}

nlohmann::json CachingAllocator::stats_json_flat() const {
  Stats st = stats();
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, member] : kCounters) {
    const StatCounter& c = st.*member;
    std::string base = std::string(name) + ".all.";
    j[base + "current"] = c.current;
    j[base + "peak"] = c.peak;
    j[base + "allocated"] = c.allocated;
    j[base + "freed"] = c.freed;
  }
  for (const auto& [name, member] : kScalars) j[name] = st.*member;
  return j;
}

std::string CachingAllocator::memory_summary() const {
  Stats st = stats();
  std::string out = "lt::alloc " + device_label(*backend_) + " memory summary\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-22s %16s %16s %16s %16s\n", "metric", "current", "peak", "allocated", "freed");
  out += line;
  for (const auto& [name, member] : kCounters) {
    const StatCounter& c = st.*member;
    std::snprintf(line, sizeof line, "  %-22s %16" PRId64 " %16" PRId64 " %16" PRId64 " %16" PRId64 "\n", name,
                  c.current, c.peak, c.allocated, c.freed);
    out += line;
  }
  for (const auto& [name, member] : kScalars) {
    std::snprintf(line, sizeof line, "  %-22s %16" PRId64 "\n", name, st.*member);
    out += line;
  }
  return out;
}

bool CachingAllocator::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->allocated.find(reinterpret_cast<uintptr_t>(ptr)) != nullptr;
}

size_t CachingAllocator::block_size(const void* ptr) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const Block* b = impl_->allocated.find(reinterpret_cast<uintptr_t>(ptr));
  if (!b)
    throw std::invalid_argument("lt::alloc: block_size(" + hex_ptr(ptr) + "): not a live allocation of the " +
                                device_label(*backend_) + " allocator");
  return b->size;
}

int CachingAllocator::device() const { return backend_->device(); }
const char* CachingAllocator::backend_name() const { return backend_->name(); }

void CachingAllocator::set_max_split_size(size_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->max_split_size = bytes;
}
size_t CachingAllocator::max_split_size() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->max_split_size;
}

void CachingAllocator::set_poison(bool on) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->poison = on;
}
bool CachingAllocator::poison() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->poison;
}

void CachingAllocator::set_trace(bool on, size_t capacity) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& s = *impl_;
  if (on && capacity == 0) throw std::invalid_argument("lt::alloc::set_trace: capacity must be > 0");
  s.tracing = on;
  if (on) {
    s.trace_capacity = capacity;
    s.ring.clear();
    s.ring.reserve(std::min<size_t>(capacity, 1u << 16));
    s.ring_next = 0;
    s.trace_dropped = 0;
  }
}
bool CachingAllocator::tracing() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->tracing;
}
void CachingAllocator::clear_trace() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->ring.clear();
  impl_->ring_next = 0;
  impl_->trace_dropped = 0;
}

std::vector<TraceEvent> CachingAllocator::trace() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const Impl& s = *impl_;
  std::vector<TraceEvent> out;
  for (const RawTraceEvent& r : s.ordered_trace()) {
    TraceEvent e;
    e.action = r.action;
    e.addr = r.addr;
    e.size = r.size;
    e.requested_size = r.requested_size;
    e.stream = r.stream;
    e.step = r.step;
    e.stage = s.stage_names[r.stage_id];
    e.time_us = r.time_us;
    e.allocated_bytes = r.allocated_bytes;
    e.reserved_bytes = r.reserved_bytes;
    e.device_free = r.device_free;
    out.push_back(std::move(e));
  }
  return out;
}

int64_t CachingAllocator::trace_dropped() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->trace_dropped;
}
void CachingAllocator::set_step(int64_t step) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->step = step;
}
int64_t CachingAllocator::step() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->step;
}
void CachingAllocator::set_oom_trace_path(std::string path) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->oom_trace_path = std::move(path);
}

std::vector<SegmentInfo> CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->snapshot_locked();
}

nlohmann::json CachingAllocator::snapshot_json() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return snapshot_json_locked(*impl_, backend_->device());
}

void CachingAllocator::dump_snapshot_json(const std::string& path) const { write_file(path, snapshot_json().dump()); }

void CachingAllocator::dump_snapshot_pickle(const std::string& path) const {
  write_file(path, pickle_dumps(snapshot_json()));
}

nlohmann::json CachingAllocator::chrome_trace_json() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return chrome_trace_locked(*impl_, backend_->device(), backend_->name());
}

void CachingAllocator::dump_chrome_trace(const std::string& path) const {
  write_file(path, chrome_trace_json().dump());
}

// ---------------------------------------------------------------------------------------
// Buffer
// ---------------------------------------------------------------------------------------

Buffer::Buffer(Buffer&& other) noexcept : owner_(other.owner_), data_(other.data_), size_(other.size_) {
  other.owner_ = nullptr;
  other.data_ = nullptr;
  other.size_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_;
    data_ = other.data_;
    size_ = other.size_;
    other.owner_ = nullptr;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() noexcept {
  if (data_ && owner_) {
    try {
      owner_->free(data_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lt::alloc::Buffer: %s\n", e.what());
      std::abort();
    }
  }
  data_ = nullptr;
  size_ = 0;
}

void* Buffer::release() {
  void* p = data_;
  data_ = nullptr;
  size_ = 0;
  return p;
}

void Buffer::record_stream(StreamId stream) {
  if (data_ && owner_) owner_->record_stream(data_, stream);
}

Buffer alloc_buffer(CachingAllocator& allocator, size_t bytes, StreamId stream) {
  return Buffer(&allocator, allocator.allocate(bytes, stream), bytes);
}

}  // namespace lt::alloc
