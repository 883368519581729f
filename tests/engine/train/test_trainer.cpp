// The trainer binary end to end on the CPU (run as a subprocess): bad inputs exit 2 and
// write nothing; a tiny MQAR run learns; kill -9 + `--resume auto` reproduces the
// uninterrupted loss trajectory bit for bit; a truncated newest checkpoint is skipped;
// SIGTERM writes a checkpoint and exits 0; export round-trips.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <thread>

#include "engine/io/safetensors.h"
#include "engine/train/loop.h"
#include "tests/engine/train/trainer_test_util.h"

namespace fs = std::filesystem;
using lt::traintest::read_text;
using lt::traintest::run_trainer;
using lt::traintest::TempDir;
using lt::traintest::write_shard;
using lt::traintest::write_text;

namespace {

// A tiny KDA model on synthetic MQAR: seconds on one core.
std::string tiny_config(const std::string& out, int64_t steps, int64_t checkpoint_every = 0,
                        const std::string& extra_train = "") {
  return R"({
  "description": "test: tiny KDA on MQAR",
  "out": ")" +
         out + R"(",
  "device": "cpu",
  "model": {"arch": "kda", "vocab_size": 32, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "head_dim": 16, "chunk": 16},
  "data": {"source": "synthetic", "task": "mqar", "mqar_pairs": 4, "prefetch": 1},
  "train": {"batch_size": 8, "seq_len": 32, "steps": )" +
         std::to_string(steps) +
         R"(, "lr": 3e-3, "warmup_steps": 5, "weight_decay": 0.01, "seed": 7, "eval_every": 0, "eval_batches": 2,
            "checkpoint_every": )" +
         std::to_string(checkpoint_every) + R"(, "keep_checkpoints": 3, "log_every": 1)" + extra_train + R"(}
})";
}

bool is_empty_or_absent(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return true;
  return fs::is_directory(dir, ec) && fs::directory_iterator(dir) == fs::directory_iterator();
}

// (step, loss bits, grad_norm bits, lr) of every train record, for bit-exact comparison.
std::vector<std::string> trajectory(const std::string& metrics) {
  std::vector<std::string> out;
  for (const auto& j : lt::traintest::train_records(metrics)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%lld %.17g %.17g %.17g", static_cast<long long>(j["step"].get<int64_t>()),
                  j["loss"].get<double>(), j["grad_norm"].get<double>(), j["lr"].get<double>());
    out.push_back(buf);
  }
  return out;
}

}  // namespace

TEST_CASE("trainer: every kind of bad input exits 2, names the problem and writes nothing", "[trainer][cli]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  const std::string cfg = tmp / "c.json";
  auto expect_bad = [&](const std::vector<std::string>& args, const std::string& needle, const std::string& dir) {
    auto r = run_trainer(args, tmp.path.string(), "bad");
    INFO(r.err);
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Catch::Contains(needle));
    CHECK(is_empty_or_absent(dir));
  };
  write_text(cfg, tiny_config(out, 5));

  SECTION("config keys, types, ranges, NaN, missing file") {
    write_text(tmp / "unknown.json", R"({"out": ")" + out + R"(", "train": {"stepz": 5}})");
    expect_bad({"--config", tmp / "unknown.json"}, "'train.stepz' is unknown", out);
    write_text(tmp / "type.json", R"({"out": ")" + out + R"(", "model": {"hidden_size": "big"}})");
    expect_bad({"--config", tmp / "type.json"}, "'model.hidden_size': expected an integer", out);
    write_text(tmp / "range.json", R"({"out": ")" + out + R"(", "train": {"beta1": 1.5}})");
    expect_bad({"--config", tmp / "range.json"}, "'train.beta1': expected a number in [0, ", out);
    expect_bad({"--config", cfg, "--set", "train.lr=nan"}, "'train.lr'", out);
    expect_bad({"--config", cfg, "--set", "train.warmup_steps=-3"}, "'train.warmup_steps'", out);
    expect_bad({"--config", tmp / "nope.json"}, "nope.json", out);
    expect_bad({"--config", cfg, "--device", "tpu"}, "'device'", out);
    expect_bad({"--config", cfg, "--bogus-flag"}, "bogus", out);
    expect_bad({"--config", cfg, "--steps", "-5"}, "--steps: must be 1 or more, got -5", out);
    expect_bad({"--config", cfg, "--seed", "x"}, "--seed: expected a whole number, got 'x'", out);
    expect_bad({"--config", cfg, "--nproc", "0"}, "--nproc: must be 1 or more, got 0", out);
    auto nproc0 = run_trainer({"--config", cfg, "--nproc", "0"}, tmp.path.string(), "nproc0");
    CHECK(nproc0.err.find("179769") == std::string::npos);  // no 309-digit range
  }
  SECTION("data: missing file, empty text, bad shard magic, size, token") {
    expect_bad({"--config", cfg, "--set", "data.source=text", "--set", "data.path=" + tmp / "missing.txt", "--set",
                "model.vocab_size=256"},
               "missing.txt", out);
    write_text(tmp / "empty.txt", "");
    auto empty = run_trainer({"--config", cfg, "--set", "data.source=text", "--set", "data.path=" + tmp / "empty.txt",
                              "--set", "model.vocab_size=256"},
                             tmp.path.string(), "empty");
    CHECK_THAT(empty.err, Catch::Contains("bad input: data: "));
    CHECK(empty.err.find("data: data:") == std::string::npos);  // one prefix
    expect_bad({"--config", cfg, "--set", "data.source=text", "--set", "data.path=" + tmp / "empty.txt", "--set",
                "model.vocab_size=256"},
               "empty.txt", out);
    std::vector<uint16_t> toks(4096);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>(i % 31);
    write_shard(tmp / "magic.bin", toks, 12345);
    expect_bad({"--config", cfg, "--set", "data.source=tokens", "--set", "data.path=" + tmp / "magic.bin"}, "magic.bin",
               out);
    write_shard(tmp / "size.bin", toks, 20240520, 5000);
    expect_bad({"--config", cfg, "--set", "data.source=tokens", "--set", "data.path=" + tmp / "size.bin"}, "size.bin",
               out);
    toks[100] = 40;  // >= vocab 32
    write_shard(tmp / "token.bin", toks);
    expect_bad({"--config", cfg, "--set", "data.source=tokens", "--set", "data.path=" + tmp / "token.bin"}, "token.bin",
               out);
    expect_bad({"--config", cfg, "--set", "data.source=tokens", "--set", "data.path=" + tmp / "none-*.bin"},
               "none-*.bin", out);
  }
  SECTION("an output folder that cannot be written") {
    if (::geteuid() != 0) {
      fs::create_directories(out);
      fs::permissions(out, fs::perms::owner_read | fs::perms::owner_exec);
      expect_bad({"--config", cfg}, "'out'", out);
      fs::permissions(out, fs::perms::owner_all);
    } else {
      // root writes through permission bits: use a path below a regular file instead.
      write_text(tmp / "plainfile", "x");
      expect_bad({"--config", cfg, "--out", tmp / "plainfile/run"}, "'out'", tmp / "plainfile/run");
      CHECK(read_text(tmp / "plainfile") == "x");
    }
  }
  SECTION("a checkpoint that does not fit the config names the keys") {
    auto r = run_trainer({"--config", cfg, "--steps", "2"}, tmp.path.string(), "fit");
    REQUIRE(r.rc == 0);
    auto before = fs::last_write_time(out + "/metrics.jsonl");
    auto r2 =
        run_trainer({"--config", cfg, "--steps", "4", "--set", "model.hidden_size=64", "--set", "model.num_heads=4"},
                    tmp.path.string(), "fit2");
    INFO(r2.err);
    CHECK(r2.rc == 2);
    CHECK_THAT(r2.err, Catch::Contains("model.hidden_size") && Catch::Contains("model.num_heads"));
    CHECK(fs::last_write_time(out + "/metrics.jsonl") == before);
  }
}

TEST_CASE("trainer: --print-config prints the effective config and writes nothing", "[trainer][cli]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  write_text(tmp / "c.json", tiny_config(out, 5));
  auto r = run_trainer({"--config", tmp / "c.json", "--set", "train.lr=0.25", "--steps", "9", "--print-config"},
                       tmp.path.string());
  REQUIRE(r.rc == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["train"]["lr"] == 0.25);
  CHECK(j["train"]["steps"] == 9);
  CHECK(j["train"]["spike_window"] == 100);  // a default filled in
  CHECK(j["train"]["cuda_graph"] == true);
  CHECK(j["model"]["hidden_size"] == 32);
  CHECK_FALSE(fs::exists(out));
  auto h = run_trainer({"--help"}, tmp.path.string(), "help");
  CHECK(h.rc == 0);
  CHECK_THAT(h.out, Catch::Contains("--resume") && Catch::Contains("Examples") &&
                        Catch::Contains("train.max_grad_norm") && Catch::Contains("train.cuda_graph"));
}

TEST_CASE("trainer: configs/quick.json trains: the loss falls from ~ln 32 to below 3.0 in 30 steps",
          "[trainer][train]") {
  TempDir tmp;
  const std::string quick = (lt::traintest::source_dir() / "configs" / "quick.json").string();
  const std::string out = tmp / "quick";
  auto r = run_trainer({"--config", quick, "--device", "cpu", "--out", out, "--steps", "30", "--set",
                        "train.log_every=1", "--set", "train.eval_every=0", "--set", "train.checkpoint_every=0"},
                       tmp.path.string(), "quick");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  auto recs = lt::traintest::train_records(out + "/metrics.jsonl");
  REQUIRE(recs.size() == 30);
  INFO("loss at step 1: " << recs.front()["loss"] << ", at step 30: " << recs.back()["loss"]);
  CHECK(recs.front()["loss"].get<double>() > 3.3);  // uniform over 32 tokens: ln 32 = 3.47
  CHECK(recs.back()["loss"].get<double>() < 3.0);
  CHECK_THAT(r.err, Catch::Contains("MQAR accuracy"));
}

TEST_CASE(
    "trainer: a tiny MQAR run learns; kill -9 + --resume auto is bit-exact; truncated newest skipped; export "
    "round-trips",
    "[trainer][train]") {
  TempDir tmp;
  // Reference: 40 uninterrupted steps.
  const std::string ref = tmp / "ref";
  write_text(tmp / "ref.json", tiny_config(ref, 40, 5));
  auto r = run_trainer({"--config", tmp / "ref.json"}, tmp.path.string(), "ref");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  auto full = trajectory(ref + "/metrics.jsonl");
  REQUIRE(full.size() == 40);
  auto recs = lt::traintest::train_records(ref + "/metrics.jsonl");
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += recs[static_cast<size_t>(i)]["loss"].get<double>() / 5;
  for (int i = 35; i < 40; ++i) last += recs[static_cast<size_t>(i)]["loss"].get<double>() / 5;
  INFO("mean loss of steps 1-5 " << first << ", of steps 36-40 " << last);
  // The loss falls from ln(32) ~ 3.47 (uniform over the vocabulary) to below 2.9 in 40 steps.
  CHECK(first > 3.2);
  CHECK(last < 2.9);
  CHECK(fs::exists(ref + "/step-00000040/model.safetensors"));
  CHECK(fs::exists(ref + "/config.json"));

  // Interrupted: kill -9 at a random step after the first checkpoint, then --resume auto.
  std::random_device rd;
  const int64_t kill_at = 7 + static_cast<int64_t>(rd() % 28);
  INFO("killed at step " << kill_at);
  const std::string run = tmp / "run";
  write_text(tmp / "run.json", tiny_config(run, 40, 5));
  auto p = lt::traintest::spawn_trainer({"--config", tmp / "run.json"}, tmp.path.string(), "killed");
  while (static_cast<int64_t>(lt::traintest::count_lines(run + "/metrics.jsonl")) < kill_at) {
    int status = 0;
    REQUIRE(::waitpid(p.pid, &status, WNOHANG) == 0);  // still running
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(p.pid, SIGKILL);
  CHECK(p.wait() == 128 + SIGKILL);
  auto r2 = run_trainer({"--config", tmp / "run.json", "--resume", "auto"}, tmp.path.string(), "resumed");
  INFO(r2.err);
  REQUIRE(r2.rc == 0);
  CHECK_THAT(r2.err, Catch::Contains("resumed from"));
  auto resumed = trajectory(run + "/metrics.jsonl");
  REQUIRE(resumed.size() == full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(resumed[i] == full[i]);
  }
  // The final weights are the same bytes.
  CHECK(read_text(run + "/step-00000040/model.safetensors") == read_text(ref + "/step-00000040/model.safetensors"));

  {  // export round-trips: the exported weights give the checkpoint's loss
    const std::string ex = tmp / "export";
    auto r4 = run_trainer({"export", "--checkpoint", ref + "/step-00000040", "--out", ex}, tmp.path.string(), "export");
    INFO(r4.err);
    REQUIRE(r4.rc == 0);
    auto fla = nlohmann::json::parse(read_text(ex + "/config.json"));
    CHECK(fla["hidden_size"] == 32);
    CHECK(fla["vocab_size"] == 32);
    auto loaded = lt::train::load_model_from_checkpoint(ref + "/step-00000040", "cpu", true);
    lt::model::Model fresh(loaded.config.model, lt::Device::cpu());
    fresh.init_weights(999);
    fresh.load_params(lt::io::read_safetensors(ex + "/model.safetensors"));
    auto a = lt::train::evaluate(*loaded.model, loaded.config, 2);
    auto b = lt::train::evaluate(fresh, loaded.config, 2);
    CHECK(a.targets > 0);
    CHECK(a.loss == b.loss);
    CHECK(a.accuracy == b.accuracy);
    // Sampling a token-id model without a tokenizer: ids in, ids out, all in the vocabulary.
    auto ids = run_trainer(
        {"sample", "--checkpoint", ref + "/step-00000040", "--prompt", "3 20 5", "--tokens", "4", "--device", "cpu"},
        tmp.path.string(), "ids");
    INFO(ids.err);
    REQUIRE(ids.rc == 0);
    std::istringstream is(ids.out);
    std::vector<int> got;
    for (int v; is >> v;) got.push_back(v);
    REQUIRE(got.size() == 7);
    CHECK(got[0] == 3);
    CHECK(got[1] == 20);
    CHECK(got[2] == 5);
    for (int v : got) CHECK((v >= 0 && v < 32));
    // `trainer eval` reports the same loss.
    auto r5 = run_trainer({"eval", "--checkpoint", ref + "/step-00000040", "--batches", "2", "--device", "cpu"},
                          tmp.path.string(), "eval");
    REQUIRE(r5.rc == 0);
    CHECK(nlohmann::json::parse(r5.out)["val_loss"].get<double>() == Approx(a.loss).epsilon(1e-6));
  }
  {  // a truncated newest checkpoint is skipped with a message (last: it damages ref)
    fs::resize_file(ref + "/step-00000040/state.safetensors", 100);
    auto r3 = run_trainer({"--config", tmp / "ref.json"}, tmp.path.string(), "trunc");
    INFO(r3.err);
    REQUIRE(r3.rc == 0);
    CHECK_THAT(r3.err, Catch::Contains("step-00000040 skipped") && Catch::Contains("state.safetensors"));
    CHECK_THAT(r3.err, Catch::Contains("resumed from") && Catch::Contains("step-00000035"));
    // Steps 36..40 are recomputed identically from the step-35 checkpoint.
    auto again = trajectory(ref + "/metrics.jsonl");
    REQUIRE(again.size() == full.size());
    for (size_t i = 0; i < full.size(); ++i) CHECK(again[i] == full[i]);
  }
}

TEST_CASE("trainer: SIGTERM finishes the step, writes a checkpoint and exits 0", "[trainer][train]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  write_text(tmp / "c.json", tiny_config(out, 100000));
  auto p = lt::traintest::spawn_trainer({"--config", tmp / "c.json"}, tmp.path.string(), "term");
  while (lt::traintest::count_lines(out + "/metrics.jsonl") < 3) {
    int status = 0;
    REQUIRE(::waitpid(p.pid, &status, WNOHANG) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(p.pid, SIGTERM);
  CHECK(p.wait() == 0);
  std::string err = p.err();
  INFO(err);
  CHECK_THAT(err, Catch::Contains("SIGTERM") && Catch::Contains("--resume auto"));
  auto latest = lt::train::checkpoint_find_latest(out);
  REQUIRE(latest.has_value());
  auto recs = lt::traintest::train_records(out + "/metrics.jsonl");
  REQUIRE(!recs.empty());
  CHECK(fs::path(*latest).filename() == lt::train::checkpoint_dir_name(recs.back()["step"].get<int64_t>()));
}

TEST_CASE("trainer: sample is deterministic and decodes bytes", "[trainer][cli]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the cat sat on the mat. ";
  write_text(tmp / "t.txt", text);
  write_text(tmp / "c.json", tiny_config(out, 3));
  auto r = run_trainer({"--config", tmp / "c.json", "--set", "data.source=text", "--set", "data.path=" + tmp / "t.txt",
                        "--set", "model.vocab_size=256"},
                       tmp.path.string(), "text");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  auto s1 = run_trainer({"sample", "--checkpoint", out + "/step-00000003", "--prompt", "the ", "--tokens", "12",
                         "--temperature", "0.8", "--top-k", "5", "--device", "cpu"},
                        tmp.path.string(), "s1");
  auto s2 = run_trainer({"sample", "--checkpoint", out + "/step-00000003", "--prompt", "the ", "--tokens", "12",
                         "--temperature", "0.8", "--top-k", "5", "--device", "cpu"},
                        tmp.path.string(), "s2");
  INFO(s1.err);
  REQUIRE(s1.rc == 0);
  CHECK(s1.out == s2.out);
  CHECK(s1.out.rfind("the ", 0) == 0);
  CHECK(s1.out.size() == 4 + 12 + 1);  // prompt + 12 bytes + newline
  // Sampling needs no data files: the same after the text is gone.
  fs::remove(tmp / "t.txt");
  auto s3 = run_trainer({"sample", "--checkpoint", out + "/step-00000003", "--prompt", "the ", "--tokens", "12",
                         "--temperature", "0.8", "--top-k", "5", "--device", "cpu"},
                        tmp.path.string(), "s3");
  INFO(s3.err);
  CHECK(s3.rc == 0);
  CHECK(s3.out == s1.out);
  // eval does need them, and says which key names the missing file.
  auto e = run_trainer({"eval", "--checkpoint", out + "/step-00000003", "--device", "cpu"}, tmp.path.string(), "e");
  CHECK(e.rc == 2);
  CHECK_THAT(e.err, Catch::Contains("data.path") && Catch::Contains("t.txt"));
}

TEST_CASE("trainer: loss spikes skip updates; too many in a row stop the run at the last good checkpoint",
          "[trainer][train]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  // lr 10 without clipping blows the loss up within a few steps, and the blown-up losses
  // bounce: some are spikes against the 2-step window. Which steps, and whether spikes come
  // several in a row, depends on every rounding of the trajectory, so the limit is 1: the
  // first spike skips its update and stops the run (the count of skips in a row is tested
  // with injected non-finite losses below).
  write_text(tmp / "c.json", tiny_config(out, 20, 1));
  auto r = run_trainer({"--config", tmp / "c.json", "--set", "train.lr=10", "--set", "train.max_grad_norm=0", "--set",
                        "train.warmup_steps=0", "--set", "train.weight_decay=0", "--set", "train.spike_zscore=4",
                        "--set", "train.spike_window=2", "--set", "train.max_consecutive_skips=1"},
                       tmp.path.string(), "spike");
  INFO(r.err);
  CHECK(r.rc == 3);
  CHECK_THAT(r.err,
             Catch::Contains("update skipped: loss spike") && Catch::Contains("stopping: 1 updates skipped in a row"));
  auto recs = lt::traintest::train_records(out + "/metrics.jsonl");
  REQUIRE(recs.size() >= 4);
  const int64_t last = recs.back()["step"].get<int64_t>();
  int64_t skipped_tail = 0;
  for (auto it = recs.rbegin(); it != recs.rend() && (*it)["skipped"].get<bool>(); ++it) ++skipped_tail;
  CHECK(skipped_tail == 1);
  CHECK(last < 20);
  // The newest checkpoint is the step before the skip, and it verifies.
  auto latest = lt::train::checkpoint_find_latest(out);
  REQUIRE(latest.has_value());
  CHECK(fs::path(*latest).filename() == lt::train::checkpoint_dir_name(last - 1));
  CHECK_THAT(r.err, Catch::Contains(*latest));
}

namespace {

// LINTRAIN_INJECT_NONFINITE for the trainer processes a test starts.
struct InjectNonfinite {
  explicit InjectNonfinite(const char* steps) { ::setenv("LINTRAIN_INJECT_NONFINITE", steps, 1); }
  ~InjectNonfinite() { ::unsetenv("LINTRAIN_INJECT_NONFINITE"); }
  InjectNonfinite(const InjectNonfinite&) = delete;
  InjectNonfinite& operator=(const InjectNonfinite&) = delete;
};

}  // namespace

TEST_CASE("trainer: an injected non-finite loss skips that update on the device, counted; the run finishes",
          "[trainer][train][skip]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  write_text(tmp / "c.json", tiny_config(out, 6, 1));
  InjectNonfinite inject("4");
  auto r = run_trainer({"--config", tmp / "c.json", "--set", "train.eval_every=1"}, tmp.path.string(), "inject1");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.err, Catch::Contains("LINTRAIN_INJECT_NONFINITE: the loss of step(s) 4"));
  CHECK_THAT(r.err, Catch::Contains("step 4: update skipped: non-finite loss (1 in a row, 1 in all)"));
  CHECK_THAT(r.err, Catch::Contains("done: 6 steps (1 updates skipped)"));
  auto recs = lt::traintest::train_records(out + "/metrics.jsonl");
  REQUIRE(recs.size() == 6);
  for (size_t i = 0; i < 6; ++i) {
    INFO("step " << i + 1);
    CHECK(recs[i]["step"] == static_cast<int64_t>(i + 1));
    CHECK(recs[i]["skipped"] == (i == 3));
    CHECK(recs[i]["skipped_total"] == (i >= 3 ? 1 : 0));
    if (i == 3) CHECK(recs[i]["loss"].is_null());  // NaN is written as null
    else CHECK(std::isfinite(recs[i]["loss"].get<double>()));
    CHECK(std::isfinite(recs[i]["grad_norm"].get<double>()));  // only the loss was made NaN
  }
  // The weights are unchanged by step 4: the evaluation after it (the same validation
  // batches every time) gives the bits of the one after step 3; step 5 updates again.
  auto evals = lt::traintest::records(out + "/metrics.jsonl", "eval");
  REQUIRE(evals.size() == 6);
  CHECK(evals[3]["val_loss"].get<double>() == evals[2]["val_loss"].get<double>());
  CHECK(evals[4]["val_loss"].get<double>() != evals[3]["val_loss"].get<double>());
  CHECK(evals[2]["val_loss"].get<double>() != evals[1]["val_loss"].get<double>());
  // No checkpoint in the middle of a run of skips; the later ones count the skip.
  CHECK_FALSE(fs::exists(out + "/step-00000004"));
  auto ck = lt::train::checkpoint_load(out + "/step-00000006");
  CHECK(ck.loop_state["applied"] == 5);
  CHECK(ck.loop_state["skipped"] == 1);
  CHECK(ck.loop_state["consecutive_skips"] == 0);
}

TEST_CASE("trainer: max_consecutive_skips injected non-finite steps stop the run at the last good checkpoint",
          "[trainer][train][skip]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  write_text(tmp / "c.json", tiny_config(out, 10, 1, R"(, "max_consecutive_skips": 3)"));
  InjectNonfinite inject("3..5");
  auto r = run_trainer({"--config", tmp / "c.json"}, tmp.path.string(), "inject3");
  INFO(r.err);
  CHECK(r.rc == 3);
  CHECK_THAT(r.err, Catch::Contains("step 5: update skipped: non-finite loss (3 in a row, 3 in all)"));
  CHECK_THAT(r.err, Catch::Contains("stopping: 3 updates skipped in a row (train.max_consecutive_skips = 3)"));
  auto recs = lt::traintest::train_records(out + "/metrics.jsonl");
  REQUIRE(recs.size() == 5);  // no step is begun after the one that reached the limit
  for (size_t i = 0; i < 5; ++i) CHECK(recs[i]["skipped"] == (i >= 2));
  CHECK(recs.back()["skipped_total"] == 3);
  // The newest checkpoint is step 2's, named in the message; it verifies and loads.
  auto latest = lt::train::checkpoint_find_latest(out);
  REQUIRE(latest.has_value());
  CHECK(fs::path(*latest).filename() == "step-00000002");
  CHECK_THAT(r.err, Catch::Contains(*latest));
  CHECK(lt::train::checkpoint_verify(*latest).empty());
  auto loaded = lt::train::load_model_from_checkpoint(*latest, "cpu", true);
  CHECK(loaded.checkpoint.loop_state["step"] == 2);
  CHECK(loaded.checkpoint.loop_state["skipped"] == 0);
  auto ev = lt::train::evaluate(*loaded.model, loaded.config, 2);
  CHECK(std::isfinite(ev.loss));
  // Resuming repeats the injected steps (the variable still lists them) and stops again.
  auto r2 = run_trainer({"--config", tmp / "c.json"}, tmp.path.string(), "inject3b");
  CHECK(r2.rc == 3);
  CHECK_THAT(r2.err, Catch::Contains("resumed from") && Catch::Contains("step-00000002"));
}

TEST_CASE("trainer: a bad LINTRAIN_INJECT_NONFINITE exits 2 naming it and writes nothing", "[trainer][cli][skip]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  write_text(tmp / "c.json", tiny_config(out, 3));
  for (const char* bad : {"3,x", "0", "5..2", "-1"}) {
    INFO(bad);
    InjectNonfinite inject(bad);
    auto r = run_trainer({"--config", tmp / "c.json"}, tmp.path.string(), "badinject");
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Catch::Contains("LINTRAIN_INJECT_NONFINITE '") && Catch::Contains("bad item"));
    CHECK(is_empty_or_absent(out));
  }
}

TEST_CASE("trainer: packed documents in token shards restart the state; off, the run differs", "[trainer][segments]") {
  TempDir tmp;
  // Documents of 3..20 tokens, each opened by the end-of-text token 0.
  std::vector<uint16_t> toks;
  for (int d = 0; toks.size() < 6000; ++d) {
    toks.push_back(0);
    for (int i = 0; i < 3 + d % 18; ++i) toks.push_back(static_cast<uint16_t>(1 + (d * 13 + i * 5) % 31));
  }
  write_shard(tmp / "docs.bin", toks);
  write_text(tmp / "c.json", tiny_config(tmp / "out", 3));
  auto run = [&](const std::string& tag, bool reset) {
    return run_trainer({"--config", tmp / "c.json", "--set", "data.source=tokens", "--set",
                        "data.path=" + tmp / "docs.bin", "--set", "data.eot_token=0", "--set",
                        std::string("data.reset_state_at_eot=") + (reset ? "true" : "false"), "--out", tmp / tag},
                       tmp.path.string(), tag);
  };
  auto on = run("on", true), off = run("off", false);
  INFO(on.err);
  REQUIRE(on.rc == 0);
  REQUIRE(off.rc == 0);
  CHECK_THAT(on.err, Catch::Contains("packed documents: the state restarts at every token 0"));
  CHECK_THAT(off.err, !Catch::Contains("packed documents"));
  const auto a = lt::traintest::train_records(tmp / "on/metrics.jsonl");
  const auto b = lt::traintest::train_records(tmp / "off/metrics.jsonl");
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  CHECK(a[0]["loss"].get<double>() != b[0]["loss"].get<double>());  // other targets, other states
  for (const auto& r : a) CHECK(std::isfinite(r["loss"].get<double>()));
}
