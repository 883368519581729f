// Internal to engine/data: the loader's random generator and the token sources behind
// lt::data::Loader (engine/data/loader.h).
//
// A source fills one row of a batch (tokens [T], targets [T]) from draws of the generator;
// a batch is B rows in order, so a batch is a pure function of the generator state before
// it. That is what makes the loader's position (generator state + batch count) exact, and
// the batches independent of prefetching.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/data/loader.h"

namespace lt::data {

// xoshiro256** (Blackman and Vigna), seeded through splitmix64. Small state (4 words,
// saved in checkpoints), fast, and the same sequence on every platform.
class Rng {
 public:
  using State = std::array<uint64_t, 4>;
  explicit Rng(uint64_t seed);
  uint64_t next();
  // Uniform in [0, n), n >= 1, without modulo bias (rejection below 2^64 mod n).
  uint64_t below(uint64_t n);
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  const State& state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  State s_{};
};

class Source {
 public:
  virtual ~Source() = default;
  // Fills tokens[0, T) and targets[0, T) (T as given at construction) from draws of `rng`;
  // returns how many targets are not -100.
  virtual int64_t fill_row(Rng& rng, int32_t* tokens, int32_t* targets) const = 0;
  virtual int64_t vocab_size() const = 0;
  // What a saved position depends on beyond the loader's B, T and split (the task, the files,
  // the number of windows); restore() requires it to be equal.
  virtual nlohmann::json identity() const = 0;
};

// Synthetic tasks (engine/data/synthetic.cpp): cfg.task "mqar" or "bytes"; the split picks
// MQAR's training mixture (cfg.mqar_min_pairs) or its validation setting.
std::unique_ptr<Source> make_synthetic_source(const DataConfig& cfg, Split split, int64_t T);
// Text bytes or llm.c token shards (engine/data/files.cpp), the given split of each file.
std::unique_ptr<Source> make_text_source(const DataConfig& cfg, Split split, int64_t T);
std::unique_ptr<Source> make_token_source(const DataConfig& cfg, Split split, int64_t T);

const char* split_name(Split split);

}  // namespace lt::data
