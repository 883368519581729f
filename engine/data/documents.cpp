// Whole-file reading shared by the training sources and text evaluation (documents.h).
#include "engine/data/documents.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace lt::data {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file";
    ::close(fd);
    throw std::runtime_error("'" + path + "' " + why);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw std::runtime_error("cannot map '" + path + "': " + why);
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::vector<std::string> text_file_paths(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw std::runtime_error("text path '" + path + "' does not exist");
  std::vector<std::string> paths;
  if (!fs::is_directory(st)) {
    paths.push_back(path);
    return paths;
  }
  for (const fs::directory_entry& e : fs::directory_iterator(path)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && !name.empty() && name[0] != '.') paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw std::runtime_error("text folder '" + path + "' holds no files");
  return paths;
}

bool has_glob_chars(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> shard_paths(const std::string& pattern) {
  std::vector<std::string> paths;
  if (!has_glob_chars(pattern)) {
    paths.push_back(pattern);
    return paths;
  }
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);  // sorted by glob
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || paths.empty()) throw std::runtime_error("no token shard matches '" + pattern + "'");
  if (rc != 0) throw std::runtime_error("cannot expand the glob '" + pattern + "'");
  return paths;
}

bool is_shard_file(const std::string& path) {
  const MappedFile file(path);
  if (file.size() < sizeof(int32_t)) return false;
  int32_t magic = 0;
  std::memcpy(&magic, file.data(), sizeof magic);
  return magic == kShardMagic;
}

int64_t shard_token_count(const MappedFile& file) {
  const std::string where = "token shard '" + file.path() + "': ";
  if (file.size() < static_cast<size_t>(kShardHeaderBytes))
    throw std::runtime_error(where + "size mismatch: " + std::to_string(file.size()) +
                             " bytes, shorter than the 1024-byte header");
  int32_t header[3];
  std::memcpy(header, file.data(), sizeof header);
  if (header[0] != kShardMagic)
    throw std::runtime_error(where + "bad magic " + std::to_string(header[0]) + " (expected " +
                             std::to_string(kShardMagic) + ": not an llm.c token shard)");
  if (header[1] != kShardVersion)
    throw std::runtime_error(where + "unsupported version " + std::to_string(header[1]) + " (expected " +
                             std::to_string(kShardVersion) + ": uint16 tokens)");
  const int64_t n = header[2];
  const int64_t expect = kShardHeaderBytes + 2 * n;
  if (n < 0 || static_cast<int64_t>(file.size()) != expect)
    throw std::runtime_error(where + "size mismatch: the header says " + std::to_string(n) + " tokens (" +
                             std::to_string(expect) + " bytes) but the file has " + std::to_string(file.size()) +
                             " bytes");
  return n;
}

}  // namespace lt::data
