#include "engine/train/resume.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "engine/train/config.h"

namespace lt::train {
namespace fs = std::filesystem;
namespace {

uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}
double bits_double(uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}

}  // namespace

std::optional<Checkpoint> find_resume_checkpoint(const std::string& resume, const std::string& out_dir) {
  std::optional<Checkpoint> found;
  if (resume != "auto" && resume != "none") {
    if (!fs::is_directory(resume)) throw ConfigError("--resume '" + resume + "': no such checkpoint folder");
    try {
      found = checkpoint_load(resume);
    } catch (const std::exception& e) { throw ConfigError(std::string("--resume: ") + e.what()); }
  } else if (resume == "auto") {
    if (auto dir = checkpoint_find_latest(out_dir)) {
      try {
        found = checkpoint_load(*dir);
      } catch (const std::exception& e) { throw ConfigError(std::string("--resume auto: ") + e.what()); }
    } else if (!checkpoint_list(out_dir).empty()) {
      spdlog::warn("no checkpoint in {} verifies: starting from scratch", out_dir);
    }
  }
  return found;
}

void check_resume_fits(const Checkpoint& ck, const nlohmann::ordered_json& effective) {
  std::vector<std::string> broken, changed;
  const auto& shape_keys = config_shape_keys();
  for (const auto& k : config_diff(ck.config, effective)) {
    if (std::find(shape_keys.begin(), shape_keys.end(), k) != shape_keys.end()) broken.push_back(k);
    else changed.push_back(k);
  }
  if (!broken.empty()) {
    std::string msg = "checkpoint " + ck.dir + " does not fit this config: ";
    for (size_t i = 0; i < broken.size(); ++i) {
      const auto* was = config_get(ck.config, broken[i]);
      msg += (i ? ", " : "") + broken[i] + " was " + (was ? was->dump() : "absent") + ", now " +
             config_get(effective, broken[i])->dump();
    }
    throw ConfigError(msg + " (use --out for a new run, or --resume none to start over)");
  }
  if (!changed.empty()) {
    std::string list;
    for (const auto& k : changed) list += (list.empty() ? "" : ", ") + k;
    spdlog::warn("resuming with a config that differs from the checkpoint's in: {}", list);
  }
}

nlohmann::json LoopState::to_json() const {
  nlohmann::json s;
  s["step"] = step;
  s["applied"] = applied;
  s["skipped"] = skipped;
  s["consecutive_skips"] = consecutive;
  s["loss_window"] = nlohmann::json::array();
  for (double x : window) s["loss_window"].push_back(double_bits(x));
  s["data"] = data;
  s["seed"] = seed;
  return s;
}

LoopState LoopState::from_json(const nlohmann::json& s) {
  LoopState l;
  l.step = s.at("step").get<int64_t>();
  l.applied = s.at("applied").get<int64_t>();
  l.skipped = s.at("skipped").get<int64_t>();
  l.consecutive = s.at("consecutive_skips").get<int64_t>();
  for (const auto& b : s.at("loss_window")) l.window.push_back(bits_double(b.get<uint64_t>()));
  l.data = s.at("data");
  l.seed = s.value("seed", uint64_t{0});
  return l;
}

void metrics_truncate(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::ostringstream kept;
  std::string line;
  while (std::getline(in, line)) {
    try {
      auto j = nlohmann::json::parse(line);
      if (j.value("step", int64_t{0}) <= step) kept << line << "\n";
    } catch (const std::exception&) {}
  }
  in.close();
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept.str();
  }
  fs::rename(tmp, path);
}

// Offset of a parameter's view inside the parameter arena (arena order = spec order).
namespace {

int64_t arena_offset(model::Model& m, const std::string& name) {
  return m.param(name).offset() - m.arenas().params.offset();
}

}  // namespace

std::vector<io::NamedTensor> moment_tensors(model::Model& m, const Tensor& m_full, const Tensor& v_full) {
  std::vector<io::NamedTensor> out;
  for (const auto& s : m.specs()) {
    int64_t off = arena_offset(m, s.name);
    int64_t n = shape_numel(s.shape);
    out.push_back({"m." + s.name, m_full.narrow(0, off, n).view(s.shape)});
    out.push_back({"v." + s.name, v_full.narrow(0, off, n).view(s.shape)});
  }
  return out;
}

void load_moments(model::Model& m, const io::SafetensorsFile& f, Tensor& m_full, Tensor& v_full) {
  for (const auto& s : m.specs()) {
    int64_t off = arena_offset(m, s.name);
    int64_t n = shape_numel(s.shape);
    for (const char* which : {"m.", "v."}) {
      Tensor src = f.get(which + s.name);
      if (src.shape() != s.shape)
        throw std::runtime_error("checkpoint state '" + f.path + "': " + which + s.name + " has shape " +
                                 shape_str(src.shape()) + ", the model wants " + shape_str(s.shape));
      Tensor dst = (which[0] == 'm' ? m_full : v_full).narrow(0, off, n).view(s.shape);
      dst.copy_(src);
    }
  }
}

}  // namespace lt::train
