// Autoregressive sampling from a prompt with the recurrent form (engine/model/decode.h): the prompt
// once through the per-layer state, then O(1) work per new token (the state does not grow).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "engine/model/model.h"

namespace lt::model {

// The next token from next-token logits [V]: the argmax when temperature <= 0, else a draw from
// softmax(logits / temperature) over the top_k largest (0: all), one uniform draw of rng.
int32_t sample_next(const std::vector<double>& logits, double temperature, int64_t top_k, std::mt19937_64& rng);

// n tokens after `prompt` (token 0 when it is empty), temperature (0: greedy) and top-k (0: all),
// deterministic by seed.
std::vector<int32_t> sample_tokens(Model& m, const std::vector<int32_t>& prompt, int64_t n, double temperature,
                                   int64_t top_k, uint64_t seed);

}  // namespace lt::model
