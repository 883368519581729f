// trainer --kernel-trace on CUDA: the tiny KDA model with --timers step%2 records CUPTI's
// kernels of the timed steps, each tagged with the stages it ran inside, and
// scripts/timer_fidelity.py reads the file with the run's metrics.jsonl.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/train/kernel_trace.h"
#include "kernels/launch.h"
#include "tests/engine/train/trainer_test_util.h"

using lt::traintest::read_text;
using lt::traintest::run_trainer;
using lt::traintest::TempDir;
using lt::traintest::write_text;

TEST_CASE("trainer cuda --kernel-trace: kernels of the timed steps, tagged with their stages",
          "[trainer][timers][cuda]") {
  if (!lt::stage_hooks_compiled() || !lt::train::KernelRecorder::compiled()) {
    WARN("skipped: this build has no stage hooks or no CUPTI recorder");
    return;
  }
  TempDir tmp;
  const std::string out = tmp / "run", cfg = tmp / "c.json", k = tmp / "k.jsonl";
  write_text(cfg, R"({"description": "test: tiny KDA on MQAR", "out": ")" + out + R"(", "device": "cuda:0",
  "model": {"arch": "kda", "vocab_size": 32, "hidden_size": 64, "num_layers": 2, "num_heads": 2, "head_dim": 32, "chunk": 16},
  "data": {"source": "synthetic", "task": "mqar", "mqar_pairs": 4, "prefetch": 1},
  "train": {"batch_size": 4, "seq_len": 64, "steps": 4, "eval_every": 0, "checkpoint_every": 0, "log_every": 1}})");
  auto r = run_trainer({"--config", cfg, "--timers", "step%2", "--kernel-trace", k}, tmp.path.string());
  INFO(r.err);
  if (r.rc != 0 && r.err.find("cannot load libcupti") != std::string::npos) {
    WARN("skipped: libcupti is not on this machine (set LINTRAIN_CUPTI_LIB)");
    return;
  }
  REQUIRE(r.rc == 0);
  std::vector<nlohmann::json> lines;
  std::ifstream f(k);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 2);  // steps 0 and 2
  CHECK(lines[0]["step"] == 0);
  CHECK(lines[1]["step"] == 2);
  for (const auto& l : lines) {
    CHECK(l["kind"] == "kernel-trace");
    CHECK(l["dropped"] == 0);
    REQUIRE(l["kernels"].size() > 10);
    std::set<std::string> top;
    int64_t previous_start = 0;
    for (const auto& kr : l["kernels"]) {
      CHECK(kr["end_ns"].get<int64_t>() > kr["start_ns"].get<int64_t>());
      CHECK(kr["start_ns"].get<int64_t>() >= previous_start);
      previous_start = kr["start_ns"];
      if (!kr["stages"].empty()) {
        CHECK(kr["stage"] == kr["stages"].back());
        top.insert(kr["stages"][0].get<std::string>());
      }
    }
    // The step's model work runs inside the stages the timers name.
    CHECK(top.count("fwd") == 1);
    CHECK(top.count("bwd") == 1);
    CHECK(top.count("optim/adamw") + top.count("optim") >= 1);
  }
  if (std::system("python3 --version > /dev/null 2>&1") != 0) {
    WARN("python3 absent: the script part is skipped");
    return;
  }
  const std::string script = (lt::traintest::source_dir() / "scripts" / "timer_fidelity.py").string();
  const std::string report = tmp / "fidelity.txt";
  const int rc = std::system(
      ("python3 " + script + " --trace " + k + " --metrics " + out + "/metrics.jsonl > " + report + " 2>&1").c_str());
  const std::string text = read_text(report);
  INFO(text);
  CHECK(WEXITSTATUS(rc) <= 1);  // 0: every check passes; 1: some do not (a finding, not an error)
  CHECK(text.find("verdict: ") != std::string::npos);
  CHECK(text.find("  fwd ") != std::string::npos);
  // Every stage's launch count (the atlas) equals CUPTI's kernels less cuBLAS's split-K
  // reductions (the table's last column).
  std::istringstream rows(text);
  int stage_rows = 0, step_rows = 0;
  for (std::string line; std::getline(rows, line);) {
    if (line.rfind("  step: event", 0) == 0) {
      ++step_rows;
    } else if (line.rfind("  ", 0) == 0 && line.find(" ms") == std::string::npos && line.rfind("  step:", 0) != 0 &&
               line.find("stage ") == std::string::npos) {
      ++stage_rows;
      INFO(line);
      CHECK(line.substr(line.find_last_not_of(' ') - 1) == "ok");
    }
  }
  CHECK(step_rows == 2);
  CHECK(stage_rows > 10);

  // Without the kernel trace (CUPTI's host work at every launch shows between the stages of a
  // host-bound model like this one), each timed step's top-level stages add up to its event
  // time within 2 %: the host work of a step happens inside named stages.
  const std::string out2 = tmp / "run2";
  auto r2 = run_trainer({"--config", cfg, "--timers", "step%2", "--out", out2}, tmp.path.string());
  INFO(r2.err);
  REQUIRE(r2.rc == 0);
  int timed = 0;
  std::istringstream metrics(read_text(out2 + "/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("type", "") != "timers") continue;
    ++timed;
    double top = 0.0;
    for (const auto& st : j["stages"])
      if (st["depth"] == 0 && st["stage"] != "(outside stages)") top += st["ms"].get<double>();
    const double step_ms = j["step_ms"].get<double>();
    INFO("timed step " << j["step"] << ": step " << step_ms << " ms, top-level stages " << top << " ms");
    CHECK(std::abs(step_ms - top) <= 0.02 * step_ms);
  }
  CHECK(timed == 2);
}
