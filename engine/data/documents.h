// Reading data files whole: the file listing of a text path, llm.c token shards (header
// checked), a read-only map of a file. Shared by the training sources (files.cpp) and the
// evaluation of arbitrary text (engine/train/eval_text.h).
//
// llm.c shard layout (karpathy/llm.c, dev/data/data_common.py write_datafile):
//   int32 header[256]: header[0] = 20240520 (magic), header[1] = 1 (version),
//                      header[2] = number of tokens n
//   uint16 tokens[n]   (little-endian); file size = 1024 + 2 n
//
// Errors are std::runtime_error naming the path; they carry no prefix (callers add theirs:
// "data: " for a run's data, the option for a command line).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lt::data {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int64_t kShardHeaderBytes = 256 * 4;

// A read-only memory map of a whole file (nothing mapped for an empty file). Throws when the
// path cannot be opened or is not a regular file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The files of a text path: the path itself when it is a file, else the visible regular files
// of the folder (names not starting with '.'), sorted. Throws when the path does not exist or
// the folder holds no such file.
std::vector<std::string> text_file_paths(const std::string& path);

// True when `path` contains a glob character (* ? [).
bool has_glob_chars(const std::string& path);

// The shard files of a file or a glob (sorted by glob). Throws when the glob matches nothing.
std::vector<std::string> shard_paths(const std::string& pattern);

// True when the file starts with the shard magic (its first int32 is 20240520).
bool is_shard_file(const std::string& path);

// The token count n of a mapped shard after checking its header (magic, version) and its
// size (1024 + 2 n bytes); throws naming the file otherwise.
int64_t shard_token_count(const MappedFile& file);

// Token i of a checked shard (uint16, after the 1024-byte header).
inline int64_t shard_token(const MappedFile& file, int64_t i) {
  const uint8_t* p = file.data() + kShardHeaderBytes + 2 * i;
  return static_cast<int64_t>(p[0]) | static_cast<int64_t>(p[1]) << 8;
}

}  // namespace lt::data
