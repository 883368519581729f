// The KDA emulator's fibers (kernels/cpu/kda/fibers.h): barrier phases, warp-sized barriers
// inside a block's, both scheduling orders, exceptions and deadlocks reported, stacks reused.
#include <catch2/catch.hpp>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/kda/fibers.h"

using lt::kda::emu::FiberBarrier;
using lt::kda::emu::run_fibers;

TEST_CASE("emulator fibers: a barrier separates phases; every fiber runs to its end", "[kda][emu]") {
  for (int n : {1, 2, 33, 256}) {
    FiberBarrier bar(n);
    std::vector<int> phase_of(static_cast<size_t>(n), 0);
    int violations = 0, ended = 0;
    run_fibers(n, [&](int i) {
      for (int p = 1; p <= 5; ++p) {
        phase_of[static_cast<size_t>(i)] = p;
        bar.arrive_and_wait();
        // after the barrier every fiber has entered phase p and none has left it
        for (int v : phase_of) violations += v != p;
        bar.arrive_and_wait();
      }
      ++ended;
    });
    CHECK(violations == 0);
    CHECK(ended == n);
  }
}

TEST_CASE("emulator fibers: warp barriers inside a block barrier, both scheduling orders", "[kda][emu]") {
  // 4 warps of 32: a lane reads its neighbour's value after the warp barrier (shfl-like); the
  // rounds alternate order, so lanes below and above the writer both read before the next write.
  constexpr int kW = 4, kN = 32 * kW;
  FiberBarrier block(kN);
  std::vector<FiberBarrier> warps(kW, FiberBarrier(32));
  std::vector<int> slot(kN, -1);
  int wrong = 0;
  run_fibers(kN, [&](int t) {
    const int w = t / 32, lane = t % 32;
    for (int round = 0; round < 8; ++round) {
      slot[static_cast<size_t>(t)] = 1000 * round + t;
      warps[static_cast<size_t>(w)].arrive_and_wait();
      const int src = 32 * w + (lane ^ 1);
      wrong += slot[static_cast<size_t>(src)] != 1000 * round + src;
      warps[static_cast<size_t>(w)].arrive_and_wait();
      block.arrive_and_wait();
    }
  });
  CHECK(wrong == 0);
}

TEST_CASE("emulator fibers: a read without its barrier sees the write in some regions, not in others", "[kda][emu]") {
  // fiber 0 writes, fiber 1 reads in the same region between barriers: the order in which the
  // two run a region changes from region to region, so a program relying on order fails.
  FiberBarrier bar(2);
  int shared = 0, saw_old = 0, saw_new = 0;
  run_fibers(2, [&](int t) {
    for (int r = 1; r <= 4; ++r) {
      if (t == 0) shared = r;
      if (t == 1) (shared == r ? saw_new : saw_old) += 1;
      bar.arrive_and_wait();
    }
  });
  CHECK(saw_old > 0);
  CHECK(saw_new > 0);
}

TEST_CASE("emulator fibers: an exception and a deadlock are reported; the stacks are reused", "[kda][emu]") {
  FiberBarrier bar(8);
  CHECK_THROWS_WITH(run_fibers(8,
                               [&](int t) {
                                 bar.arrive_and_wait();
                                 if (t == 5) throw std::runtime_error("fiber 5 failed");
                                 bar.arrive_and_wait();
                               }),
                    "fiber 5 failed");
  FiberBarrier wide(9);  // one participant more than fibers: never completes
  CHECK_THROWS_WITH(run_fibers(8, [&](int) { wide.arrive_and_wait(); }), Catch::Contains("deadlock"));
  CHECK_THROWS_WITH(bar.arrive_and_wait(), Catch::Contains("outside run_fibers"));
  for (int k = 0; k < 100; ++k) {  // after abandoned fibers, stacks serve fresh ones
    FiberBarrier b(64);
    int sum = 0;
    run_fibers(64, [&](int t) {
      volatile char buf[16384];  // touches a stack's pages
      buf[0] = static_cast<char>(t);
      b.arrive_and_wait();
      sum += buf[0];
    });
    REQUIRE(sum == 63 * 64 / 2);
  }
  int inner = 0;
  CHECK_THROWS_WITH(run_fibers(1, [&](int) { run_fibers(1, [&](int) { ++inner; }); }), Catch::Contains("from a fiber"));
  CHECK(inner == 0);
}
