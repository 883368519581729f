// train.init_from: a new run's initial weights from a folder holding fla's config.json and
// model.safetensors (what `trainer export` writes, or fla's save_pretrained). The folder's
// config must describe the run's model: every key of Model::fla_config() that shapes the
// weights or the function is compared (model_type, sizes, vocabulary, norm epsilon, tying, the
// mixers' options); bookkeeping keys (dtype, token ids, fused-kernel switches, the attention
// backend name) are not. The optimizer state is not read: AdamW starts fresh.
#pragma once
#include <string>

#include "engine/model/model.h"

namespace lt::train {

// Checks DIR/config.json against the model's and loads DIR/model.safetensors into m (every
// parameter, exact shapes). ConfigError naming the folder and, for each mismatching key, the
// run's config key, the run's value and the folder's.
void init_from_folder(const std::string& dir, model::Model& m);

}  // namespace lt::train
