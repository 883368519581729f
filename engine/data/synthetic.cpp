// Synthetic token sources: MQAR (multi-query associative recall) and a structured byte
// stream. Both are generated row by row from the loader's generator: cheap (O(T) per row
// plus O(pairs x slots) for MQAR) and deterministic by seed.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/data/source.h"

namespace lt::data {
namespace {

constexpr int32_t kIgnore = -100;

// Multi-query associative recall as in Zoology (Arora et al. 2023, `multiquery_ar`): a row is
//   k_1 v_1 k_2 v_2 ... k_N v_N | query region of T - 2N tokens
// Keys are N distinct tokens of [1, V/2), values N distinct tokens of [V/2, V) (disjoint
// halves). Each key is queried once: it is placed at an even offset 2g of the query region,
// g drawn without replacement from the `slots` = (T - 2N) / 2 offsets with weight
// g^(a - 1), a = 0.01 (Zoology's power law: short gaps are likelier), and the target at
// that position is the key's value. Every other query-region token is uniform over [0, V)
// (Zoology's random_non_queries); every other target is -100. Valid targets per row: N.
// Training mixture (min_pairs < pairs, as Zoology trains its hard setting on a mixture led by
// easy rows): each row first draws its N, with probability 1/2 the smallest level and else
// uniformly one of the other levels, the levels being min_pairs, 2 min_pairs, 4 min_pairs, ...
// up to pairs (which is always one). Without a mixture no draw is made for N, so the rows are
// those of a plain source.
class MqarSource final : public Source {
 public:
  MqarSource(int64_t vocab, int64_t pairs, int64_t min_pairs, int64_t T) : V_(vocab), T_(T) {
    if (pairs < 1) throw std::runtime_error("mqar_pairs must be >= 1, got " + std::to_string(pairs));
    if (min_pairs < 0 || min_pairs > pairs)
      throw std::runtime_error("mqar_min_pairs " + std::to_string(min_pairs) + " must lie in [0, mqar_pairs " +
                               std::to_string(pairs) + "]");
    if (4 * pairs > T_)
      throw std::runtime_error("mqar_pairs " + std::to_string(pairs) + " needs a sequence length T >= 4 x pairs = " +
                               std::to_string(4 * pairs) + ", got T " + std::to_string(T_));
    if (V_ / 2 - 1 < pairs)
      throw std::runtime_error(
          "vocab_size " + std::to_string(V_) + " is too small for mqar_pairs " + std::to_string(pairs) +
          " (keys come from [1, vocab/2): need vocab_size >= " + std::to_string(2 * pairs + 2) + ")");
    if (min_pairs > 0 && min_pairs < pairs) {
      for (int64_t n = min_pairs; n < pairs; n *= 2) levels_.push_back(Level{n, slot_weights(n)});
    }
    levels_.push_back(Level{pairs, slot_weights(pairs)});
  }

  int64_t fill_row(Rng& rng, int32_t* tokens, int32_t* targets) const override {
    size_t li = 0;
    if (levels_.size() > 1)
      li = rng.uniform() < 0.5 ? 0 : 1 + static_cast<size_t>(rng.below(static_cast<uint64_t>(levels_.size() - 1)));
    const Level& lv = levels_[li];
    const int64_t N = lv.pairs;
    const int64_t half = V_ / 2;
    std::vector<int32_t> keys, values;
    keys.reserve(static_cast<size_t>(N));
    values.reserve(static_cast<size_t>(N));
    draw_distinct(rng, N, 1, half - 1, &keys);        // [1, V/2)
    draw_distinct(rng, N, half, V_ - half, &values);  // [V/2, V)

    for (int64_t i = 0; i < T_; ++i) targets[i] = kIgnore;
    for (int64_t j = 0; j < N; ++j) {
      tokens[2 * j] = keys[static_cast<size_t>(j)];
      tokens[2 * j + 1] = values[static_cast<size_t>(j)];
    }
    const int64_t context = 2 * N;
    for (int64_t i = context; i < T_; ++i) tokens[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V_)));

    // Query slots: weighted draws without replacement over the remaining slots.
    std::vector<double> w = lv.slot_weight;
    double total = 0;
    for (double x : w) total += x;
    for (int64_t j = 0; j < N; ++j) {
      const double u = rng.uniform() * total;
      size_t g = 0;
      double acc = 0;
      size_t last_open = 0;
      for (; g < w.size(); ++g) {
        if (w[g] == 0) continue;
        last_open = g;
        acc += w[g];
        if (u < acc) break;
      }
      if (g == w.size()) g = last_open;  // u rounded up to the total
      total -= w[g];
      w[g] = 0;
      const int64_t pos = context + 2 * static_cast<int64_t>(g);
      tokens[pos] = keys[static_cast<size_t>(j)];
      targets[pos] = values[static_cast<size_t>(j)];
    }
    return N;
  }

  int64_t vocab_size() const override { return V_; }
  nlohmann::json identity() const override {
    nlohmann::json j = {{"task", "mqar"}, {"vocab_size", V_}, {"mqar_pairs", levels_.back().pairs}};
    if (levels_.size() > 1) j["mqar_min_pairs"] = levels_.front().pairs;
    return j;
  }

 private:
  struct Level {
    int64_t pairs;
    std::vector<double> slot_weight;  // [(T - 2 pairs) / 2]
  };
  std::vector<double> slot_weights(int64_t pairs) const {
    constexpr double kPowerA = 0.01;
    std::vector<double> w(static_cast<size_t>((T_ - 2 * pairs) / 2));
    for (size_t g = 0; g < w.size(); ++g) w[g] = std::pow(static_cast<double>(g + 1), kPowerA - 1.0);
    return w;
  }
  // Appends N distinct values of [lo, lo + n) in draw order (n >= N is checked above).
  static void draw_distinct(Rng& rng, int64_t N, int64_t lo, int64_t n, std::vector<int32_t>* out) {
    while (static_cast<int64_t>(out->size()) < N) {
      const auto c = static_cast<int32_t>(lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(n))));
      if (std::find(out->begin(), out->end(), c) == out->end()) out->push_back(c);
    }
  }

  int64_t V_, T_;
  std::vector<Level> levels_;  // the training mixture's pair counts, ascending; back(): mqar_pairs
};

// A byte stream with regularities a small model learns quickly, as a sequence of segments:
//   phrase   (1/2): one of a fixed dictionary of English phrases (bytes mod V): after its
//                   first bytes the rest is predictable once the dictionary is learnt
//   count    (1/4): 6..20 tokens s, s+d, s+2d, ... (mod V), d in {1, 2, 3}: predictable
//                   from two tokens on
//   copy     (1/4): 4..12 uniform tokens, a marker token (V - 1), then the same tokens again:
//                   the second half is predictable by looking back (induction)
// The dictionary is fixed (not seeded), so train and validation share one "language".
// Rows start at a segment boundary; targets are the stream shifted by one, all scored.
class ByteStreamSource final : public Source {
 public:
  ByteStreamSource(int64_t vocab, int64_t T) : V_(vocab), T_(T) {
    if (V_ < 8)
      throw std::runtime_error("data: vocab_size " + std::to_string(V_) + " is too small for task 'bytes' (need >= 8)");
    static const char* const kPhrases[] = {
        "the quick brown fox jumps over the lazy dog. ",
        "to be or not to be, that is the question. ",
        "all work and no play makes jack a dull boy. ",
        "a stitch in time saves nine. ",
        "hello, world! ",
        "linear attention keeps a state of fixed size. ",
        "the delta rule writes what the key predicts wrongly. ",
        "once upon a time ",
        "in the beginning ",
        "one, two, three, four. ",
        "red green blue ",
        "north east south west ",
        "monday tuesday wednesday thursday friday ",
        "0123456789 ",
        "abcdefghijklmnopqrstuvwxyz ",
        "the end. ",
    };
    for (const char* p : kPhrases) {
      std::vector<int32_t> ph;
      for (const char* c = p; *c; ++c) ph.push_back(static_cast<int32_t>(static_cast<unsigned char>(*c) % V_));
      phrases_.push_back(std::move(ph));
    }
  }

  int64_t fill_row(Rng& rng, int32_t* tokens, int32_t* targets) const override {
    std::vector<int32_t> x;  // the stream, T + 1 tokens
    x.reserve(static_cast<size_t>(T_ + 40));
    const auto want = static_cast<size_t>(T_ + 1);
    while (x.size() < want) {
      const uint64_t kind = rng.below(4);
      if (kind < 2) {
        const auto& ph = phrases_[rng.below(phrases_.size())];
        x.insert(x.end(), ph.begin(), ph.end());
      } else if (kind == 2) {
        const int64_t len = 6 + static_cast<int64_t>(rng.below(15));
        const int64_t step = 1 + static_cast<int64_t>(rng.below(3));
        const int64_t start = static_cast<int64_t>(rng.below(static_cast<uint64_t>(V_)));
        for (int64_t i = 0; i < len; ++i) x.push_back(static_cast<int32_t>((start + i * step) % V_));
      } else {
        const int64_t len = 4 + static_cast<int64_t>(rng.below(9));
        const size_t first = x.size();
        for (int64_t i = 0; i < len; ++i) x.push_back(static_cast<int32_t>(rng.below(static_cast<uint64_t>(V_ - 1))));
        x.push_back(static_cast<int32_t>(V_ - 1));
        for (int64_t i = 0; i < len; ++i) x.push_back(x[first + static_cast<size_t>(i)]);
      }
    }
    for (int64_t i = 0; i < T_; ++i) {
      tokens[i] = x[static_cast<size_t>(i)];
      targets[i] = x[static_cast<size_t>(i + 1)];
    }
    return T_;
  }

  int64_t vocab_size() const override { return V_; }
  nlohmann::json identity() const override { return {{"task", "bytes"}, {"vocab_size", V_}}; }

 private:
  int64_t V_, T_;
  std::vector<std::vector<int32_t>> phrases_;
};

}  // namespace

std::unique_ptr<Source> make_synthetic_source(const DataConfig& cfg, Split split, int64_t T) {
  if (cfg.vocab_size < 2 || cfg.vocab_size > (int64_t{1} << 31) - 1)
    throw std::runtime_error("data: vocab_size " + std::to_string(cfg.vocab_size) + " is out of range [2, 2^31)");
  if (cfg.task == "mqar")
    return std::make_unique<MqarSource>(cfg.vocab_size, cfg.mqar_pairs, split == Split::train ? cfg.mqar_min_pairs : 0,
                                        T);
  if (cfg.task == "bytes") return std::make_unique<ByteStreamSource>(cfg.vocab_size, T);
  throw std::runtime_error("data: unknown synthetic task '" + cfg.task + "' (data.task: mqar | bytes)");
}

}  // namespace lt::data
