// Helpers for the trainer tests: run the built `trainer` binary as a subprocess, temporary
// folders, metrics files.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace lt::traintest {

// The trainer binary: $LINTRAIN_TRAINER, else <build>/apps/trainer beside <build>/tests/<this test binary>.
inline std::string trainer_binary() {
  if (const char* env = std::getenv("LINTRAIN_TRAINER")) return env;
  auto self = std::filesystem::read_symlink("/proc/self/exe");
  auto p = self.parent_path().parent_path() / "apps" / "trainer";
  if (!std::filesystem::exists(p))
    throw std::runtime_error("trainer binary not found at " + p.string() +
                             " (build the `trainer` target or set LINTRAIN_TRAINER)");
  return p.string();
}

// The source tree: $LINTRAIN_TEST_DATA/.. (set by CTest), else the working directory when it
// holds configs/quick.json (a copied test binary run from the checkout's root), else the first
// folder above the test binary that holds it.
inline std::filesystem::path source_dir() {
  if (const char* root = std::getenv("LINTRAIN_TEST_DATA")) return std::filesystem::path(root).parent_path();
  if (std::filesystem::exists(std::filesystem::current_path() / "configs" / "quick.json"))
    return std::filesystem::current_path();
  for (auto p = std::filesystem::read_symlink("/proc/self/exe").parent_path(); p.has_relative_path();
       p = p.parent_path())
    if (std::filesystem::exists(p / "configs" / "quick.json")) return p;
  throw std::runtime_error("source tree not found: set LINTRAIN_TEST_DATA to <source>/tests");
}

// A fresh folder under the system temp dir, removed when the object goes.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           ("lintrain-trainer-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// llm.c token shard: 256 x int32 header (magic, version, count), then uint16 tokens.
inline void write_shard(const std::string& path, const std::vector<uint16_t>& tokens, int32_t magic = 20240520,
                        int64_t claimed = -1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = 1;
  header[2] = static_cast<int32_t>(claimed >= 0 ? claimed : static_cast<int64_t>(tokens.size()));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(header.data()), 256 * 4);
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

// A running trainer; stdout and stderr go to files in `log_dir`.
struct Process {
  pid_t pid = -1;
  std::string out_path, err_path;
  int wait() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
  }
  std::string out() const { return read_text(out_path); }
  std::string err() const { return read_text(err_path); }
};

inline Process spawn_trainer(const std::vector<std::string>& args, const std::string& log_dir, const std::string& tag) {
  Process p;
  p.out_path = log_dir + "/" + tag + ".stdout";
  p.err_path = log_dir + "/" + tag + ".stderr";
  std::string bin = trainer_binary();
  std::vector<std::string> all = {bin};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, p.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int rc = posix_spawn(&p.pid, bin.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("posix_spawn " + bin + " failed");
  return p;
}

struct RunOutput {
  int rc = -1;
  std::string out, err;
};
inline RunOutput run_trainer(const std::vector<std::string>& args, const std::string& log_dir,
                             const std::string& tag = "run") {
  Process p = spawn_trainer(args, log_dir, tag);
  RunOutput r;
  r.rc = p.wait();
  r.out = p.out();
  r.err = p.err();
  return r;
}

// The records of one type ("train", "eval", "timers", ...) of a metrics.jsonl file, in order.
inline std::vector<nlohmann::json> records(const std::string& path, const std::string& type) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) {
      auto j = nlohmann::json::parse(line);
      if (j.value("type", "") == type) out.push_back(j);
    }
  return out;
}
inline std::vector<nlohmann::json> train_records(const std::string& path) { return records(path, "train"); }
inline size_t count_lines(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  size_t n = 0;
  while (std::getline(f, line)) n += !line.empty();
  return n;
}

}  // namespace lt::traintest
