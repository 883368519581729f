// Cooperative fibers for the KDA emulator (kernels/cpu/kda/emulator.h): the emulated threads of a
// block (or of a cluster's blocks) run on the calling host thread and switch only where one waits
// at a barrier, so a barrier costs a few user-space context switches instead of the futex
// wake-ups of hundreds of host threads on a machine of a few cores (docs/BUILD.md, "The twins'
// emulated threads as fibers").
#pragma once
#include <cstdint>
#include <functional>

namespace lt::kda::emu {

// Runs body(i) for every i in [0, n) as n fibers on the calling thread and returns once all have
// returned. Scheduling is round-robin, each fiber running until it waits at a FiberBarrier or
// returns; the rounds alternate between ascending and descending fiber order, so a read that
// lacks its barrier sees the reader run first in one of them (and read NaN-poisoned memory).
// The first exception a fiber throws is rethrown here, the other fibers abandoned where they
// wait; a round in which no fiber arrives anywhere (every live fiber waiting at a barrier that
// cannot complete) throws std::logic_error. Not reentrant: body must not call run_fibers.
void run_fibers(int n, const std::function<void(int)>& body);

// std::barrier's arrive_and_wait for `count` fibers of the running run_fibers: the last arrival
// completes the phase and goes on, the others yield until it has.
class FiberBarrier {
 public:
  explicit FiberBarrier(int count) : count_(count) {}
  void arrive_and_wait();

 private:
  int count_;
  int arrived_ = 0;
  uint64_t phase_ = 0;
};

}  // namespace lt::kda::emu
