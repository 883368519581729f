// engine/parallel on the CPU: the launcher environment, shards, the "threads" backend against a
// host reference (bit for bit: sums in rank order), the TCP rendezvous (loopback only) and the
// "tcp" backend against the "threads" one, the rendezvous' errors and the liveness watch.
#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>

#include "engine/parallel/comm.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/parallel/dist_test_util.h"

using namespace lt;
using dist::Communicator;
using dist::Shard;
using disttest::bytes_of;
using disttest::loopback_world;
using disttest::run_ranks;
using disttest::what;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- environment ----------------------------------------------------------------------

const char* const kEnvVars[] = {"RANK",        "WORLD_SIZE",   "LOCAL_RANK",   "MASTER_ADDR",
                                "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"};

// Clears the launcher variables for the scope; restores them afterwards.
struct EnvScope {
  std::map<std::string, std::optional<std::string>> saved;
  EnvScope() {
    for (const char* v : kEnvVars) {
      const char* s = std::getenv(v);
      saved[v] = s ? std::optional<std::string>(s) : std::nullopt;
      ::unsetenv(v);
    }
  }
  ~EnvScope() {
    for (auto& [k, v] : saved)
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
  }
  void set(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* v : kEnvVars) ::unsetenv(v);
    for (auto& [k, v] : vars) ::setenv(k, v, 1);
  }
};

// ---- the collective sequence both host backends run -------------------------------------

// Shards with gaps and empty ones: shard r = [4r + 1, 4r + 1 + r % 3) of n = 4 * world + 3.
std::vector<Shard> gapped_shards(int world) {
  std::vector<Shard> s(world);
  for (int r = 0; r < world; ++r) s[r] = Shard{4 * r + 1, r % 3};
  return s;
}

enum Step { kAllReduce, kScatterEven, kScatterGapped, kGatherEven, kGatherGapped, kBcastLast, kBcastFirst, kSteps };
const char* const kStepNames[] = {"all_reduce_sum [3, 5]", "reduce_scatter_sum even", "reduce_scatter_sum gapped",
                                  "all_gather even",       "all_gather gapped",       "broadcast root world-1",
                                  "broadcast root 0"};

Shape step_shape(int step, int world) {
  switch (step) {
    case kAllReduce: return {3, 5};
    case kScatterEven:
    case kGatherEven: return {13};
    case kScatterGapped:
    case kGatherGapped: return {4 * world + 3};
    case kBcastLast: return {2, 3};
    default: return {7};
  }
}
std::vector<Shard> step_shards(int step, int world) {
  return step == kScatterEven || step == kGatherEven ? dist::even_shards(13, world) : gapped_shards(world);
}

// Rank `rank`'s inputs, fresh random values (never zero) per rank, step and seed.
std::vector<Tensor> make_inputs(int rank, int world, DType dt, uint64_t seed) {
  std::vector<Tensor> in;
  for (int s = 0; s < kSteps; ++s)
    in.push_back(test::random_tensor(step_shape(s, world), seed + 1000 * rank + 17 * s, dt));
  return in;
}

// Every collective once, on copies of `in`; the tensors after each call.
std::vector<Tensor> run_sequence(Communicator& c, const std::vector<Tensor>& in) {
  const int w = c.world();
  const Stream s;
  std::vector<Tensor> t;
  for (const Tensor& x : in) t.push_back(x.clone());
  c.all_reduce_sum(t[kAllReduce], s);
  c.reduce_scatter_sum(t[kScatterEven], step_shards(kScatterEven, w), s);
  c.reduce_scatter_sum(t[kScatterGapped], step_shards(kScatterGapped, w), s);
  c.all_gather(t[kGatherEven], step_shards(kGatherEven, w), s);
  c.all_gather(t[kGatherGapped], step_shards(kGatherGapped, w), s);
  c.broadcast(t[kBcastLast], w - 1, s);
  c.broadcast(t[kBcastFirst], 0, s);
  return t;
}

// Host reference of the sum over ranks in rank order: float accumulation for f32 / bf16
// (bf16 rounded once, by the runtime's conversion), double for f64.
Tensor reference_sum(const std::vector<Tensor>& per_rank, DType dt) {
  std::vector<std::vector<double>> v;
  for (const Tensor& t : per_rank) v.push_back(t.to_vector());
  std::vector<double> out(v[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (dt == DType::f64) {
      double acc = v[0][i];
      for (size_t r = 1; r < v.size(); ++r) acc += v[r][i];
      out[i] = acc;
    } else {
      float acc = static_cast<float>(v[0][i]);
      for (size_t r = 1; r < v.size(); ++r) acc += static_cast<float>(v[r][i]);
      out[i] = acc;
    }
  }
  return Tensor::from_vector(out, per_rank[0].shape(), dt);
}

// Which parts of step `step`'s result rank r must match: [offset, offset + count) pairs.
std::vector<Shard> checked_ranges(int step, int rank, int world) {
  if (step == kScatterEven || step == kScatterGapped) return {step_shards(step, world)[rank]};
  return {Shard{0, shape_numel(step_shape(step, world))}};
}

// The expected result of step `step` on rank r, given every rank's inputs.
Tensor expected(int step, int rank, const std::vector<std::vector<Tensor>>& in, DType dt) {
  const int w = static_cast<int>(in.size());
  std::vector<Tensor> inputs;
  for (const auto& rank_in : in) inputs.push_back(rank_in[step]);
  switch (step) {
    case kAllReduce:
    case kScatterEven:
    case kScatterGapped: return reference_sum(inputs, dt);
    case kGatherEven:
    case kGatherGapped: {
      Tensor e = inputs[rank].clone();  // between shards: this rank's own values, untouched
      const auto shards = step_shards(step, w);
      for (int q = 0; q < w; ++q)
        e.narrow(0, shards[q].offset, shards[q].count).copy_(inputs[q].narrow(0, shards[q].offset, shards[q].count));
      return e;
    }
    case kBcastLast: return inputs[w - 1].clone();
    default: return inputs[0].clone();
  }
}

// Runs the sequence on `comms` (one per rank, one thread each).
std::vector<std::vector<Tensor>> run_all(std::vector<std::unique_ptr<Communicator>>& comms,
                                         const std::vector<std::vector<Tensor>>& in) {
  const int w = static_cast<int>(comms.size());
  std::vector<std::vector<Tensor>> out(w);
  auto errors = run_ranks(w, [&](int r) { out[r] = run_sequence(*comms[r], in[r]); });
  for (int r = 0; r < w; ++r) {
    INFO("rank " << r);
    REQUIRE(what(errors[r]) == "");
  }
  return out;
}

// N ranks on threads, each with its own Rendezvous on one loopback port.
std::vector<std::unique_ptr<dist::Rendezvous>> make_rendezvous(int world, double timeout_s = 20) {
  const int port = disttest::free_loopback_port();
  std::vector<std::unique_ptr<dist::Rendezvous>> rv(world);
  auto errors = run_ranks(
      world, [&](int r) { rv[r] = std::make_unique<dist::Rendezvous>(loopback_world(r, world, port), timeout_s); });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    REQUIRE(what(errors[r]) == "");
  }
  return rv;
}

}  // namespace

TEST_CASE("dist: world_from_env reads torchrun's and SLURM's variables, naming a bad one", "[dist]") {
  EnvScope env;
  CHECK_FALSE(dist::world_from_env().has_value());

  env.set({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "29511"}});
  auto w = dist::world_from_env();
  REQUIRE(w.has_value());
  CHECK(w->rank == 2);
  CHECK(w->world == 4);
  CHECK(w->local_rank == 2);  // LOCAL_RANK defaults to RANK
  CHECK(w->master_addr == "127.0.0.1");
  CHECK(w->master_port == 29511);

  env.set({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}});
  w = dist::world_from_env();
  REQUIRE(w.has_value());
  CHECK(w->local_rank == 1);
  CHECK(w->master_addr == "node7");

  env.set({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "1"}, {"MASTER_PORT", "4000"}});
  w = dist::world_from_env();
  REQUIRE(w.has_value());
  CHECK(w->rank == 5);
  CHECK(w->world == 6);
  CHECK(w->local_rank == 1);

  env.set({{"RANK", "0"}, {"WORLD_SIZE", "1"}});  // one process needs no port
  w = dist::world_from_env();
  REQUIRE(w.has_value());
  CHECK(w->world == 1);

  const std::vector<std::pair<std::vector<std::pair<const char*, const char*>>, std::string>> bad = {
      {{{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "RANK='x' is not a number"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "RANK=2 is not in [0, WORLD_SIZE=2)"},
      {{{"RANK", "0"}, {"MASTER_PORT", "1"}}, "WORLD_SIZE is not set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_PORT is not set"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT=70000"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}, {"MASTER_PORT", "5"}}, "LOCAL_RANK=-1"},
      {{{"SLURM_PROCID", "1"}, {"MASTER_PORT", "5"}}, "SLURM_NTASKS is not set"},
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "zz"}, {"MASTER_PORT", "5"}}, "SLURM_NTASKS='zz'"},
  };
  for (const auto& [vars, message] : bad) {
    INFO(message);
    for (const char* v : kEnvVars) ::unsetenv(v);
    for (auto& [k, v] : vars) ::setenv(k, v, 1);
    CHECK_THROWS_AS(dist::world_from_env(), std::invalid_argument);
    CHECK_THROWS_WITH(dist::world_from_env(), Catch::Contains(message));
  }
}

TEST_CASE("dist: even_shards splits n in rank order, the first n % world one larger", "[dist]") {
  auto s = dist::even_shards(10, 3);
  REQUIRE(s.size() == 3);
  CHECK((s[0].offset == 0 && s[0].count == 4));
  CHECK((s[1].offset == 4 && s[1].count == 3));
  CHECK((s[2].offset == 7 && s[2].count == 3));
  s = dist::even_shards(2, 4);
  CHECK((s[0].count == 1 && s[1].count == 1 && s[2].count == 0 && s[3].count == 0));
  CHECK((s[2].offset == 2 && s[3].offset == 2));
  for (int64_t n : {0, 1, 7, 64, 1001})
    for (int w : {1, 2, 3, 5, 8}) {
      s = dist::even_shards(n, w);
      int64_t end = 0, lo = n, hi = 0;
      for (const Shard& x : s) {
        CHECK(x.offset == end);
        end += x.count;
        lo = std::min(lo, x.count);
        hi = std::max(hi, x.count);
      }
      CHECK(end == n);
      CHECK(hi - lo <= 1);
    }
  CHECK_THROWS_WITH(dist::even_shards(4, 0), Catch::Contains("world 0"));
  CHECK_THROWS_WITH(dist::even_shards(-1, 2), Catch::Contains("n -1"));
}

TEST_CASE("dist threads: every collective equals the host reference bit for bit", "[dist]") {
  const uint64_t seed = disttest::test_seed();
  INFO("replay: LINTRAIN_TEST_SEED=" << seed);
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (int w = 1; w <= 4; ++w) {
      INFO(dtype_name(dt) << ", world " << w);
      auto comms = dist::make_thread_group(w);
      REQUIRE(comms.size() == size_t(w));
      for (int r = 0; r < w; ++r) {
        CHECK(comms[r]->rank() == r);
        CHECK(comms[r]->world() == w);
        CHECK(std::string(comms[r]->backend()) == "threads");
        CHECK(comms[r]->device() == Device::cpu());
      }
      std::vector<std::vector<Tensor>> in;
      for (int r = 0; r < w; ++r) in.push_back(make_inputs(r, w, dt, seed));
      const auto out = run_all(comms, in);
      for (int r = 0; r < w; ++r)
        for (int step = 0; step < kSteps; ++step) {
          INFO("rank " << r << ", " << kStepNames[step]);
          const Tensor e = expected(step, r, in, dt);
          for (const Shard& range : checked_ranges(step, r, w))
            CHECK(bytes_of(out[r][step], range.offset, range.count) == bytes_of(e, range.offset, range.count));
        }
    }
}

TEST_CASE("dist threads: a mismatch or a bad argument throws on every rank, naming the call", "[dist]") {
  auto comms = dist::make_thread_group(2);
  const Stream s;
  auto both = [&](const std::function<void(int)>& fn) {
    auto errors = run_ranks(2, fn);
    for (const auto& e : errors) {
      REQUIRE(e);
      CHECK_THROWS_AS(std::rethrow_exception(e), std::invalid_argument);
    }
    CHECK(what(errors[0]) == what(errors[1]));
    return what(errors[0]);
  };
  std::string m = both([&](int r) {
    Tensor t = test::random_tensor({r == 0 ? 4 : 5}, 1);
    comms[r]->all_reduce_sum(t, s);
  });
  CHECK_THAT(m, Catch::Contains("all_reduce_sum") && Catch::Contains("rank 1 has f32 [5]") &&
                    Catch::Contains("rank 0 has f32 [4]"));
  m = both([&](int r) {
    Tensor t = test::random_tensor({4}, 1, r == 0 ? DType::f32 : DType::bf16);
    comms[r]->broadcast(t, 0, s);
  });
  CHECK_THAT(m, Catch::Contains("broadcast") && Catch::Contains("bf16 [4]"));
  m = both([&](int r) {
    Tensor t = test::random_tensor({4}, 1);
    if (r == 0) comms[r]->all_reduce_sum(t, s);
    else comms[r]->broadcast(t, 0, s);
  });
  CHECK_THAT(m, Catch::Contains("rank 0 calls all_reduce_sum, rank 1 calls broadcast"));
  m = both([&](int r) {
    Tensor t = test::random_tensor({4, 6}, 1);
    Tensor v = r == 1 ? t.transpose(0, 1) : t;
    comms[r]->all_reduce_sum(v, s);
  });
  CHECK_THAT(m, Catch::Contains("all_reduce_sum (rank 1)") && Catch::Contains("not contiguous"));
  m = both([&](int r) {
    Tensor t = test::random_tensor({10}, 1);
    comms[r]->reduce_scatter_sum(t, {Shard{0, 6}, Shard{5, 5}}, s);
  });
  CHECK_THAT(
      m, Catch::Contains("reduce_scatter_sum") && Catch::Contains("shard 1 = [5, 10)") && Catch::Contains("overlaps"));
  m = both([&](int r) {
    Tensor t = test::random_tensor({10}, 1);
    comms[r]->all_gather(t, {Shard{0, 6}, Shard{6, 5}}, s);
  });
  CHECK_THAT(m, Catch::Contains("all_gather") && Catch::Contains("outside"));
  m = both([&](int r) {
    Tensor t = test::random_tensor({3}, 1, DType::i32);
    comms[r]->all_reduce_sum(t, s);
  });
  CHECK_THAT(m, Catch::Contains("dtype i32 is not supported"));
  m = both([&](int r) {
    Tensor t = test::random_tensor({3}, 1);
    comms[r]->broadcast(t, 2, s);
  });
  CHECK_THAT(m, Catch::Contains("root 2"));

  // The group is still in step after the errors.
  std::vector<Tensor> t = {Tensor::full({3}, 1.5), Tensor::full({3}, 2.0)};
  auto errors = run_ranks(2, [&](int r) { comms[r]->all_reduce_sum(t[r], s); });
  REQUIRE(what(errors[0]) == "");
  REQUIRE(what(errors[1]) == "");
  CHECK(t[0].to_vector() == std::vector<double>{3.5, 3.5, 3.5});
  CHECK(t[1].to_vector() == std::vector<double>{3.5, 3.5, 3.5});
}

TEST_CASE("dist tcp: every collective equals the threads backend bit for bit", "[dist]") {
  const uint64_t seed = disttest::test_seed() + 7;
  INFO("replay: LINTRAIN_TEST_SEED=" << disttest::test_seed());
  for (int w = 1; w <= 4; ++w) {
    auto rv = make_rendezvous(w);
    std::vector<std::unique_ptr<Communicator>> tcp;
    for (auto& r : rv) tcp.push_back(r->tcp_communicator());
    for (int r = 0; r < w; ++r) {
      CHECK(std::string(tcp[r]->backend()) == "tcp");
      CHECK(tcp[r]->rank() == r);
      CHECK(tcp[r]->world() == w);
    }
    auto threads = dist::make_thread_group(w);
    for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
      INFO(dtype_name(dt) << ", world " << w);
      std::vector<std::vector<Tensor>> in;
      for (int r = 0; r < w; ++r) in.push_back(make_inputs(r, w, dt, seed));
      const auto a = run_all(tcp, in), b = run_all(threads, in);
      for (int r = 0; r < w; ++r)
        for (int step = 0; step < kSteps; ++step) {
          INFO("rank " << r << ", " << kStepNames[step]);
          for (const Shard& range : checked_ranges(step, r, w))
            CHECK(bytes_of(a[r][step], range.offset, range.count) == bytes_of(b[r][step], range.offset, range.count));
        }
    }
  }
}

TEST_CASE("dist tcp: a large tensor (many socket buffers) through 3 ranks equals the threads backend", "[dist]") {
  const uint64_t seed = disttest::test_seed() + 11;
  INFO("replay: LINTRAIN_TEST_SEED=" << disttest::test_seed());
  {
    auto rv = make_rendezvous(3);
    std::vector<std::unique_ptr<Communicator>> tcp;
    for (auto& r : rv) tcp.push_back(r->tcp_communicator());
    auto threads = dist::make_thread_group(3);
    const int64_t n = 3 << 18;  // 3 MiB of f32 per rank
    std::vector<Tensor> x, y;
    for (int r = 0; r < 3; ++r) {
      x.push_back(test::random_tensor({n}, seed + 31 * r));
      y.push_back(x.back().clone());
    }
    const Stream s;
    const auto shards = dist::even_shards(n, 3);
    auto ea = run_ranks(3, [&](int r) {
      tcp[r]->all_reduce_sum(x[r], s);
      tcp[r]->all_gather(x[r], shards, s);
    });
    auto eb = run_ranks(3, [&](int r) {
      threads[r]->all_reduce_sum(y[r], s);
      threads[r]->all_gather(y[r], shards, s);
    });
    for (int r = 0; r < 3; ++r) {
      REQUIRE(what(ea[r]) == "");
      REQUIRE(what(eb[r]) == "");
      CHECK(bytes_of(x[r]) == bytes_of(y[r]));
    }
  }
}

TEST_CASE("dist tcp: a mismatch throws on every rank and the connections stay in step", "[dist]") {
  auto rv = make_rendezvous(3);
  std::vector<std::unique_ptr<Communicator>> tcp;
  for (auto& r : rv) tcp.push_back(r->tcp_communicator());
  const Stream s;
  auto errors = run_ranks(3, [&](int r) {
    Tensor t = test::random_tensor({r == 2 ? 6 : 4}, 3);
    tcp[r]->all_reduce_sum(t, s);
  });
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    REQUIRE(errors[r]);
    CHECK_THROWS_AS(std::rethrow_exception(errors[r]), std::invalid_argument);
    CHECK_THAT(what(errors[r]), Catch::Contains("all_reduce_sum: rank 2 has f32 [6], rank 0 has f32 [4]"));
  }
  errors = run_ranks(3, [&](int r) {
    Tensor t = test::random_tensor({4}, 3);
    Tensor u = r == 1 ? t.to(DType::f64) : t;
    tcp[r]->all_gather(u, dist::even_shards(4, 3), s);
  });
  for (int r = 0; r < 3; ++r) CHECK_THAT(what(errors[r]), Catch::Contains("all_gather") && Catch::Contains("f64 [4]"));
  std::vector<Tensor> t;
  for (int r = 0; r < 3; ++r) t.push_back(Tensor::full({5}, r + 1.0));
  errors = run_ranks(3, [&](int r) { tcp[r]->all_reduce_sum(t[r], s); });
  for (int r = 0; r < 3; ++r) {
    REQUIRE(what(errors[r]) == "");
    CHECK(t[r].to_vector() == std::vector<double>(5, 6.0));
  }
}

TEST_CASE("dist rendezvous: broadcast_blob and barrier", "[dist]") {
  auto rv = make_rendezvous(4);
  std::vector<std::string> got(4);
  std::atomic<bool> rank0_done{false};
  std::vector<int> saw_done(4, 0);
  auto errors = run_ranks(4, [&](int r) {
    got[r] = rv[r]->broadcast_blob(r == 0 ? std::string("id\0with a zero", 14) : "ignored");
    if (r == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the others wait in the barrier
      rank0_done = true;
    }
    rv[r]->barrier();
    saw_done[r] = rank0_done ? 1 : 0;
  });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    REQUIRE(what(errors[r]) == "");
    CHECK(got[r] == std::string("id\0with a zero", 14));
    CHECK(saw_done[r] == 1);
    CHECK(rv[r]->world().rank == r);
  }
  // One process: nothing to meet.
  dist::Rendezvous solo(loopback_world(0, 1, 0), 1.0);
  CHECK(solo.broadcast_blob("x") == "x");
  CHECK_NOTHROW(solo.barrier());
}

TEST_CASE("dist rendezvous: a missing rank times out, named", "[dist]") {
  const int port = disttest::free_loopback_port();
  const auto t0 = Clock::now();
  // Ranks 0 and 1 of 3; rank 2 never comes.
  auto errors = run_ranks(2, [&](int r) { dist::Rendezvous rv(loopback_world(r, 3, port), 1.0); });
  const double took = seconds_since(t0);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(errors[r]);
    CHECK_THROWS_AS(std::rethrow_exception(errors[r]), std::runtime_error);
    CHECK_THAT(what(errors[r]), Catch::Contains("rendezvous at 127.0.0.1:" + std::to_string(port) +
                                                ": rank 2 of 3 did not arrive within 1 s"));
  }
  CHECK(took >= 0.9);
  CHECK(took < 5.0);

  // Rank 1 alone: rank 0 is the one missing.
  const int port2 = disttest::free_loopback_port();
  const auto t1 = Clock::now();
  try {
    dist::Rendezvous rv(loopback_world(1, 2, port2), 0.5);
    FAIL("the rendezvous did not time out");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("rank 0 of 2 did not arrive within 0.5 s"));
  }
  CHECK(seconds_since(t1) < 3.0);
}

TEST_CASE("dist rendezvous: a rank arriving twice or a different world size is an error", "[dist]") {
  const int port = disttest::free_loopback_port();
  const auto t0 = Clock::now();
  // World 3 as ranks 0, 1, 1: rank 0 refuses as soon as the second rank 1 says hello.
  auto errors = run_ranks(3, [&](int i) { dist::Rendezvous rv(loopback_world(i == 0 ? 0 : 1, 3, port), 10.0); });
  CHECK(seconds_since(t0) < 5.0);
  for (int i = 0; i < 3; ++i) {
    INFO("thread " << i);
    REQUIRE(errors[i]);
    CHECK_THAT(what(errors[i]), Catch::Contains("rank 1 arrived twice"));
  }

  const int port2 = disttest::free_loopback_port();
  errors = run_ranks(2, [&](int r) { dist::Rendezvous rv(loopback_world(r, r == 0 ? 2 : 3, port2), 10.0); });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    REQUIRE(errors[r]);
    CHECK_THAT(what(errors[r]), Catch::Contains("rank 1 says the world has 3 ranks, rank 0 2"));
  }
}

TEST_CASE("dist rendezvous: watch() reports a peer whose Rendezvous is gone", "[dist]") {
  auto rv = make_rendezvous(3);
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::pair<int, int>> lost;  // (watcher, lost peer)
  for (int r = 0; r < 3; ++r)
    rv[r]->watch([&, r](int peer) {
      std::lock_guard<std::mutex> lock(m);
      lost.emplace_back(r, peer);
      cv.notify_all();
    });
  CHECK_THROWS_AS(rv[0]->watch([](int) {}), std::logic_error);
  // The watch does not read: control traffic still works beside it.
  std::vector<std::string> got(3);
  auto errors = run_ranks(3, [&](int r) {
    got[r] = rv[r]->broadcast_blob("abc");
    rv[r]->barrier();
  });
  for (int r = 0; r < 3; ++r) {
    REQUIRE(what(errors[r]) == "");
    CHECK(got[r] == "abc");
  }
  auto wait_for = [&](size_t n) {
    std::unique_lock<std::mutex> lock(m);
    return cv.wait_for(lock, std::chrono::seconds(5), [&] { return lost.size() >= n; });
  };
  {
    std::lock_guard<std::mutex> lock(m);
    CHECK(lost.empty());
  }
  const auto t0 = Clock::now();
  rv[2].reset();  // rank 2 leaves: rank 0 (its only watcher) hears of it
  REQUIRE(wait_for(1));
  CHECK(seconds_since(t0) < 2.0);
  rv[0].reset();  // rank 0 leaves: rank 1 hears of it
  REQUIRE(wait_for(2));
  rv[1]->unwatch();
  rv[1].reset();
  std::lock_guard<std::mutex> lock(m);
  REQUIRE(lost.size() == 2);
  CHECK(lost[0] == std::make_pair(0, 2));
  CHECK(lost[1] == std::make_pair(1, 0));
}

TEST_CASE("dist rendezvous: watch() without a callback ends the process with exit code 1", "[dist]") {
  const int port = disttest::free_loopback_port();
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // rank 1: watches rank 0 and waits (bounded) for it to go
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::close(out[0]);
    try {
      dist::Rendezvous rv(loopback_world(1, 2, port), 10.0);
      rv.watch();
      for (int i = 0; i < 200; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } catch (...) { ::_exit(3); }
    ::_exit(2);  // not ended by the watch within 10 s
  }
  ::close(out[1]);
  { dist::Rendezvous rv0(loopback_world(0, 2, port), 10.0); }  // rank 0 leaves
  int status = -1;
  const auto t0 = Clock::now();
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (seconds_since(t0) > 10) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL("the watching rank did not end");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string log;
  char buf[512];
  for (ssize_t k; (k = ::read(out[0], buf, sizeof buf)) > 0;) log.append(buf, k);
  ::close(out[0]);
  INFO(log);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(log, Catch::Contains("rank 1: lost contact with rank 0 (its process ended); ending this rank"));
  CHECK(seconds_since(t0) < 5.0);
}
