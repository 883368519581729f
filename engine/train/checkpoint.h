// Checkpoints: one folder per step under the run's output folder.
//
//   <out>/step-00001000/
//     model.safetensors   the weights under fla's parameter names (what `trainer export` copies)
//     state.safetensors   AdamW moments as "m.<fla name>" / "v.<fla name>"; metadata
//                         "lintrain_state": the loop state as JSON (step, applied and skipped
//                         update counts, data position, loss-spike window, ...) and
//                         "lintrain_config": the effective config
//     manifest.json       per file: size in bytes and FNV-1a 64 of its bytes; written last
//
// Writing is atomic: everything goes into "<out>/.step-00001000.tmp.<pid>/", each file is
// fsynced, the manifest is written last, the folder is renamed to its final name and <out>
// is fsynced. A crash leaves either no folder or a complete one; a folder whose files do not
// match its manifest (truncated, corrupted, manifest missing) fails verification and
// `--resume auto` skips it with a warning naming what is wrong.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"

namespace lt::train {

// FNV-1a 64 of a file's bytes; throws std::runtime_error naming the file when unreadable.
uint64_t file_fnv1a64(const std::string& path);

// "step-00001000"
std::string checkpoint_dir_name(int64_t step);

// Writes <out_dir>/step-NNNNNNNN atomically (replacing one of the same step), then deletes
// the oldest step folders beyond `keep`. Returns the folder's path.
std::string checkpoint_write(const std::string& out_dir, int64_t step, const std::vector<io::NamedTensor>& weights,
                             const std::vector<io::NamedTensor>& state_tensors, const nlohmann::json& state,
                             const std::string& config_json, int64_t keep);

// Checks the manifest against the files: returns "" when it verifies, else what is wrong.
std::string checkpoint_verify(const std::string& dir);

struct Checkpoint {
  std::string dir;
  int64_t step = 0;
  io::SafetensorsFile model;      // weights (fla names)
  io::SafetensorsFile state;      // moments
  nlohmann::json loop_state;      // metadata "lintrain_state"
  nlohmann::ordered_json config;  // metadata "lintrain_config" (the effective config)
};

// Verifies and loads a checkpoint folder; std::runtime_error naming the folder and the
// problem when it does not verify.
Checkpoint checkpoint_load(const std::string& dir);

// Step folders under out_dir, newest first.
std::vector<std::string> checkpoint_list(const std::string& out_dir);
// The newest folder under out_dir that verifies; the ones skipped are reported through
// spdlog (warn) with the reason. nullopt when none verifies (or none exists).
std::optional<std::string> checkpoint_find_latest(const std::string& out_dir);

}  // namespace lt::train
