// The launch atlas: stage nesting, counting, reset, listener, threads.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "allocator/stage_tag.h"
#include "kernels/launch.h"

namespace {
int64_t launches_of(const std::string& stage) {
  for (auto& s : lt::launch_atlas())
    if (s.stage == stage) return s.launches;
  return 0;
}
}  // namespace

TEST_CASE("stage scopes nest and restore the path", "[launch]") {
  REQUIRE(lt::current_stage().empty());
  {
    lt::StageScope fwd("fwd");
    CHECK(lt::current_stage() == "fwd");
    CHECK(std::string(lt::alloc::stage_tag()) == "fwd");
    {
      lt::StageScope kda("L0/kda");
      CHECK(lt::current_stage() == "fwd/L0/kda");
      CHECK(std::string(lt::alloc::stage_tag()) == "fwd/L0/kda");
    }
    CHECK(lt::current_stage() == "fwd");
  }
  CHECK(lt::current_stage().empty());
  CHECK(std::string(lt::alloc::stage_tag()).empty());
}

TEST_CASE("launches are counted against the current stage and reset", "[launch]") {
  lt::reset_launch_atlas();
  lt::count_launch();  // outside any scope
  {
    lt::StageScope a("bwd/L1/kda/inter_adjoint");
    lt::count_launch();
    lt::count_launch(2);
  }
  {
    lt::StageScope b("optim");
    lt::StageScope c("adamw");
    lt::count_launch();
  }
  CHECK(launches_of("(none)") == 1);
  CHECK(launches_of("bwd/L1/kda/inter_adjoint") == 3);
  CHECK(launches_of("optim/adamw") == 1);
  CHECK(lt::total_launches() == 5);
  lt::reset_launch_atlas();
  CHECK(lt::total_launches() == 0);
  {
    lt::StageScope a("bwd/L1/kda/inter_adjoint");
    lt::count_launch();  // the cached counter survives the reset
  }
  CHECK(launches_of("bwd/L1/kda/inter_adjoint") == 1);
  lt::reset_launch_atlas();
}

TEST_CASE("the stage listener sees enter and leave in order", "[launch]") {
  if (!lt::stage_hooks_compiled()) {
    WARN("skipped: built with LINTRAIN_STAGE_TIMERS=OFF (no stage hooks)");
    return;
  }
  std::vector<std::pair<std::string, bool>> events;
  lt::set_stage_listener([&](const std::string& s, bool entering) { events.emplace_back(s, entering); });
  {
    lt::StageScope a("fwd");
    lt::StageScope b("mlp");
  }
  lt::set_stage_listener(nullptr);
  REQUIRE(events.size() == 4);
  CHECK(events[0] == std::make_pair(std::string("fwd"), true));
  CHECK(events[1] == std::make_pair(std::string("fwd/mlp"), true));
  CHECK(events[2] == std::make_pair(std::string("fwd/mlp"), false));
  CHECK(events[3] == std::make_pair(std::string("fwd"), false));
}

TEST_CASE("stages are per thread and counts from threads add up", "[launch]") {
  lt::reset_launch_atlas();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      lt::StageScope s(t % 2 ? "odd" : "even");
      for (int i = 0; i < 1000; ++i) lt::count_launch();
    });
  for (auto& th : threads) th.join();
  CHECK(launches_of("odd") == 2000);
  CHECK(launches_of("even") == 2000);
  CHECK(lt::current_stage().empty());
  lt::reset_launch_atlas();
}

TEST_CASE("a scope entered again is the same node; the hook sees nodes with their parents", "[launch]") {
  const lt::StageNode* first = nullptr;
  for (int i = 0; i < 2; ++i) {
    lt::StageScope a("fwd");
    lt::StageScope b("L0");
    if (i == 0) first = &lt::current_stage_node();
    else CHECK(&lt::current_stage_node() == first);
  }
  REQUIRE(first != nullptr);
  CHECK(first->path == "fwd/L0");
  CHECK(first->name == "L0");
  REQUIRE(first->parent != nullptr);
  CHECK(first->parent->path == "fwd");
  CHECK(first->id != first->parent->id);
  CHECK(first->id != 0);
  {
    lt::StageScope c("optim");  // the same path reached through different scopes: distinct nodes
    lt::StageScope d("clip");
    lt::StageScope x("fwd/L0");
    CHECK(lt::current_stage() == "optim/clip/fwd/L0");
    CHECK(&lt::current_stage_node() != first);
  }
  if (!lt::stage_hooks_compiled()) {
    WARN("skipped the hook part: built with LINTRAIN_STAGE_TIMERS=OFF (no stage hooks)");
    return;
  }
  struct Seen {
    std::vector<std::pair<const lt::StageNode*, bool>> events;
  } seen;
  lt::set_stage_hook([](void* ctx, const lt::StageNode& n,
                        bool entering) { static_cast<Seen*>(ctx)->events.emplace_back(&n, entering); },
                     &seen);
  {
    lt::StageScope a("fwd");
    lt::StageScope b("L0");
  }
  lt::set_stage_hook(nullptr, nullptr);
  { lt::StageScope a("fwd"); }  // removed: not seen
  REQUIRE(seen.events.size() == 4);
  CHECK(seen.events[1].first == first);
  CHECK(seen.events[1].second);
  CHECK(seen.events[2].first == first);
  CHECK_FALSE(seen.events[2].second);
  CHECK(seen.events[3].first == first->parent);
}
