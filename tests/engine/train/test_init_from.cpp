// train.init_from / --init-from: a run started from an exported model trains from exactly those
// weights (its trajectory dump's initial weights are the export's, bit for bit, and its first
// loss is the exported model's loss on that batch); a folder of another model, or no model,
// exits 2 naming the keys and writes nothing.
#include <catch2/catch.hpp>

#include <cstring>

#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/train/config.h"
#include "tests/engine/train/trainer_test_util.h"

namespace fs = std::filesystem;
using lt::traintest::read_text;
using lt::traintest::run_trainer;
using lt::traintest::TempDir;
using lt::traintest::write_text;

namespace {

std::string config(const std::string& out, int64_t hidden, int64_t steps, uint64_t seed) {
  return R"({
  "out": ")" +
         out + R"(",
  "device": "cpu",
  "model": {"arch": "kda", "vocab_size": 32, "hidden_size": )" +
         std::to_string(hidden) + R"(, "num_layers": 2, "num_heads": 2, "head_dim": 16, "chunk": 16},
  "data": {"source": "synthetic", "task": "mqar", "mqar_pairs": 4, "prefetch": 1},
  "train": {"batch_size": 4, "seq_len": 32, "steps": )" +
         std::to_string(steps) + R"(, "lr": 3e-3, "warmup_steps": 2, "seed": )" + std::to_string(seed) +
         R"(, "eval_every": 0, "checkpoint_every": 0, "log_every": 1}
})";
}

bool same_bytes(const lt::Tensor& a, const lt::Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.contiguous().data<float>(), b.contiguous().data<float>(),
                     static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("trainer: --init-from an exported model starts from its weights exactly", "[trainer][init_from]") {
  TempDir tmp;
  write_text(tmp / "a.json", config(tmp / "a", 32, 4, 11));
  auto r = run_trainer({"--config", tmp / "a.json"}, tmp.path.string(), "a");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  r = run_trainer({"export", "--checkpoint", tmp / "a/step-00000004", "--out", tmp / "export"}, tmp.path.string(),
                  "export");
  REQUIRE(r.rc == 0);

  // Another seed: without init_from the weights would differ.
  write_text(tmp / "b.json", config(tmp / "b", 32, 1, 99));
  r = run_trainer({"--config", tmp / "b.json", "--init-from", tmp / "export", "--dump-trajectory", tmp / "dump"},
                  tmp.path.string(), "b");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.err.find("initial weights from") != std::string::npos);
  const lt::io::SafetensorsFile ex = lt::io::read_safetensors(tmp / "export/model.safetensors");
  const lt::io::SafetensorsFile init = lt::io::read_safetensors(tmp / "dump/init.safetensors");
  REQUIRE(ex.names.size() == init.names.size());
  for (const auto& n : ex.names) {
    CAPTURE(n);
    CHECK(same_bytes(ex.get(n), init.get(n)));
  }
  // The first step's loss is the exported model's loss on that step's batch.
  const lt::train::RunConfig rc = lt::train::config_resolve(nlohmann::ordered_json::parse(read_text(tmp / "b.json")));
  lt::model::Model m(rc.model, lt::Device::cpu());
  m.load_params(ex);
  const lt::io::SafetensorsFile batch = lt::io::read_safetensors(tmp / "dump/batches.safetensors");
  const lt::Tensor tok = batch.get("tokens").view({4, 32}), tgt = batch.get("targets").view({4, 32});
  int64_t valid = 0;
  for (double t : tgt.to_vector()) valid += t != -100 ? 1 : 0;
  lt::Tensor loss = lt::Tensor::zeros({}, lt::DType::f32, lt::Device::cpu());
  m.zero_grad();
  m.forward_backward(tok, tgt, 1.0 / static_cast<double>(valid), loss);
  const auto first = nlohmann::json::parse(
      read_text(tmp / "dump/steps.jsonl").substr(0, read_text(tmp / "dump/steps.jsonl").find('\n')));
  CHECK(first["loss"].get<double>() == loss.item());
  // The run's config records where the weights came from.
  CHECK(nlohmann::json::parse(read_text(tmp / "b/config.json"))["train"]["init_from"] == tmp / "export");
}

TEST_CASE("trainer: --init-from a folder of another model or of no model exits 2 naming the keys, writing nothing",
          "[trainer][init_from][cli]") {
  TempDir tmp;
  write_text(tmp / "a.json", config(tmp / "a", 32, 2, 11));
  REQUIRE(run_trainer({"--config", tmp / "a.json"}, tmp.path.string(), "a").rc == 0);
  REQUIRE(run_trainer({"export", "--checkpoint", tmp / "a/step-00000002", "--out", tmp / "export"}, tmp.path.string(),
                      "export")
              .rc == 0);

  write_text(tmp / "wide.json", config(tmp / "wide", 64, 1, 11));  // hidden 64, vocab as before
  auto r = run_trainer({"--config", tmp / "wide.json", "--init-from", tmp / "export"}, tmp.path.string(), "wide");
  CHECK(r.rc == 2);
  CHECK(r.err.find("train.init_from") != std::string::npos);
  CHECK(r.err.find("model.hidden_size is 64, the folder's hidden_size is 32") != std::string::npos);
  CHECK(!fs::exists(tmp / "wide"));

  // A config.json that says hidden 64 over weights of hidden 32: the shapes catch it.
  fs::create_directories(tmp / "lying");
  fs::copy_file(tmp / "export/model.safetensors", tmp / "lying/model.safetensors");
  auto cfg = nlohmann::json::parse(read_text(tmp / "export/config.json"));
  cfg["hidden_size"] = 64;
  write_text(tmp / "lying/config.json", cfg.dump());
  r = run_trainer({"--config", tmp / "wide.json", "--init-from", tmp / "lying"}, tmp.path.string(), "lying");
  CHECK(r.rc == 2);
  CHECK(r.err.find("shape") != std::string::npos);
  CHECK(!fs::exists(tmp / "wide"));

  fs::create_directories(tmp / "empty");
  r = run_trainer({"--config", tmp / "a.json", "--out", tmp / "c", "--init-from", tmp / "empty"}, tmp.path.string(),
                  "empty");
  CHECK(r.rc == 2);
  CHECK(r.err.find("no config.json") != std::string::npos);
  r = run_trainer({"--config", tmp / "a.json", "--out", tmp / "c", "--init-from", tmp / "absent"}, tmp.path.string(),
                  "absent");
  CHECK(r.rc == 2);
  CHECK(r.err.find("train.init_from") != std::string::npos);
  CHECK(!fs::exists(tmp / "c"));
}
