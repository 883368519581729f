// The fp64 mode and the trajectory dump (engine/train/trajectory.h): the trainer's run in
// float64 on the CPU equals, bit for bit, the model + AdamW replayed by hand on the dumped
// initial weights and batches; the dump's files hold what scripts/fla_trajectory.py reads; an
// fp64 run on CUDA and an unwritable dump folder are bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/optim/adamw.h"
#include "engine/optim/schedule.h"
#include "engine/train/config.h"
#include "tests/engine/train/trainer_test_util.h"

namespace fs = std::filesystem;
using lt::traintest::read_text;
using lt::traintest::run_trainer;
using lt::traintest::TempDir;
using lt::traintest::write_text;

namespace {

std::string fp64_config(const std::string& out, const std::string& arch) {
  return R"({
  "out": ")" +
         out + R"(",
  "device": "cpu",
  "model": {"arch": ")" +
         arch +
         R"(", "vocab_size": 32, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "head_dim": 16,
            "chunk": 16, "precision": "fp64"},
  "data": {"source": "synthetic", "task": "mqar", "mqar_pairs": 4, "prefetch": 1},
  "train": {"batch_size": 4, "seq_len": 32, "steps": 6, "lr": 3e-3, "warmup_steps": 2, "weight_decay": 0.1,
            "max_grad_norm": 0.5, "seed": 5, "eval_every": 0, "checkpoint_every": 0, "log_every": 1}
})";
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream is(read_text(path));
  for (std::string line; std::getline(is, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

bool same_bits(const lt::Tensor& a, const lt::Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const lt::Tensor ac = a.contiguous().to(lt::Device::cpu()), bc = b.contiguous().to(lt::Device::cpu());
  return std::memcmp(ac.data<double>(), bc.data<double>(), static_cast<size_t>(ac.numel()) * sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("trainer: an fp64 run equals model + AdamW replayed on its dumped weights and batches, bit for bit",
          "[trainer][trajectory]") {
  const std::string arch = GENERATE(std::string("kda"), std::string("rwkv6"));
  CAPTURE(arch);
  TempDir tmp;
  write_text(tmp / "c.json", fp64_config(tmp / "run", arch));
  auto r = run_trainer({"--config", tmp / "c.json", "--dump-trajectory", tmp / "dump"}, tmp.path.string());
  INFO(r.err);
  REQUIRE(r.rc == 0);
  for (const char* f : {"config.json", "run.json", "decay.json", "init.safetensors", "batches.safetensors"})
    REQUIRE(fs::exists(tmp / ("dump/" + std::string(f))));

  const lt::train::RunConfig rc = lt::train::config_resolve(nlohmann::ordered_json::parse(read_text(tmp / "c.json")));
  const auto results = read_lines(tmp / "dump/steps.jsonl");
  REQUIRE(results.size() == 6);
  const lt::io::SafetensorsFile batches = lt::io::read_safetensors(tmp / "dump/batches.safetensors");
  const lt::Tensor tokens = batches.get("tokens"), targets = batches.get("targets");
  REQUIRE(tokens.shape() == lt::Shape{6, 1, 4, 32});
  REQUIRE(batches.get("steps").to_vector() == std::vector<double>{1, 2, 3, 4, 5, 6});
  const nlohmann::json decay = nlohmann::json::parse(read_text(tmp / "dump/decay.json"));
  REQUIRE(!decay["decay"].empty());
  REQUIRE(!decay["no_decay"].empty());

  // The replay: the model from the dumped weights, AdamW at the schedule's lr, t = step.
  lt::model::Model m(rc.model, lt::Device::cpu());
  REQUIRE(m.arenas().params.dtype() == lt::DType::f64);
  m.load_params(lt::io::read_safetensors(tmp / "dump/init.safetensors"));
  lt::Tensor skipped = lt::Tensor::zeros({}, lt::DType::i32, lt::Device::cpu());
  for (int64_t s = 0; s < 6; ++s) {
    const lt::Tensor tok = tokens.narrow(0, s, 1).view({4, 32}).contiguous();
    const lt::Tensor tgt = targets.narrow(0, s, 1).view({4, 32}).contiguous();
    int64_t valid = 0;
    for (double t : tgt.to_vector()) valid += t != -100 ? 1 : 0;
    lt::Tensor loss = lt::Tensor::zeros({}, lt::DType::f64, lt::Device::cpu());
    m.zero_grad();
    m.forward_backward(tok, tgt, 1.0 / static_cast<double>(valid), loss);
    const lt::Tensor norm = lt::optim::grad_norm(m.arenas().grads);
    const double lr = lt::optim::lr_at(rc.train.schedule, s);
    CAPTURE(s);
    CHECK(results[static_cast<size_t>(s)]["step"].get<int64_t>() == s + 1);
    CHECK(results[static_cast<size_t>(s)]["lr"].get<double>() == lr);
    CHECK(results[static_cast<size_t>(s)]["loss"].get<double>() == loss.item());
    CHECK(results[static_cast<size_t>(s)]["grad_norm"].get<double>() == norm.item());
    lt::optim::adamw_step(m.arenas(), rc.train.adamw, lr, s + 1, norm, skipped);
  }
  // The run's last checkpoint holds the same weights and moments, bit for bit.
  const lt::io::SafetensorsFile ck = lt::io::read_safetensors(tmp / "run/step-00000006/model.safetensors");
  const lt::io::SafetensorsFile st = lt::io::read_safetensors(tmp / "run/step-00000006/state.safetensors");
  for (const auto& p : m.named_params()) {
    CAPTURE(p.name);
    CHECK(same_bits(ck.get(p.name), p.tensor));
  }
  CHECK(same_bits(st.get("m.model.norm.weight"),
                  m.arenas()
                      .m.narrow(0, m.param_range("model.norm.weight").offset, m.param_range("model.norm.weight").count)
                      .view(m.param("model.norm.weight").shape())));
}

TEST_CASE("trainer: fp64 on CUDA and an unwritable --dump-trajectory exit 2 naming the problem, writing nothing",
          "[trainer][trajectory][cli]") {
  TempDir tmp;
  write_text(tmp / "c.json", fp64_config(tmp / "run", "kda"));
  auto r = run_trainer({"--config", tmp / "c.json", "--device", "cuda"}, tmp.path.string(), "cuda");
  CHECK(r.rc == 2);
  // Without CUDA the device key itself is refused; with it, the precision key.
  CHECK((r.err.find("model.precision") != std::string::npos || r.err.find("CUDA is not usable") != std::string::npos));
  write_text(tmp / "blocker", "a file where the dump folder would go");
  r = run_trainer({"--config", tmp / "c.json", "--dump-trajectory", tmp / "blocker/dump"}, tmp.path.string(), "dump");
  CHECK(r.rc == 2);
  CHECK(r.err.find("--dump-trajectory") != std::string::npos);
  CHECK(r.err.find("blocker/dump") != std::string::npos);
  CHECK(!fs::exists(tmp / "run/config.json"));  // nothing written
}
