// Resuming a run: which checkpoint (--resume auto | none | DIR), whether it fits the config, the
// loop's own state in it, the AdamW moments under their checkpoint names, and metrics.jsonl cut
// back to the checkpoint's step. The trajectory after a resume on the CPU is bit-identical to
// the uninterrupted run's (engine/train/loop.h).
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/train/checkpoint.h"

namespace lt::train {

// The checkpoint to resume from: `resume` is "auto" (the newest one in out_dir that verifies;
// a warning when some exist and none verifies), "none" or a checkpoint folder. ConfigError
// naming the option when a named or found checkpoint cannot be read.
std::optional<Checkpoint> find_resume_checkpoint(const std::string& resume, const std::string& out_dir);
// ConfigError when the checkpoint's config differs from `effective` in a key that shapes the
// weights or the data (config_shape_keys), naming each with both values; a warning listing the
// other keys that differ.
void check_resume_fits(const Checkpoint& ck, const nlohmann::ordered_json& effective);

// The loop's state in a checkpoint (metadata "lintrain_state"): the step, the applied and
// skipped update counts, the skips in a row, the loss-spike window (doubles stored as their
// bits, so they come back exactly), the data position and the seed.
struct LoopState {
  int64_t step = 0, applied = 0, skipped = 0, consecutive = 0;
  std::deque<double> window;
  nlohmann::json data;
  uint64_t seed = 0;
  nlohmann::json to_json() const;
  static LoopState from_json(const nlohmann::json& j);
};

// The moments of every parameter under its checkpoint name ("m.<fla name>", "v.<fla name>"),
// as views of the full [P] moment tensors m_full, v_full (the model's arenas, or GradSync's
// gathered ones).
std::vector<io::NamedTensor> moment_tensors(model::Model& m, const Tensor& m_full, const Tensor& v_full);
// Reads the checkpoint's moments into the full [P] tensors m_full, v_full (shapes checked).
void load_moments(model::Model& m, const io::SafetensorsFile& f, Tensor& m_full, Tensor& v_full);
// Keeps the lines of metrics.jsonl whose step is <= `step` (a resumed run rewrites what came
// after its checkpoint); drops a torn last line.
void metrics_truncate(const std::string& path, int64_t step);

}  // namespace lt::train
