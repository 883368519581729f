// Helpers for the data-parallel trainer tests (CPU and CUDA): the run config, the loss
// trajectory of a metrics.jsonl, and their comparison.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tests/train/trainer_test_util.h"

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

}  // namespace lt::traintest
