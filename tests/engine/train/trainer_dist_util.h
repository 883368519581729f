// Helpers for the data-parallel trainer tests (CPU and CUDA): the run config, the loss
// trajectory of a metrics.jsonl and their comparison, and a running job's rank processes.
#pragma once
#include <catch2/catch.hpp>

#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/engine/train/trainer_test_util.h"

namespace lt::traintest {

// A synthetic-MQAR run of `steps` steps (global batch `batch`) logging every step.
// model / data: the JSON objects' members; dist: extra members of "dist".
struct DistRun {
  std::string out, device = "cpu";
  std::string model = R"("arch": "kda", "vocab_size": 32, "hidden_size": 32, "num_layers": 2, "num_heads": 2,
                         "head_dim": 16, "chunk": 16)";
  std::string data = R"("source": "synthetic", "task": "mqar", "mqar_pairs": 4, "prefetch": 1)";
  int64_t batch = 8, seq_len = 32, steps = 12, checkpoint_every = 0;
  double timeout_s = 60;
  std::string dist;
};
inline std::string dist_config(const DistRun& r) {
  return R"({"description": "test: data-parallel MQAR run", "out": ")" + r.out + R"(", "device": ")" + r.device +
         R"(", "model": {)" + r.model + R"(}, "data": {)" + r.data + R"(}, "train": {"batch_size": )" +
         std::to_string(r.batch) + R"(, "seq_len": )" + std::to_string(r.seq_len) + R"(, "steps": )" +
         std::to_string(r.steps) +
         R"(, "lr": 3e-3, "warmup_steps": 3, "weight_decay": 0.01, "seed": 11, "eval_every": 0, "eval_batches": 1,
            "checkpoint_every": )" +
         std::to_string(r.checkpoint_every) +
         R"(, "keep_checkpoints": 5, "log_every": 1}, "dist": {"bucket_mb": 0.01, "rendezvous_timeout_s": 60,
            "timeout_s": )" +
         std::to_string(r.timeout_s) + r.dist + "}}";
}

// (loss, grad norm) of every step of a run's metrics.jsonl.
inline std::vector<std::pair<double, double>> loss_trajectory(const std::string& metrics) {
  std::vector<std::pair<double, double>> out;
  for (const auto& j : train_records(metrics)) out.emplace_back(j["loss"].get<double>(), j["grad_norm"].get<double>());
  return out;
}

// The trajectories agree to `tol` relative (reduction-order rounding); reports the largest.
inline void check_close(const std::vector<std::pair<double, double>>& a,
                        const std::vector<std::pair<double, double>>& b, double tol) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("step " << i + 1 << ": loss " << a[i].first << " vs " << b[i].first << ", grad norm " << a[i].second << " vs "
                 << b[i].second);
    CHECK(std::abs(a[i].first - b[i].first) <= tol * std::abs(a[i].first));
    CHECK(std::abs(a[i].second - b[i].second) <= tol * std::abs(a[i].second) + 1e-7);
    worst = std::max(worst, std::abs(a[i].first - b[i].first) / std::abs(a[i].first));
  }
  WARN("largest relative loss difference " << worst);
}

// Waits while the job `pid` runs until `metrics` has at least `lines` lines (and, when
// `checkpoint` is not empty, that checkpoint folder exists); fails the test if the job ends
// first or `timeout` passes.
inline void wait_for_progress(pid_t pid, const std::string& metrics, size_t lines, std::chrono::seconds timeout,
                              const std::string& checkpoint = "") {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while ((!checkpoint.empty() && !std::filesystem::exists(checkpoint)) || count_lines(metrics) < lines) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, WNOHANG) == 0);
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Children of a process (from /proc/<pid>/task/<pid>/children): a launcher's rank processes.
inline std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::istringstream is(read_text("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children"));
  for (pid_t c; is >> c;) out.push_back(c);
  return out;
}

// The RANK of a process, from its environment; -1 when it has none.
inline int rank_of(pid_t pid) {
  const std::string env = read_text("/proc/" + std::to_string(pid) + "/environ");
  for (size_t i = 0; i < env.size();) {
    const size_t end = env.find('\0', i);
    const std::string kv = env.substr(i, end == std::string::npos ? std::string::npos : end - i);
    if (kv.rfind("RANK=", 0) == 0) return std::stoi(kv.substr(5));
    if (end == std::string::npos) break;
    i = end + 1;
  }
  return -1;
}

// The process of rank `rank` among the launcher's children; -1 when there is none.
inline pid_t rank_pid(pid_t launcher, int rank) {
  for (pid_t c : children_of(launcher))
    if (rank_of(c) == rank) return c;
  return -1;
}

}  // namespace lt::traintest
