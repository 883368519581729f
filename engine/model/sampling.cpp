#include "engine/model/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/model/decode.h"

namespace lt::model {
int32_t sample_next(const std::vector<double>& logits, double temperature, int64_t top_k, std::mt19937_64& rng) {
  if (temperature <= 0.0) return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> idx(logits.size());
  for (size_t j = 0; j < idx.size(); ++j) idx[j] = static_cast<int32_t>(j);
  size_t k = top_k > 0 ? std::min<size_t>(static_cast<size_t>(top_k), idx.size()) : idx.size();
  std::partial_sort(idx.begin(), idx.begin() + static_cast<int64_t>(k), idx.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  double mx = logits[static_cast<size_t>(idx[0])];
  std::vector<double> p(k);
  double sum = 0.0;
  for (size_t j = 0; j < k; ++j) sum += p[j] = std::exp((logits[static_cast<size_t>(idx[j])] - mx) / temperature);
  double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
  size_t j = 0;
  for (; j + 1 < k && u >= p[j]; ++j) u -= p[j];
  return idx[j];
}

std::vector<int32_t> sample_tokens(Model& m, const std::vector<int32_t>& prompt, int64_t n, double temperature,
                                   int64_t top_k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> seq = prompt;
  if (seq.empty()) seq.push_back(0);
  std::vector<int32_t> out;
  if (n <= 0) return out;
  // Recurrent decoding: the prompt once through the state, then one O(1) step per token.
  model::DecodeState state(m, 1);
  Tensor next_logits =
      model::prefill(m, state,
                     Tensor::from_vector(std::vector<int64_t>(seq.begin(), seq.end()),
                                         {1, static_cast<int64_t>(seq.size())}, DType::i32, m.device()));
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0)
      next_logits = model::decode_step(
          m, state, Tensor::from_vector(std::vector<int64_t>{seq.back()}, {1}, DType::i32, m.device()));
    const int32_t next = sample_next(next_logits.to_vector(), temperature, top_k, rng);
    seq.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace lt::model
