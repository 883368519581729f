// The seed of the tests that draw fresh random inputs: fresh per process unless
// LINTRAIN_TEST_SEED is set (CI draws one, prints it, and sets it), so a failure is replayed
// by setting it to the printed value. Per-case seeds are derived from it (test_seed() + k).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace lt::testing {

inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("LINTRAIN_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(s, nullptr, 10));
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

// Appended to failure messages: the value of LINTRAIN_TEST_SEED that replays the run.
inline std::string replay_hint() { return " (replay: LINTRAIN_TEST_SEED=" + std::to_string(test_seed()) + ")"; }

}  // namespace lt::testing
