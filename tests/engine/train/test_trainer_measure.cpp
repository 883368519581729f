// The trainer's measurement flags end to end on the CPU: --timers (table in the log, one
// "timers" line per timed step in metrics.jsonl, at the right steps), --timers-trace, the
// bench arm and bench-compare, --alloc-trace at the right steps, a bad --timers spec, and
// --kernel-trace's refusals where it cannot record (no --timers; the CPU; no CUPTI in the build).
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/launch.h"
#include "tests/engine/train/trainer_test_util.h"

namespace fs = std::filesystem;
using lt::traintest::read_text;
using lt::traintest::records;
using lt::traintest::run_trainer;
using lt::traintest::TempDir;
using lt::traintest::write_text;

namespace {

std::string tiny(const std::string& out, int64_t steps) {
  return R"({"description": "test: tiny KDA on MQAR", "out": ")" + out + R"(", "device": "cpu",
  "model": {"arch": "kda", "vocab_size": 32, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "head_dim": 16, "chunk": 16},
  "data": {"source": "synthetic", "task": "mqar", "mqar_pairs": 4, "prefetch": 1},
  "train": {"batch_size": 4, "seq_len": 32, "steps": )" +
         std::to_string(steps) + R"(, "eval_every": 0, "checkpoint_every": 0, "log_every": 1}})";
}

}  // namespace

TEST_CASE("trainer --timers step%2: timer lines at steps 0, 2, 4 with the model's stages; the trace has them",
          "[trainer][timers]") {
  TempDir tmp;
  const std::string out = tmp / "run", cfg = tmp / "c.json", trace = tmp / "trace.json";
  write_text(cfg, tiny(out, 5));
  auto r = run_trainer({"--config", cfg, "--timers", "step%2", "--timers-trace", trace}, tmp.path.string());
  INFO(r.err);
  if (!lt::stage_hooks_compiled()) {
    WARN("built with LINTRAIN_STAGE_TIMERS=OFF: checking that --timers is refused instead");
    CHECK(r.rc == 2);
    CHECK(r.err.find("LINTRAIN_STAGE_TIMERS=OFF") != std::string::npos);
    return;
  }
  REQUIRE(r.rc == 0);
  const auto t = records(out + "/metrics.jsonl", "timers");
  REQUIRE(t.size() == 3);
  CHECK(t[0]["step"] == 0);
  CHECK(t[0]["train_step"] == 1);
  CHECK(t[2]["step"] == 4);
  std::vector<std::string> stages;
  for (const auto& s : t[1]["stages"]) stages.push_back(s["stage"]);
  for (const char* want :
       {"data", "zero_grad", "fwd", "fwd/L0/attn/kda", "loss", "bwd", "bwd/L1/mlp", "optim/clip", "optim/adamw"}) {
    INFO(want);
    CHECK(std::find(stages.begin(), stages.end(), want) != stages.end());
  }
  CHECK(t[1]["fwd_ms"].get<double>() > 0.0);
  CHECK(t[1]["bwd_ms"].get<double>() > 0.0);
  CHECK(t[1]["optim_ms"].get<double>() > 0.0);
  CHECK(r.err.find("ms/step") != std::string::npos);
  const auto j = nlohmann::json::parse(read_text(trace));
  int fwd_slices = 0;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "fwd") ++fwd_slices;
  CHECK(fwd_slices == 3);
}

TEST_CASE("trainer --bench: warm-up excluded, the result JSON, bench-compare of two results", "[trainer][timers]") {
  TempDir tmp;
  const std::string out = tmp / "run", cfg = tmp / "c.json";
  write_text(cfg, tiny(out, 100));
  const std::string a = tmp / "a.json", b = tmp / "b.json";
  const bool stages = lt::stage_hooks_compiled();
  if (!stages) WARN("built with LINTRAIN_STAGE_TIMERS=OFF: the bench runs without --timers, no stage rows");
  for (const auto& path : {a, b}) {
    auto r = run_trainer({"--config", cfg, "--bench", "4", "--bench-warmup", "2", "--timers", stages ? "step%2" : "off",
                          "--bench-out", path},
                         tmp.path.string());
    INFO(r.err);
    REQUIRE(r.rc == 0);
  }
  const auto j = nlohmann::json::parse(read_text(a));
  CHECK(j["kind"] == "lintrain-bench");
  CHECK(j["steps"] == 4);
  CHECK(j["warmup_steps"] == 2);
  CHECK(j["ms_per_step"]["n"] == 4);
  if (stages) {
    CHECK(j["fwd_ms"]["n"] == 2);  // measured steps 0 and 2
    CHECK(j["stages"].contains("fwd/L0/attn/kda"));
  }
  CHECK(j["memory"]["device_mallocs_after_step1"] == 0);
  CHECK(j["tokens_per_s"].get<double>() > 0.0);
  // 2 + 4 steps ran, nothing was checkpointed, and the run's own folder was not touched.
  CHECK_FALSE(fs::exists(out + "/step-00000006"));
  CHECK(lt::traintest::train_records(out + "/bench/metrics.jsonl").size() == 6);
  auto cmp = run_trainer({"bench-compare", a, b}, tmp.path.string(), "cmp");
  INFO(cmp.err);
  REQUIRE(cmp.rc == 0);
  CHECK(cmp.out.find("B/A") != std::string::npos);
  if (stages) CHECK(cmp.out.find("fwd/L0/attn/kda") != std::string::npos);
  write_text(tmp / "not_bench.json", "{\"x\": 1}");
  auto bad = run_trainer({"bench-compare", a, tmp / "not_bench.json"}, tmp.path.string(), "bad");
  CHECK(bad.rc == 2);
  CHECK(bad.err.find("not_bench.json") != std::string::npos);
}

TEST_CASE("trainer --alloc-trace: snapshot, pickle and Chrome trace of the first steps, tagged with steps and stages",
          "[trainer][timers]") {
  TempDir tmp;
  const std::string out = tmp / "run", cfg = tmp / "c.json", trace = tmp / "alloc.json";
  write_text(cfg, tiny(out, 4));
  auto r = run_trainer({"--config", cfg, "--alloc-trace", trace, "--alloc-trace-steps", "2"}, tmp.path.string());
  INFO(r.err);
  REQUIRE(r.rc == 0);
  REQUIRE(fs::exists(trace));
  CHECK(fs::exists(tmp / "alloc.pickle"));
  CHECK(fs::exists(tmp / "alloc.trace.json"));
  CHECK(r.err.find("allocator: ") != std::string::npos);
  CHECK(r.err.find("(0 after step 1)") != std::string::npos);
  const std::string text = read_text(trace);
  CHECK(text.find("fwd/L0") != std::string::npos);  // events carry their stage
  const auto j = nlohmann::json::parse(text);
  CHECK(j.contains("segments"));
  // --alloc-snapshot-at alone: one snapshot after that step, in the run's folder.
  const std::string out2 = tmp / "run2";
  write_text(tmp / "c2.json", tiny(out2, 3));
  auto r2 = run_trainer({"--config", tmp / "c2.json", "--alloc-snapshot-at", "2"}, tmp.path.string(), "snap");
  INFO(r2.err);
  REQUIRE(r2.rc == 0);
  REQUIRE(fs::exists(out2 + "/alloc_snapshot_step2.json"));
  CHECK(nlohmann::json::parse(read_text(out2 + "/alloc_snapshot_step2.json")).contains("segments"));
}

TEST_CASE("trainer: a bad --timers spec exits 2 showing the grammar and writes nothing", "[trainer][timers]") {
  TempDir tmp;
  const std::string out = tmp / "run", cfg = tmp / "c.json";
  write_text(cfg, tiny(out, 2));
  auto r = run_trainer({"--config", cfg, "--timers", "step%0"}, tmp.path.string());
  CHECK(r.rc == 2);
  CHECK(r.err.find("off | all | step%N | step=N | step=A..B") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("trainer --kernel-trace: refused without --timers, and on the CPU or without CUPTI, naming why",
          "[trainer][timers]") {
  TempDir tmp;
  const std::string out = tmp / "run", cfg = tmp / "c.json", k = tmp / "k.jsonl";
  write_text(cfg, tiny(out, 2));
  auto r = run_trainer({"--config", cfg, "--kernel-trace", k}, tmp.path.string(), "no_timers");
  CHECK(r.rc == 2);
  CHECK(r.err.find("--kernel-trace '" + k + "' records the timed steps: add --timers") != std::string::npos);
  if (!lt::stage_hooks_compiled()) {
    WARN("built with LINTRAIN_STAGE_TIMERS=OFF: --timers itself is refused");
    return;
  }
  auto cpu = run_trainer({"--config", cfg, "--timers", "all", "--kernel-trace", k}, tmp.path.string(), "cpu");
  INFO(cpu.err);
  CHECK(cpu.rc == 2);
  // A build without cupti.h says so first; one with it refuses the CPU run.
  const bool no_cupti = cpu.err.find("this build has no CUPTI recorder") != std::string::npos;
  const bool on_cpu = cpu.err.find("--kernel-trace records CUDA kernels; this run is on cpu") != std::string::npos;
  CHECK((no_cupti || on_cpu));
  CHECK_FALSE(fs::exists(out));
  CHECK_FALSE(fs::exists(k));
}
