// Data-parallel training end to end on the CPU: `trainer --nproc N` with the tcp backend
// (engine/parallel). The loss trajectory does not depend on N for the same global batch (up to the
// reduction order), ZeRO-1 gives the same trajectory, resume with the same N is bit-exact and
// with another N continues; a rank killed with SIGKILL ends the whole job in bounded time with a
// message naming it, leaving the last checkpoint intact; SIGTERM stops every rank after the same
// step with a checkpoint; bad --nproc input exits 2; a rendezvous that misses a rank names it.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "engine/parallel/launch.h"
#include "engine/train/checkpoint.h"
#include "tests/engine/train/trainer_dist_util.h"

namespace fs = std::filesystem;
using lt::traintest::read_text;
using lt::traintest::run_trainer;
using lt::traintest::TempDir;
using lt::traintest::write_text;

namespace {

// A tiny KDA model on synthetic MQAR (global batch 8): a few seconds for 12 steps.
std::string dist_config(const std::string& out, int64_t steps, int64_t checkpoint_every, const std::string& dist = "") {
  lt::traintest::DistRun r;
  r.out = out;
  r.steps = steps;
  r.checkpoint_every = checkpoint_every;
  r.dist = dist;
  return lt::traintest::dist_config(r);
}
using lt::traintest::check_close;
auto losses = lt::traintest::loss_trajectory;

using lt::traintest::rank_pid;
using lt::traintest::wait_for_progress;

}  // namespace

TEST_CASE("trainer --nproc: 1, 2 and 4 CPU ranks follow the same trajectory; ZeRO-1 and bf16 reduction too",
          "[dist][trainer]") {
  TempDir tmp;
  const std::string one = tmp / "one", two = tmp / "two", four = tmp / "four", z = tmp / "zero1", h = tmp / "bf16";
  write_text(tmp / "one.json", dist_config(one, 12, 0));
  write_text(tmp / "two.json", dist_config(two, 12, 0));
  write_text(tmp / "four.json", dist_config(four, 12, 0));
  write_text(tmp / "z.json", dist_config(z, 12, 0, R"(, "zero1": true)"));
  write_text(tmp / "h.json", dist_config(h, 12, 0, R"(, "reduce_dtype": "bf16")"));
  auto r1 = run_trainer({"--config", tmp / "one.json"}, tmp.path.string(), "one");
  INFO(r1.err);
  REQUIRE(r1.rc == 0);
  auto r2 = run_trainer({"--config", tmp / "two.json", "--nproc", "2"}, tmp.path.string(), "two");
  INFO(r2.err);
  REQUIRE(r2.rc == 0);
  CHECK_THAT(r2.err, Catch::Contains("data parallel: 2 ranks (tcp)"));
  auto r4 = run_trainer({"--config", tmp / "four.json", "--nproc", "4"}, tmp.path.string(), "four");
  INFO(r4.err);
  REQUIRE(r4.rc == 0);
  auto rz = run_trainer({"--config", tmp / "z.json", "--nproc", "2"}, tmp.path.string(), "zero1");
  INFO(rz.err);
  REQUIRE(rz.rc == 0);
  CHECK_THAT(rz.err, Catch::Contains("ZeRO-1"));
  auto rh = run_trainer({"--config", tmp / "h.json", "--nproc", "2"}, tmp.path.string(), "bf16");
  INFO(rh.err);
  REQUIRE(rh.rc == 0);

  const auto a = losses(one + "/metrics.jsonl");
  REQUIRE(a.size() == 12);
  CHECK(a.back().first < a.front().first);  // it learns
  check_close(a, losses(two + "/metrics.jsonl"), 1e-4);
  check_close(a, losses(four + "/metrics.jsonl"), 1e-4);
  check_close(a, losses(z + "/metrics.jsonl"), 1e-4);
  check_close(a, losses(h + "/metrics.jsonl"), 3e-2);  // bf16 summands: ~3 significant digits
  // Only rank 0 wrote: one metrics file, one final checkpoint that verifies.
  CHECK(lt::train::checkpoint_verify(two + "/step-00000012").empty());
  CHECK(lt::train::checkpoint_verify(z + "/step-00000012").empty());
  // ZeRO-1's checkpoint has the unsharded layout: its moments equal the plain 2-rank run's.
  auto ckz = lt::train::checkpoint_load(z + "/step-00000012");
  auto ck2 = lt::train::checkpoint_load(two + "/step-00000012");
  for (const auto& name : ck2.state.names) {
    INFO(name);
    const auto x = ckz.state.get(name).to_vector(), y = ck2.state.get(name).to_vector();
    REQUIRE(x.size() == y.size());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) diff += (x[i] - y[i]) * (x[i] - y[i]), norm += y[i] * y[i];
    CHECK(std::sqrt(diff) <= 1e-3 * std::sqrt(norm) + 1e-12);
  }
}

TEST_CASE("trainer --nproc 2: resume is exact with 2 ranks and continues with 1", "[dist][trainer]") {
  TempDir tmp;
  const std::string ref = tmp / "ref", run = tmp / "run", other = tmp / "other";
  write_text(tmp / "ref.json", dist_config(ref, 12, 6));
  auto r = run_trainer({"--config", tmp / "ref.json", "--nproc", "2"}, tmp.path.string(), "ref");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  // The same run resumed from its step-6 checkpoint (the schedule spans 12 steps either way).
  fs::create_directories(run);
  fs::copy(ref + "/step-00000006", run + "/step-00000006", fs::copy_options::recursive);
  write_text(tmp / "run.json", dist_config(run, 12, 6));
  auto p2 = run_trainer({"--config", tmp / "run.json", "--nproc", "2"}, tmp.path.string(), "resumed");
  INFO(p2.err);
  REQUIRE(p2.rc == 0);
  CHECK_THAT(p2.err, Catch::Contains("resumed from"));
  const auto full = losses(ref + "/metrics.jsonl"), parts = losses(run + "/metrics.jsonl");
  REQUIRE(full.size() == 12);
  REQUIRE(parts.size() == 6);  // steps 7..12 (the copied folder had no metrics)
  for (size_t i = 0; i < parts.size(); ++i) {
    INFO("step " << i + 7);
    CHECK(parts[i] == full[i + 6]);  // bit for bit: the tcp backend sums in rank order
  }
  CHECK(read_text(run + "/step-00000012/model.safetensors") == read_text(ref + "/step-00000012/model.safetensors"));

  // The 2-rank checkpoint of step 6, resumed by one process: the same global batches follow.
  fs::create_directories(other);
  fs::copy(ref + "/step-00000006", other + "/step-00000006", fs::copy_options::recursive);
  write_text(tmp / "other.json", dist_config(other, 12, 6));
  auto r1 = run_trainer({"--config", tmp / "other.json"}, tmp.path.string(), "other");
  INFO(r1.err);
  REQUIRE(r1.rc == 0);
  CHECK_THAT(r1.err, Catch::Contains("resumed from"));
  const auto cont = losses(other + "/metrics.jsonl");
  REQUIRE(cont.size() == 6);  // steps 7..12 (the copied folder had no metrics)
  std::vector<std::pair<double, double>> tail(full.begin() + 6, full.end());
  check_close(tail, cont, 1e-4);
}

TEST_CASE("trainer --nproc 2: a rank killed with SIGKILL ends the job, names the rank, keeps the checkpoint",
          "[dist][trainer]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  write_text(tmp / "run.json", dist_config(out, 100000, 3));
  auto p = lt::traintest::spawn_trainer({"--config", tmp / "run.json", "--nproc", "2"}, tmp.path.string(), "job");
  // Wait for the first checkpoint and a few more steps.
  wait_for_progress(p.pid, out + "/metrics.jsonl", 5, std::chrono::seconds(120), out + "/step-00000003");
  const pid_t victim = rank_pid(p.pid, 1);
  REQUIRE(victim > 0);
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  const int rc = p.wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string err = p.err();
  INFO(err);
  CHECK(rc == 1);
  CHECK(seconds < 15.0);  // bounded: the lost connection ends rank 0 at once
  CHECK_THAT(err, Catch::Contains("rank 1 was killed by signal 9"));
  // Rank 0 learns of it from whichever sees the closed connection first: the liveness watcher
  // ("lost contact with rank 1") or the step's collective ("rank 1 closed its connection").
  CHECK_THAT(err, Catch::Contains("lost contact with rank 1") || Catch::Contains("rank 1 closed its connection"));
  // The newest complete checkpoint verifies and a resume (here with one process) starts from it.
  auto latest = lt::train::checkpoint_find_latest(out);
  REQUIRE(latest.has_value());
  CHECK(lt::train::checkpoint_verify(*latest).empty());
  write_text(tmp / "resume.json", dist_config(out, lt::train::checkpoint_load(*latest).step + 2, 0));
  auto r = run_trainer({"--config", tmp / "resume.json"}, tmp.path.string(), "resume");
  INFO(r.err);
  CHECK(r.rc == 0);
  CHECK_THAT(r.err, Catch::Contains("resumed from " + *latest));
}

TEST_CASE("trainer --nproc 2: a hung rank ends the job after dist.timeout_s, the rank waiting on it named",
          "[dist][trainer]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  lt::traintest::DistRun run;
  run.out = out;
  run.steps = 100000;
  run.checkpoint_every = 2;
  run.timeout_s = 8;
  write_text(tmp / "run.json", lt::traintest::dist_config(run));
  auto p = lt::traintest::spawn_trainer({"--config", tmp / "run.json", "--nproc", "2"}, tmp.path.string(), "job");
  wait_for_progress(p.pid, out + "/metrics.jsonl", 3, std::chrono::seconds(120), out + "/step-00000002");
  const pid_t hung = rank_pid(p.pid, 1);
  REQUIRE(hung > 0);
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(hung, SIGSTOP);  // alive, connections open, making no progress
  const int rc = p.wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string err = p.err();
  INFO(err);
  CHECK(rc == 1);
  // Rank 0's watchdog after 8 s, then the launcher's grace (10 s) before it kills the stopped rank.
  CHECK(seconds < 40.0);
  CHECK_THAT(err, Catch::Contains("rank 0: no progress for") && Catch::Contains("dist.timeout_s = 8"));
  CHECK_THAT(err, Catch::Contains("rank 0 exited with code 1"));
  auto latest = lt::train::checkpoint_find_latest(out);
  REQUIRE(latest.has_value());
  CHECK(lt::train::checkpoint_verify(*latest).empty());
}

TEST_CASE("trainer --nproc 2: SIGTERM stops both ranks after the same step with one checkpoint, exit 0",
          "[dist][trainer]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  write_text(tmp / "run.json", dist_config(out, 100000, 0));
  auto p = lt::traintest::spawn_trainer({"--config", tmp / "run.json", "--nproc", "2"}, tmp.path.string(), "job");
  wait_for_progress(p.pid, out + "/metrics.jsonl", 3, std::chrono::seconds(120));
  ::kill(p.pid, SIGTERM);
  const int rc = p.wait();
  const std::string err = p.err();
  INFO(err);
  CHECK(rc == 0);
  CHECK_THAT(err, Catch::Contains("SIGTERM received: passing it to the ranks"));
  auto latest = lt::train::checkpoint_find_latest(out);
  REQUIRE(latest.has_value());
  CHECK(lt::train::checkpoint_verify(*latest).empty());
  const int64_t step = lt::train::checkpoint_load(*latest).step;
  CHECK(step == static_cast<int64_t>(losses(out + "/metrics.jsonl").size()));
  CHECK_THAT(err, Catch::Contains("stopped after step " + std::to_string(step)));
}

TEST_CASE("trainer --nproc: bad input exits 2 naming it; a rendezvous missing a rank names the rank",
          "[dist][trainer][cli]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  write_text(tmp / "run.json", dist_config(out, 4, 0));
  auto r = run_trainer({"--config", tmp / "run.json", "--nproc", "3"}, tmp.path.string(), "uneven");
  CHECK(r.rc == 2);
  CHECK_THAT(r.err, Catch::Contains("train.batch_size") && Catch::Contains("--nproc 3"));
  CHECK_FALSE(fs::exists(out));
  auto r0 = run_trainer({"--config", tmp / "run.json", "--nproc", "0"}, tmp.path.string(), "zero");
  CHECK(r0.rc == 2);

  // Rank 0 of a world of 2 whose rank 1 never comes.
  write_text(tmp / "alone.json", dist_config(out, 4, 0));
  const std::string port = std::to_string(lt::dist::free_local_port());
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", port.c_str(), 1);
  auto alone =
      run_trainer({"--config", tmp / "alone.json", "--set", "dist.rendezvous_timeout_s=2"}, tmp.path.string(), "alone");
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("MASTER_ADDR");
  ::unsetenv("MASTER_PORT");
  INFO(alone.err);
  CHECK(alone.rc == 1);
  CHECK_THAT(alone.err, Catch::Contains("rank 1") && Catch::Contains("did not arrive"));
}
