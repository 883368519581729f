#include "engine/train/init_from.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"
#include "engine/train/config.h"

namespace lt::train {
namespace fs = std::filesystem;
namespace {

// fla config keys that name no property of the weights or of the function they compute.
const std::set<std::string>& ignored_keys() {
  static const std::set<std::string> keys = {"architectures",
                                             "torch_dtype",
                                             "dtype",
                                             "transformers_version",
                                             "use_cache",
                                             "pad_token_id",
                                             "bos_token_id",
                                             "eos_token_id",
                                             "max_position_embeddings",
                                             "initializer_range",
                                             "fuse_norm",
                                             "fuse_swiglu",
                                             "fuse_cross_entropy",
                                             "fuse_linear_cross_entropy",
                                             "use_l2warp",
                                             "attn_mode"};
  return keys;
}

// fla keys that must be present (the rest may be absent: fla's defaults, which the weights'
// shapes then check).
const std::set<std::string>& required_keys() {
  static const std::set<std::string> keys = {"model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                                             "num_heads"};
  return keys;
}

// The run's config key for an fla key, for the message.
std::string run_key(const std::string& fla_key) {
  static const std::vector<std::pair<std::string, std::string>> map = {
      {"model_type", "model.arch"},
      {"vocab_size", "model.vocab_size"},
      {"hidden_size", "model.hidden_size"},
      {"num_hidden_layers", "model.num_layers"},
      {"num_heads", "model.num_heads"},
      {"head_dim", "model.head_dim"},
      {"expand_k", "model.head_dim x model.num_heads / model.hidden_size"},
      {"intermediate_size", "model.intermediate_size"},
      {"norm_eps", "model.norm_eps"},
      {"tie_word_embeddings", "model.tie_embeddings"},
      {"proj_low_rank_dim", "model.rwkv6_proj_low_rank_dim"},
      {"gate_low_rank_dim", "model.rwkv6_gate_low_rank_dim"}};
  for (const auto& [f, r] : map)
    if (f == fla_key) return r;
  return "fla's " + fla_key + " (not a lintrain key: lintrain's models have " + fla_key + " fixed)";
}

bool same_value(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::abs(x - y) <= 1e-12 * std::max(std::abs(x), std::abs(y));
  }
  return a == b;
}

}  // namespace

void init_from_folder(const std::string& dir, model::Model& m) {
  const std::string where = "config key 'train.init_from' ('" + dir + "')";
  const fs::path config_path = fs::path(dir) / "config.json", weights_path = fs::path(dir) / "model.safetensors";
  for (const fs::path& p : {config_path, weights_path})
    if (!fs::is_regular_file(p))
      throw ConfigError(where + ": no " + p.filename().string() + " in the folder (expected fla's config.json and " +
                        "model.safetensors, as trainer export writes them)");
  nlohmann::json theirs;
  try {
    std::ifstream f(config_path);
    theirs = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw ConfigError(where + ": " + config_path.string() + " is not JSON: " + e.what());
  }
  if (!theirs.is_object()) throw ConfigError(where + ": " + config_path.string() + " is not a JSON object");

  const nlohmann::json ours = m.fla_config();
  std::string mismatches;
  for (auto it = ours.begin(); it != ours.end(); ++it) {
    const std::string& k = it.key();
    if (ignored_keys().count(k)) continue;
    if (!theirs.contains(k)) {
      if (required_keys().count(k))
        mismatches += (mismatches.empty() ? "" : "; ") + run_key(k) + " is " + it.value().dump() + ", the folder's " +
                      k + " is absent";
      continue;
    }
    if (theirs[k].is_null() && !required_keys().count(k)) continue;  // fla's default; the shapes check it
    if (!same_value(it.value(), theirs[k]))
      mismatches += (mismatches.empty() ? "" : "; ") + run_key(k) + " is " + it.value().dump() + ", the folder's " + k +
                    " is " + theirs[k].dump();
  }
  if (!mismatches.empty())
    throw ConfigError(where + " holds another model than this run's: " + mismatches +
                      " (set the run's model keys to the folder's, or start from another folder)");
  try {
    m.load_params(io::read_safetensors(weights_path.string()));
  } catch (const std::exception& e) { throw ConfigError(where + ": " + e.what()); }
  m.refresh_shadow();
}

}  // namespace lt::train
