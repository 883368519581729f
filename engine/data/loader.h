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
// Staging: a loader made with a `Staging` writes each batch (on its prefetch thread) straight
// into a slot of a host staging ring (engine/staging.h: pinned memory for a CUDA device,
// plain memory for the CPU); upload() then copies it to the device asynchronously on the
// current stream and returns the slot, which is reused once that copy has run.
// Errors (missing file, empty text, bad shard header or size, token >= vocab, unknown
// source) throw std::runtime_error naming the file or key.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/staging.h"
#include "engine/tensor.h"

namespace lt::data {

enum class Split : uint8_t { train, val };

struct DataConfig {
  std::string source = "synthetic";  // synthetic | text | tokens
  std::string path;                  // text: file or folder; tokens: file or glob
  std::string task = "mqar";         // synthetic: mqar | bytes
  int64_t vocab_size = 256;          // synthetic vocabulary; for tokens: the model's vocab (checked)
  int64_t mqar_pairs = 16;           // mqar: key-value pairs per sequence (every validation row)
  int64_t mqar_min_pairs = 0;        // mqar, training rows: 0 = mqar_pairs; else a mixture (synthetic.cpp)
  double val_fraction = 0.05;        // text / tokens
  int prefetch = 2;                  // batches prepared ahead by the loader thread (0: inline)
  // Packed documents (text / tokens): the end-of-text token that starts each document (llm.c
  // puts it before every document; -1: none; the config resolves it, engine/train/config.h),
  // and whether the model's state restarts there. With both, a target equal to it (the
  // prediction of the next document's first token across the restart) is not scored.
  int64_t eot_token = -1;
  bool reset_state_at_eot = true;
  // The token where documents restart, or -1: no restarts.
  int64_t reset_token() const { return reset_state_at_eot && source != "synthetic" ? eot_token : -1; }
};

struct Batch {
  int64_t B = 0, T = 0;              // B: the rows this batch holds (the loader's slice)
  std::vector<int32_t> tokens;       // [B, T] (empty when staged)
  std::vector<int32_t> targets;      // [B, T], -100 = ignored (empty when staged)
  int64_t valid_targets = 0;         // number of targets != -100 in these rows
  int64_t global_valid_targets = 0;  // ... in all rows of the global batch (the loss's divisor)
  // A staging loader's batch: tokens [B, T] then targets [B, T], i32, in one staging slot
  // (empty once uploaded).
  HostStaging::Lease staged;
  const int32_t* token_data() const;
  const int32_t* target_data() const;
};

// Where a loader stages its batches: slots for uploads to `device`; slots = 0 means
// prefetch + 4 (the ring grows when a consumer holds more batches than that).
struct Staging {
  Device device;
  int slots = 0;
};

// The batch on `device` as tokens and targets [B, T] i32 (views of one [2, B, T] tensor),
// enqueued on the device's current stream. A staged batch is copied asynchronously and its
// slot returned (reused once the copy has run); an unstaged one is copied the plain way.
struct DeviceBatch {
  Tensor tokens, targets;
};
DeviceBatch upload(Batch& batch, Device device);

// The rows of each global batch that a loader hands out: [begin, begin + count) of B
// (data-parallel ranks each take a disjoint slice). count -1: all rows.
struct RowSlice {
  int64_t begin = 0, count = -1;
};

class Loader {
 public:
  // B: rows of the global batch. With a row slice, every batch is drawn exactly as the whole
  // global batch would be (the same generator steps, so the batches and the position do not
  // depend on how the rows are split), but only the slice's rows are kept (and staged);
  // global_valid_targets still counts the valid targets of all B rows.
  Loader(const DataConfig& cfg, Split split, int64_t B, int64_t T, uint64_t seed,
         std::optional<Staging> staging = std::nullopt, RowSlice rows = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  Batch next();
  nlohmann::json state() const;               // position: exact resume with restore()
  void restore(const nlohmann::json& state);  // throws naming what does not match
  int64_t vocab_size() const;                 // 256 for text, the config's for synthetic / tokens
  const HostStaging* staging() const;         // nullptr without staging
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt::data
