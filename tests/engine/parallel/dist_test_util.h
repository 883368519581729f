// Helpers for the engine/parallel tests: ranks as threads (failures collected, asserted by the
// caller on the test's thread: Catch2's macros are not thread-safe), a free loopback port,
// per-rank random inputs from a fresh seed, byte views of tensors.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/parallel/comm.h"
#include "engine/parallel/launch.h"
#include "engine/tensor.h"
#include "tests/support/test_seed.h"

namespace lt::disttest {

using lt::testing::test_seed;  // tests/support/test_seed.h

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int free_loopback_port() { return dist::free_local_port(); }

inline dist::WorldInfo loopback_world(int rank, int world, int port) {
  dist::WorldInfo w;
  w.rank = rank;
  w.world = world;
  w.local_rank = rank;
  w.master_addr = "127.0.0.1";
  w.master_port = port;
  return w;
}

// Runs fn(rank) on n threads and joins them; element r is rank r's exception (null if none).
inline std::vector<std::exception_ptr> run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) { errors[r] = std::current_exception(); }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

// The exception's message, or "" when there is none.
inline std::string what(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) { return x.what(); } catch (...) {
    return "(not a std::exception)";
  }
}

// The bytes of elements [offset, offset + count) of a contiguous host tensor.
inline std::string bytes_of(const Tensor& t, int64_t offset = 0, int64_t count = -1) {
  const Tensor h = t.to(Device::cpu()).contiguous();
  if (count < 0) count = h.numel() - offset;
  return std::string(static_cast<const char*>(h.data_ptr()) + offset * h.itemsize(), count * h.itemsize());
}

}  // namespace lt::disttest
