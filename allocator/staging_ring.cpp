// The staging ring (allocator/staging_ring.h).
#include "allocator/staging_ring.h"

#include <stdexcept>
#include <string>

#include "allocator/caching_allocator.h"

namespace lt::alloc {

StagingRing::StagingRing(std::unique_ptr<Backend> backend, size_t slot_bytes, int slots)
    : backend_(std::move(backend)), slot_bytes_(round_size(slot_bytes)) {
  if (!backend_) throw std::invalid_argument("StagingRing: no backend");
  if (slot_bytes == 0 || slots < 1)
    throw std::invalid_argument("StagingRing: slot_bytes " + std::to_string(slot_bytes) + " and slots " +
                                std::to_string(slots) + " must be > 0");
  slots_.reserve(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) {
    void* p = backend_->raw_alloc(slot_bytes_);
    if (!p) {
      for (Slot& s : slots_) backend_->raw_free(s.data);
      throw std::runtime_error(std::string("StagingRing: the ") + backend_->name() + " backend has no memory for " +
                               std::to_string(slots) + " slots of " + std::to_string(slot_bytes_) + " bytes");
    }
    slots_.push_back({p, false, 0});
  }
  stats_.slots = slots;
}

StagingRing::~StagingRing() {
  for (Slot& s : slots_) {
    if (s.event) {
      backend_->event_synchronize(s.event);
      backend_->event_destroy(s.event);
      s.event = 0;
    }
  }
  for (Slot& s : slots_) backend_->raw_free(s.data);
}

StagingRing::Slot& StagingRing::at(int slot) {
  if (slot < 0 || static_cast<size_t>(slot) >= slots_.size())
    throw std::invalid_argument("StagingRing: no slot " + std::to_string(slot) + " (" + std::to_string(slots_.size()) +
                                " slots)");
  return slots_[static_cast<size_t>(slot)];
}

void StagingRing::check_held(int slot, const char* op) {
  if (!at(slot).held)
    throw std::invalid_argument(std::string("StagingRing::") + op + ": slot " + std::to_string(slot) +
                                " is not held (acquire it first)");
}

bool StagingRing::settle(Slot& s) {
  if (s.event && backend_->event_query(s.event)) {
    backend_->event_destroy(s.event);
    s.event = 0;
  }
  return s.event == 0;
}

int StagingRing::try_acquire() {
  std::lock_guard<std::mutex> lk(mu_);
  const size_t n = slots_.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (next_ + k) % n;
    Slot& s = slots_[i];
    if (!s.held && settle(s)) {
      s.held = true;
      next_ = (i + 1) % n;
      ++stats_.acquires;
      return static_cast<int>(i);
    }
  }
  return -1;
}

int StagingRing::acquire() {
  if (int got = try_acquire(); got >= 0) return got;
  std::unique_lock<std::mutex> lk(mu_);
  const size_t n = slots_.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (next_ + k) % n;
    Slot& s = slots_[i];
    if (s.held) continue;
    s.held = true;
    next_ = (i + 1) % n;
    ++stats_.acquires;
    if (settle(s)) return static_cast<int>(i);  // completed since try_acquire looked
    // Only copies the device will finish are waited for, outside the mutex.
    ++stats_.waits;
    const EventId e = s.event;
    lk.unlock();
    backend_->event_synchronize(e);
    lk.lock();
    backend_->event_destroy(e);
    slots_[i].event = 0;
    return static_cast<int>(i);
  }
  // Every slot is held: one more.
  void* p = backend_->raw_alloc(slot_bytes_);
  if (!p)
    throw std::runtime_error(std::string("StagingRing: the ") + backend_->name() + " backend has no memory for slot " +
                             std::to_string(n + 1) + " of " + std::to_string(slot_bytes_) + " bytes");
  slots_.push_back({p, true, 0});
  ++stats_.grown;
  ++stats_.slots;
  ++stats_.acquires;
  return static_cast<int>(n);
}

void* StagingRing::data(int slot) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (slot < 0 || static_cast<size_t>(slot) >= slots_.size())
    throw std::invalid_argument("StagingRing: no slot " + std::to_string(slot));
  return slots_[static_cast<size_t>(slot)].data;
}

void StagingRing::record(int slot, StreamId stream) {
  std::lock_guard<std::mutex> lk(mu_);
  check_held(slot, "record");
  Slot& s = at(slot);
  const EventId e = backend_->event_record(stream);
  if (s.event) backend_->event_destroy(s.event);
  s.event = e;
}

bool StagingRing::ready(int slot) {
  std::lock_guard<std::mutex> lk(mu_);
  check_held(slot, "ready");
  return settle(at(slot));
}

void StagingRing::wait(int slot) {
  EventId e = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    check_held(slot, "wait");
    e = at(slot).event;
  }
  if (!e) return;
  // The slot is held: only its holder (this caller) touches its event.
  backend_->event_synchronize(e);
  std::lock_guard<std::mutex> lk(mu_);
  settle(at(slot));
}

void StagingRing::release(int slot) {
  std::lock_guard<std::mutex> lk(mu_);
  check_held(slot, "release");
  at(slot).held = false;
}

StagingRing::Stats StagingRing::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace lt::alloc
