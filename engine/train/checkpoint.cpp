#include "engine/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace lt::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFiles[] = {"model.safetensors", "state.safetensors"};

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw std::runtime_error("checkpoint: cannot open '" + path + "' to fsync it");
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error("checkpoint: fsync of '" + path + "' failed");
}

void write_file_synced(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("checkpoint: cannot create '" + path + "'");
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      throw std::runtime_error("checkpoint: write to '" + path + "' failed (disk full?)");
    }
    done += static_cast<size_t>(n);
  }
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error("checkpoint: fsync of '" + path + "' failed");
}

int64_t step_of(const std::string& name) {
  // "step-00001000" -> 1000; -1 when the name is not a step folder.
  if (name.size() != 13 || name.compare(0, 5, "step-") != 0) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

uint64_t file_fnv1a64(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read '" + path + "'");
  uint64_t h = 0xcbf29ce484222325ull;
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    std::streamsize n = f.gcount();
    for (std::streamsize i = 0; i < n; ++i) {
      h ^= static_cast<uint8_t>(buf[static_cast<size_t>(i)]);
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

std::string checkpoint_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string checkpoint_write(const std::string& out_dir, int64_t step, const std::vector<io::NamedTensor>& weights,
                             const std::vector<io::NamedTensor>& state_tensors, const nlohmann::json& state,
                             const std::string& config_json, int64_t keep) {
  const std::string name = checkpoint_dir_name(step);
  const std::string final_dir = (fs::path(out_dir) / name).string();
  const std::string tmp_dir = (fs::path(out_dir) / ("." + name + ".tmp." + std::to_string(::getpid()))).string();
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) throw std::runtime_error("checkpoint: cannot create '" + tmp_dir + "': " + ec.message());

  const std::map<std::string, std::string> meta = {
      {"lintrain_state", state.dump()}, {"lintrain_config", config_json}, {"format", "pt"}};
  io::write_safetensors(tmp_dir + "/model.safetensors", weights, {{"format", "pt"}});
  io::write_safetensors(tmp_dir + "/state.safetensors", state_tensors, meta);

  nlohmann::ordered_json manifest;
  manifest["step"] = step;
  for (const char* f : kFiles) {
    std::string p = tmp_dir + "/" + f;
    fsync_path(p, false);
    manifest["files"][f] = {{"bytes", static_cast<int64_t>(fs::file_size(p))}, {"fnv1a64", hex64(file_fnv1a64(p))}};
  }
  write_file_synced(tmp_dir + "/manifest.json", manifest.dump(2) + "\n");
  fsync_path(tmp_dir, true);

  // Replace a folder of the same step (a resumed run writing a step again): move it aside
  // first so the rename below never meets a non-empty target.
  if (fs::exists(final_dir)) {
    std::string old = final_dir + ".old." + std::to_string(::getpid());
    fs::rename(final_dir, old);
    fs::remove_all(old, ec);
  }
  fs::rename(tmp_dir, final_dir);
  fsync_path(out_dir, true);

  auto all = checkpoint_list(out_dir);
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 1)); i < all.size(); ++i) fs::remove_all(all[i], ec);
  return final_dir;
}

std::string checkpoint_verify(const std::string& dir) {
  const std::string mpath = dir + "/manifest.json";
  std::ifstream f(mpath);
  if (!f) return "manifest.json is missing";
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(f);
  } catch (const std::exception& e) { return std::string("manifest.json is not valid JSON (") + e.what() + ")"; }
  if (!manifest.contains("files") || !manifest["files"].is_object()) return "manifest.json lists no files";
  for (const char* name : kFiles) {
    if (!manifest["files"].contains(name)) return std::string("manifest.json does not list ") + name;
    const auto& entry = manifest["files"][name];
    std::string p = dir + "/" + name;
    std::error_code ec;
    auto size = fs::file_size(p, ec);
    if (ec) return std::string(name) + " is missing";
    int64_t want = entry.value("bytes", int64_t{-1});
    if (static_cast<int64_t>(size) != want)
      return std::string(name) + " has " + std::to_string(size) + " bytes, the manifest says " + std::to_string(want) +
             " (truncated or rewritten)";
    std::string sum = hex64(file_fnv1a64(p));
    if (sum != entry.value("fnv1a64", std::string()))
      return std::string(name) + " checksum " + sum + " does not match the manifest's " +
             entry.value("fnv1a64", std::string()) + " (corrupted)";
  }
  return "";
}

Checkpoint checkpoint_load(const std::string& dir) {
  std::string problem = checkpoint_verify(dir);
  if (!problem.empty()) throw std::runtime_error("checkpoint '" + dir + "' does not verify: " + problem);
  Checkpoint c;
  c.dir = dir;
  c.model = io::read_safetensors(dir + "/model.safetensors");
  c.state = io::read_safetensors(dir + "/state.safetensors");
  auto it = c.state.metadata.find("lintrain_state");
  auto ic = c.state.metadata.find("lintrain_config");
  if (it == c.state.metadata.end() || ic == c.state.metadata.end())
    throw std::runtime_error("checkpoint '" + dir +
                             "': state.safetensors lacks the lintrain_state / lintrain_config metadata");
  try {
    c.loop_state = nlohmann::json::parse(it->second);
    c.config = nlohmann::ordered_json::parse(ic->second);
  } catch (const std::exception& e) {
    throw std::runtime_error("checkpoint '" + dir + "': state metadata is not valid JSON (" + e.what() + ")");
  }
  c.step = c.loop_state.value("step", int64_t{0});
  return c;
}

std::vector<std::string> checkpoint_list(const std::string& out_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(out_dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    if (!entry.is_directory()) continue;
    int64_t s = step_of(entry.path().filename().string());
    if (s >= 0) found.emplace_back(s, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::optional<std::string> checkpoint_find_latest(const std::string& out_dir) {
  for (const auto& dir : checkpoint_list(out_dir)) {
    std::string problem = checkpoint_verify(dir);
    if (problem.empty()) return dir;
    spdlog::warn("checkpoint {} skipped: {}", dir, problem);
  }
  return std::nullopt;
}

}  // namespace lt::train
