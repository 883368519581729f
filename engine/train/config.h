// The trainer's configuration: ONE schema table (config_schema()) lists every key with its
// type, default, allowed range or choices and what it means. A user's JSON file and the
// `--set key.path=value` overrides are validated against it; the result is the effective
// config (every key present, defaults filled in), saved with each run and each checkpoint.
//
//   nlohmann::ordered_json j = lt::train::config_load_file("configs/quick.json");
//   lt::train::config_apply_override(j, "train.lr=1e-3");       // typed by the schema
//   lt::train::RunConfig rc = lt::train::config_resolve(j);      // validates, fills defaults
//   std::cout << rc.effective.dump(2);                            // what --print-config prints
//
// Layout of a config file (every section and key optional):
//   { "description": "...", "out": "runs/quick", "device": "auto",
//     "model": { "arch": "kda", "hidden_size": 64, ... },
//     "data":  { "source": "synthetic", "task": "mqar", ... },
//     "train": { "batch_size": 8, "seq_len": 64, "steps": 300, ... },
//     "dist":  { "bucket_mb": 25, "zero1": false, ... } }
// Errors (unknown key, wrong type, out-of-range value, NaN/inf, missing file, unparsable
// JSON) throw ConfigError whose message names the key path and the expected form; the
// trainer turns it into exit code 2 before writing anything.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/data/loader.h"
#include "engine/model/config.h"
#include "engine/optim/adamw.h"
#include "engine/optim/schedule.h"

namespace lt::train {

class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& message) : std::runtime_error(message) {}
};

enum class ValueType : uint8_t { integer, number, boolean, string };
const char* value_type_name(ValueType t);  // "an integer", "a number", ...

// One row of the schema. Numbers are bounded by [min, max] (inclusive); strings and, where
// given, integers are restricted to `choices` (empty: any). A string key with check_path
// names a file or folder (or a glob) that must exist when it is used.
struct SchemaEntry {
  std::string path;  // "train.lr"
  ValueType type;
  nlohmann::ordered_json default_value;
  double min = -1e300, max = 1e300;
  std::vector<std::string> choices;
  std::string description;
};
const std::vector<SchemaEntry>& config_schema();
const SchemaEntry* config_find(const std::string& path);  // nullptr when unknown

// The schema as text for --help: one line per key (path, type, default, range, meaning).
std::string config_schema_help();

// Reads and parses a JSON file; ConfigError naming the file when missing or malformed.
nlohmann::ordered_json config_load_file(const std::string& path);

// Applies "key.path=value": the value is parsed as the schema's type for that key.
void config_apply_override(nlohmann::ordered_json& j, const std::string& assignment);
// Sets one key (already typed) after checking it is in the schema.
void config_set(nlohmann::ordered_json& j, const std::string& path, const nlohmann::ordered_json& value);

struct TrainConfig {
  int64_t batch_size = 8;
  int64_t seq_len = 256;
  int64_t grad_accum = 1;
  int64_t steps = 1000;
  optim::LrSchedule schedule;  // lr, warmup_steps, decay, min_lr_ratio (total_steps = steps)
  optim::AdamWConfig adamw;    // beta1, beta2, eps, weight_decay, max_grad_norm
  uint64_t seed = 1234;
  std::string init_from;     // a folder with fla's config.json + model.safetensors: the initial weights
  int64_t eval_every = 100;  // 0: never (still at the end)
  int64_t eval_batches = 4;
  int64_t checkpoint_every = 500;  // 0: only at the end
  int64_t keep_checkpoints = 3;
  int64_t log_every = 10;
  int64_t sample_every = 0;  // 0: never
  int64_t sample_tokens = 64;
  int64_t max_consecutive_skips = 10;
  double spike_zscore = 0.0;  // 0: off
  int64_t spike_window = 100;
  bool cuda_graph = true;  // replay the step as a CUDA graph where it qualifies (engine/train/step_graph.h)
};

// Data-parallel training (engine/parallel): used when the job has several ranks.
struct DistConfig {
  int64_t bucket_bytes = int64_t{25} << 20;
  bool reduce_bf16 = false;
  bool overlap = true;
  bool zero1 = false;
  double timeout_s = 600.0;
  double rendezvous_timeout_s = 120.0;
};

struct RunConfig {
  std::string description;
  model::ModelConfig model;
  data::DataConfig data;
  TrainConfig train;
  DistConfig dist;
  std::string out_dir;
  std::string device;                // auto | cpu | cuda | cuda:N
  nlohmann::ordered_json effective;  // every key, schema order
};

// Validates `user` against the schema and fills in the defaults. check_files: the files the
// data section names (data.path) must exist (off for commands that need no data: export, sample).
RunConfig config_resolve(const nlohmann::ordered_json& user, bool check_files = true);

// Keys whose change makes a checkpoint unloadable (model shape, vocabulary).
const std::vector<std::string>& config_shape_keys();
// Keys (leaf paths) whose values differ between two effective configs.
std::vector<std::string> config_diff(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);

// Looks up a leaf of a nested config by dotted path (nullptr when absent).
const nlohmann::ordered_json* config_get(const nlohmann::ordered_json& j, const std::string& path);

}  // namespace lt::train
