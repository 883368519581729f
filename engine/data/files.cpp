// File-backed token sources: UTF-8 text as bytes (vocab 256) and llm.c token shards
// (layout and header checks: engine/data/documents.h).
//
// Each file is memory-mapped and split on its own: the first (1 - val_fraction) of its tokens
// are train, the tail (floor(n x val_fraction) tokens) validation. A row is a window of T + 1
// consecutive tokens of one file's split, its start drawn uniformly over all windows of all
// files (windows never cross files), so every start position is equally likely.
// Every token a loader can read (its split of each shard) is checked against vocab_size
// when the loader is made. Errors name the file, prefixed "data: ".
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/data/documents.h"
#include "engine/data/source.h"

namespace lt::data {
namespace {

// One file's split: tokens [begin, begin + length) of the file, each `width` bytes (1: text
// bytes, 2: uint16 shard tokens), starting at byte `base` of the map.
struct Segment {
  const MappedFile* file = nullptr;
  size_t base = 0;
  int width = 1;
  int64_t begin = 0, length = 0;
  int64_t token(int64_t i) const {
    const uint8_t* p = file->data() + base + static_cast<size_t>(begin + i) * static_cast<size_t>(width);
    if (width == 1) return *p;
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
};

class WindowSource final : public Source {
 public:
  WindowSource(std::string kind, const DataConfig& cfg, Split split, int64_t T, int64_t vocab)
      : kind_(std::move(kind)), path_(cfg.path), split_(split), T_(T), V_(vocab), val_fraction_(cfg.val_fraction),
        reset_token_(cfg.reset_token()) {}

  // Adds the split of a file holding n tokens of `width` bytes from byte `base`; returns it.
  Segment add_file(std::unique_ptr<MappedFile> file, size_t base, int width, int64_t n) {
    const auto n_val = static_cast<int64_t>(static_cast<double>(n) * val_fraction_);
    Segment s;
    s.file = file.get();
    s.base = base;
    s.width = width;
    s.begin = split_ == Split::train ? 0 : n - n_val;
    s.length = split_ == Split::train ? n - n_val : n_val;
    total_tokens_ += s.length;
    longest_ = std::max(longest_, s.length);
    files_.push_back(std::move(file));
    if (s.length >= T_ + 1) {
      segments_.push_back(s);
      windows_ += s.length - T_;
      cumulative_.push_back(windows_);
    }
    return s;
  }

  // Throws when no window fits.
  void finish() const {
    if (windows_ == 0)
      throw std::runtime_error("data: " + kind_ + " '" + path_ + "': no window of T + 1 = " + std::to_string(T_ + 1) +
                               " tokens fits in the " + split_name(split_) + " split (" +
                               std::to_string(total_tokens_) + " tokens in " + std::to_string(files_.size()) +
                               " file(s), the longest " + std::to_string(longest_) + "; val_fraction " +
                               std::to_string(val_fraction_) + ")");
  }

  int64_t fill_row(Rng& rng, int32_t* tokens, int32_t* targets) const override {
    const auto w = static_cast<int64_t>(rng.below(static_cast<uint64_t>(windows_)));
    const size_t k =
        static_cast<size_t>(std::upper_bound(cumulative_.begin(), cumulative_.end(), w) - cumulative_.begin());
    const Segment& s = segments_[k];
    const int64_t start = w - (k == 0 ? 0 : cumulative_[k - 1]);
    int64_t prev = s.token(start);
    int64_t valid = T_;
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t nxt = s.token(start + t + 1);
      tokens[t] = static_cast<int32_t>(prev);
      // a document starts at nxt: with restarts, its first token is not predicted across them
      const bool boundary = nxt == reset_token_;
      targets[t] = boundary ? -100 : static_cast<int32_t>(nxt);
      valid -= boundary ? 1 : 0;
      prev = nxt;
    }
    return valid;
  }

  int64_t vocab_size() const override { return V_; }
  nlohmann::json identity() const override {
    return {{"source", kind_}, {"files", files_.size()}, {"tokens", total_tokens_}, {"windows", windows_}};
  }

 private:
  std::string kind_, path_;
  Split split_;
  int64_t T_, V_;
  double val_fraction_;
  int64_t reset_token_;  // DataConfig::reset_token(): targets equal to it are not scored; -1: none
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<Segment> segments_;    // files with at least one window
  std::vector<int64_t> cumulative_;  // [segments]: windows in segments 0..k
  int64_t windows_ = 0, total_tokens_ = 0, longest_ = 0;
};

void check_common(const DataConfig& cfg) {
  if (cfg.path.empty()) throw std::runtime_error("data: source '" + cfg.source + "' needs data.path");
  if (!(cfg.val_fraction >= 0.0 && cfg.val_fraction < 1.0))
    throw std::runtime_error("data: val_fraction " + std::to_string(cfg.val_fraction) + " is outside [0, 1)");
}

// Runs f, prefixing "data: " to the message of a shared reader's error (documents.h).
template <class F>
auto with_data_prefix(F&& f) {
  try {
    return f();
  } catch (const std::runtime_error& e) { throw std::runtime_error(std::string("data: ") + e.what()); }
}

}  // namespace

std::unique_ptr<Source> make_text_source(const DataConfig& cfg, Split split, int64_t T) {
  check_common(cfg);
  const std::vector<std::string> paths = with_data_prefix([&] { return text_file_paths(cfg.path); });
  auto src = std::make_unique<WindowSource>("text", cfg, split, T, 256);
  int64_t total = 0;
  for (const std::string& p : paths) {
    auto file = with_data_prefix([&] { return std::make_unique<MappedFile>(p); });
    const auto n = static_cast<int64_t>(file->size());
    if (n == 0 && paths.size() == 1) throw std::runtime_error("data: text file '" + p + "' is empty");
    total += n;
    src->add_file(std::move(file), 0, 1, n);
  }
  if (total == 0)
    throw std::runtime_error("data: text folder '" + cfg.path + "' is empty (" + std::to_string(paths.size()) +
                             " empty files)");
  src->finish();
  return src;
}

std::unique_ptr<Source> make_token_source(const DataConfig& cfg, Split split, int64_t T) {
  check_common(cfg);
  if (cfg.vocab_size < 1)
    throw std::runtime_error("data: vocab_size " + std::to_string(cfg.vocab_size) + " must be >= 1");
  const std::vector<std::string> paths = with_data_prefix([&] { return shard_paths(cfg.path); });
  auto src = std::make_unique<WindowSource>("tokens", cfg, split, T, cfg.vocab_size);
  for (const std::string& p : paths) {
    auto file = with_data_prefix([&] { return std::make_unique<MappedFile>(p); });
    const int64_t n = with_data_prefix([&] { return shard_token_count(*file); });
    // The tokens this split reads (the train and the validation loader each check theirs).
    const Segment seg = src->add_file(std::move(file), kShardHeaderBytes, 2, n);
    for (int64_t i = 0; i < seg.length; ++i) {
      const int64_t v = seg.token(i);
      if (v >= cfg.vocab_size)
        throw std::runtime_error("data: token shard '" + p + "': token " + std::to_string(v) + " at index " +
                                 std::to_string(seg.begin + i) + " is >= vocab_size " + std::to_string(cfg.vocab_size));
    }
  }
  src->finish();
  return src;
}

}  // namespace lt::data
