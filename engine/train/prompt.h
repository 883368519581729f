// A run's text interface: what its tokens are (bytes, BPE ids, plain ids) and how text becomes
// tokens and back, for sampling prompts and printed samples.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/train/config.h"

namespace lt::train {

// Whether the run's tokens are bytes (data.source text, or the synthetic bytes task).
bool byte_vocab(const RunConfig& rc);
// The tokenizer.json beside a token run's shards (the folder of data.path, or of its glob), or
// "" when there is none (or the run has no token shards).
std::string tokenizer_path(const RunConfig& rc);

// Text for tokens: bytes for byte vocabularies; for token data, decoded with the tokenizer.json
// beside the shards when there is one (engine/data/tokenizer.h), else the ids.
std::string decode_tokens(const RunConfig& rc, const std::vector<int32_t>& tokens);
// The prompt as tokens: bytes for byte vocabularies; for token data, the tokenizer.json's
// encoding of the text (ConfigError when an id is outside the model's vocabulary); with no
// tokenizer.json, ids separated by spaces or commas ("12 7 99").
std::vector<int32_t> encode_prompt(const RunConfig& rc, const std::string& prompt);

}  // namespace lt::train
