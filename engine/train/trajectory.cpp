#include "engine/train/trajectory.h"

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"

namespace lt::train {
namespace fs = std::filesystem;

namespace {

void write_json(const fs::path& path, const nlohmann::json& j) {
  std::ofstream f(path, std::ios::trunc);
  f << j.dump(2) << "\n";
  if (!f) throw std::runtime_error("--dump-trajectory: cannot write '" + path.string() + "'");
}

}  // namespace

TrajectoryDump::TrajectoryDump(const std::string& dir, const RunConfig& rc)
    : dir_(dir), A_(rc.train.grad_accum), B_(rc.train.batch_size), T_(rc.train.seq_len) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  const fs::path probe = fs::path(dir_) / "steps.jsonl";
  results_.open(probe, std::ios::trunc);
  if (ec || !results_)
    throw ConfigError("--dump-trajectory '" + dir_ + "': folder cannot be written" +
                      (ec ? " (" + ec.message() + ")" : ""));
}

void TrajectoryDump::start(const model::Model& m, const RunConfig& rc) {
  write_json(fs::path(dir_) / "config.json", m.fla_config());
  write_json(fs::path(dir_) / "run.json", rc.effective);
  nlohmann::json decay = {{"decay", nlohmann::json::array()}, {"no_decay", nlohmann::json::array()}};
  for (const auto& s : m.specs()) decay[s.decay ? "decay" : "no_decay"].push_back(s.name);
  write_json(fs::path(dir_) / "decay.json", decay);
  io::write_safetensors((fs::path(dir_) / "init.safetensors").string(), m.named_params());
}

void TrajectoryDump::add_batches(int64_t step, const std::vector<data::Batch>& batches) {
  if (static_cast<int64_t>(batches.size()) != A_)
    throw std::logic_error("TrajectoryDump: step " + std::to_string(step) + " has " + std::to_string(batches.size()) +
                           " micro-batches, train.grad_accum is " + std::to_string(A_));
  steps_.push_back(step);
  for (const auto& b : batches) {
    if (b.B != B_ || b.T != T_) throw std::logic_error("TrajectoryDump: a micro-batch is not [B, T]");
    const size_t n = static_cast<size_t>(B_ * T_);
    tokens_.insert(tokens_.end(), b.token_data(), b.token_data() + n);
    targets_.insert(targets_.end(), b.target_data(), b.target_data() + n);
  }
}

void TrajectoryDump::add_result(int64_t step, double lr, double loss, double grad_norm, bool skipped) {
  nlohmann::ordered_json j;
  j["step"] = step;
  j["lr"] = lr;
  j["loss"] = loss;
  j["grad_norm"] = grad_norm;
  j["skipped"] = skipped;
  results_ << j.dump() << "\n";
  results_.flush();
}

void TrajectoryDump::finish() {
  const auto S = static_cast<int64_t>(steps_.size());
  Tensor tokens = Tensor::empty({S, A_, B_, T_}, DType::i32, Device::cpu());
  Tensor targets = Tensor::empty({S, A_, B_, T_}, DType::i32, Device::cpu());
  Tensor steps = Tensor::empty({S}, DType::i64, Device::cpu());
  if (S > 0) {
    std::memcpy(tokens.data<int32_t>(), tokens_.data(), tokens_.size() * sizeof(int32_t));
    std::memcpy(targets.data<int32_t>(), targets_.data(), targets_.size() * sizeof(int32_t));
    std::memcpy(steps.data<int64_t>(), steps_.data(), steps_.size() * sizeof(int64_t));
  }
  io::write_safetensors((fs::path(dir_) / "batches.safetensors").string(),
                        {{"tokens", tokens}, {"targets", targets}, {"steps", steps}});
}

}  // namespace lt::train
