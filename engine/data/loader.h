// Training data: token sources and a prefetching batch loader.
//
//   lt::data::Loader train(cfg, lt::data::Split::train, B, T, seed);
//   lt::data::Batch b = train.next();        // host tokens / targets [B, T] i32
//   nlohmann::json pos = train.state();      // saved in checkpoints; restore() resumes exactly
//
// Sources (DataConfig::source):
//   synthetic  generated, deterministic by seed, no files: "mqar" (multi-query associative
//              recall: key-value pairs then queries whose targets are the values; only the
//              answer positions are scored, the rest of the targets are -100) or "bytes" (a
//              structured byte stream with learnable regularities); vocab as configured
//   text       a UTF-8 file or a folder of files (sorted by name), bytes as tokens (vocab 256)
//   tokens     llm.c token shards: a 256 x int32 header (magic 20240520, version 1, token
//              count), then uint16 tokens; one file or a glob; header, size and token < vocab
//              are checked with errors naming the file
// Text and tokens are split into train / validation by `val_fraction` of each source's
// tokens (the tail is validation). Batches are windows of T + 1 tokens at positions drawn
// from a seeded generator (targets = tokens shifted by one); the generator's state and the
// number of batches drawn are the loader's position.
// Errors (missing file, empty text, bad shard header or size, token >= vocab, unknown
// source) throw std::runtime_error naming the file or key.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lt::data {

enum class Split : uint8_t { train, val };

struct DataConfig {
  std::string source = "synthetic";  // synthetic | text | tokens
  std::string path;                  // text: file or folder; tokens: file or glob
  std::string task = "mqar";         // synthetic: mqar | bytes
  int64_t vocab_size = 256;          // synthetic vocabulary; for tokens: the model's vocab (checked)
  int64_t mqar_pairs = 16;           // mqar: key-value pairs per sequence
  double val_fraction = 0.05;        // text / tokens
  int prefetch = 2;                  // batches prepared ahead by the loader thread (0: inline)
};

struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens;   // [B, T]
  std::vector<int32_t> targets;  // [B, T], -100 = ignored
  int64_t valid_targets = 0;     // number of targets != -100
};

class Loader {
 public:
  Loader(const DataConfig& cfg, Split split, int64_t B, int64_t T, uint64_t seed);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  Batch next();
  nlohmann::json state() const;               // position: exact resume with restore()
  void restore(const nlohmann::json& state);  // throws naming what does not match
  int64_t vocab_size() const;                 // 256 for text, the config's for synthetic / tokens
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt::data
