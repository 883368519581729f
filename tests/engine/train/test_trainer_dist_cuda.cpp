// Data-parallel training on CUDA through NCCL, end to end: one rank (`--nproc 1`, a world of one
// through NCCL) follows the plain single-GPU run's trajectory, with ZeRO-1 and bf16 reduction
// too; with 2+ GPUs, 2 ranks on half the rows each follow it as well, a rank killed with
// SIGKILL ends the job naming it, and the job resumes. Without NCCL the test says so and stops.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "engine/device.h"
#include "engine/parallel/comm.h"
#include "engine/train/checkpoint.h"
#include "tests/engine/train/trainer_dist_util.h"

namespace fs = std::filesystem;
using lt::traintest::read_text;
using lt::traintest::run_trainer;
using lt::traintest::TempDir;
using lt::traintest::write_text;

namespace {

// A small KDA model on cuda (global batch 8, T 128).
std::string gpu_config(const std::string& out, int64_t steps, int64_t checkpoint_every, const std::string& dist = "") {
  lt::traintest::DistRun r;
  r.out = out;
  r.device = "auto";
  r.model = R"("arch": "kda", "vocab_size": 256, "hidden_size": 128, "num_layers": 2, "num_heads": 2,
               "head_dim": 64, "chunk": 32, "precision": "fp32")";
  r.data = R"("source": "synthetic", "task": "mqar", "mqar_pairs": 8, "prefetch": 2)";
  r.seq_len = 128;
  r.steps = steps;
  r.checkpoint_every = checkpoint_every;
  r.timeout_s = 120;
  r.dist = dist;
  return lt::traintest::dist_config(r);
}
using lt::traintest::check_close;
auto losses = lt::traintest::loss_trajectory;

bool nccl_or_warn() {
  std::string why;
  if (lt::dist::nccl_available(&why)) return true;
  WARN("NCCL is not usable here, data-parallel CUDA tests not run: " << why);
  return false;
}

}  // namespace

TEST_CASE("trainer cuda --nproc 1: one NCCL rank follows the single-GPU run (plain, ZeRO-1, bf16 reduction)",
          "[dist][trainer][cuda]") {
  if (!nccl_or_warn()) return;
  TempDir tmp;
  const std::string plain = tmp / "plain", one = tmp / "one", z = tmp / "z", h = tmp / "h";
  write_text(tmp / "plain.json", gpu_config(plain, 10, 0));
  write_text(tmp / "one.json", gpu_config(one, 10, 10));
  write_text(tmp / "z.json", gpu_config(z, 10, 10, R"(, "zero1": true)"));
  write_text(tmp / "h.json", gpu_config(h, 10, 0, R"(, "reduce_dtype": "bf16")"));
  auto r = run_trainer({"--config", tmp / "plain.json"}, tmp.path.string(), "plain");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  auto r1 = run_trainer({"--config", tmp / "one.json", "--nproc", "1"}, tmp.path.string(), "one");
  INFO(r1.err);
  REQUIRE(r1.rc == 0);
  CHECK_THAT(r1.err, Catch::Contains("data parallel: 1 ranks (nccl)"));
  auto rz = run_trainer({"--config", tmp / "z.json", "--nproc", "1"}, tmp.path.string(), "z");
  INFO(rz.err);
  REQUIRE(rz.rc == 0);
  auto rh = run_trainer({"--config", tmp / "h.json", "--nproc", "1"}, tmp.path.string(), "h");
  INFO(rh.err);
  REQUIRE(rh.rc == 0);
  const auto a = losses(plain + "/metrics.jsonl");
  REQUIRE(a.size() == 10);
  check_close(a, losses(one + "/metrics.jsonl"), 1e-5);
  check_close(a, losses(z + "/metrics.jsonl"), 1e-5);
  check_close(a, losses(h + "/metrics.jsonl"), 3e-2);
  // The comm figures are recorded per logged step on CUDA.
  auto recs = lt::traintest::train_records(one + "/metrics.jsonl");
  REQUIRE(recs.back().contains("comm_ms"));
  CHECK(recs.back()["comm_ms"].get<double>() > 0.0);
  CHECK(lt::train::checkpoint_verify(one + "/step-00000010").empty());
  CHECK(lt::train::checkpoint_verify(z + "/step-00000010").empty());
}

TEST_CASE("trainer cuda --nproc 2: two GPUs follow one; a killed rank ends the job; resume", "[dist][trainer][cuda]") {
  if (!nccl_or_warn()) return;
  if (lt::cuda_device_count() < 2) {
    WARN("one CUDA device: the 2-GPU data-parallel test is not run");
    return;
  }
  TempDir tmp;
  const std::string one = tmp / "one", two = tmp / "two", job = tmp / "job";
  write_text(tmp / "one.json", gpu_config(one, 10, 0));
  write_text(tmp / "two.json", gpu_config(two, 10, 0));
  auto r1 = run_trainer({"--config", tmp / "one.json", "--device", "cuda:0"}, tmp.path.string(), "one");
  INFO(r1.err);
  REQUIRE(r1.rc == 0);
  auto r2 = run_trainer({"--config", tmp / "two.json", "--nproc", "2"}, tmp.path.string(), "two");
  INFO(r2.err);
  REQUIRE(r2.rc == 0);
  check_close(losses(one + "/metrics.jsonl"), losses(two + "/metrics.jsonl"), 1e-4);

  write_text(tmp / "job.json", gpu_config(job, 100000, 5));
  auto p = lt::traintest::spawn_trainer({"--config", tmp / "job.json", "--nproc", "2"}, tmp.path.string(), "job");
  lt::traintest::wait_for_progress(p.pid, job + "/metrics.jsonl", 8, std::chrono::seconds(180), job + "/step-00000005");
  const std::vector<pid_t> pids = lt::traintest::children_of(p.pid);
  REQUIRE(pids.size() == 2);
  ::kill(pids.back(), SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = p.wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(p.err());
  CHECK(rc == 1);
  CHECK(seconds < 30.0);
  auto latest = lt::train::checkpoint_find_latest(job);
  REQUIRE(latest.has_value());
  const int64_t at = lt::train::checkpoint_load(*latest).step;
  write_text(tmp / "job2.json", gpu_config(job, at + 3, 0));
  auto r3 = run_trainer({"--config", tmp / "job2.json", "--nproc", "2"}, tmp.path.string(), "resume");
  INFO(r3.err);
  CHECK(r3.rc == 0);
  CHECK_THAT(r3.err, Catch::Contains("resumed from"));
}
