// The trajectory dump (trainer --dump-trajectory DIR): what a reference implementation needs
// to replay a run step by step and compare (scripts/fla_trajectory.py trains fla's model with
// torch.optim.AdamW on it):
//   DIR/config.json          fla's config of the model (Model::fla_config)
//   DIR/run.json             the run's effective config (lintrain's keys)
//   DIR/init.safetensors     the weights before this process's first step, fla names
//   DIR/decay.json           {"decay": [...], "no_decay": [...]}: the fla names AdamW decays or not
//   DIR/steps.jsonl          one line per step result: step, lr, loss, grad_norm, skipped
//                            (doubles written to round-trip exactly)
//   DIR/batches.safetensors  tokens, targets [S, A, B, T] i32 of the S steps run (A = train.grad_accum
//                            micro-batches of B rows, T tokens; targets -100 are ignored), "steps" [S]
//                            i64 their 1-based numbers; written by finish()
// The parameters after step s are the run's checkpoints (model.safetensors, fla names): set
// train.checkpoint_every and train.keep_checkpoints for the steps to compare. One process only.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "engine/data/loader.h"
#include "engine/model/model.h"
#include "engine/train/config.h"

namespace lt::train {

class TrajectoryDump {
 public:
  // Creates DIR and opens steps.jsonl (ConfigError naming DIR when it cannot be written):
  // with the run's other input checks, before anything else is written.
  TrajectoryDump(const std::string& dir, const RunConfig& rc);
  // Writes config.json, run.json, init.safetensors and decay.json from the model's weights
  // as they are before the first step.
  void start(const model::Model& m, const RunConfig& rc);
  // The micro-batches of step `step` (1-based), in the order they were trained on.
  void add_batches(int64_t step, const std::vector<data::Batch>& batches);
  // A step's result (StepStats with has_result): appended to steps.jsonl at once.
  void add_result(int64_t step, double lr, double loss, double grad_norm, bool skipped);
  // Writes batches.safetensors (also when the run stops early: the steps that ran).
  void finish();

 private:
  std::string dir_;
  int64_t A_ = 0, B_ = 0, T_ = 0;
  std::vector<int64_t> steps_;
  std::vector<int32_t> tokens_, targets_;  // [S, A, B, T]
  std::ofstream results_;
};

}  // namespace lt::train
