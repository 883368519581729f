// Evaluation over whole documents (engine/train/eval_text.h, `trainer eval --data`): the
// windowing scores every token but each document's first exactly once; the figures equal a
// direct computation; the binary on byte runs (a file, a folder) and on a BPE token run (text
// encoded with the tokenizer fixture, and a shard); every bad input exits 2 naming it.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "engine/data/tokenizer.h"
#include "engine/model/model.h"
#include "engine/train/eval_text.h"
#include "engine/train/loop.h"
#include "tests/engine/train/trainer_test_util.h"

namespace fs = std::filesystem;
using lt::traintest::run_trainer;
using lt::traintest::TempDir;
using lt::traintest::write_shard;
using lt::traintest::write_text;

namespace {

// A tiny KDA model; data: the keys of its "data" section. Three steps take seconds on one core.
std::string tiny_config(const std::string& out, const std::string& data, int64_t vocab) {
  return R"({
  "out": ")" +
         out +
         R"(",
  "device": "cpu",
  "model": {"arch": "kda", "vocab_size": )" +
         std::to_string(vocab) + R"(, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "head_dim": 16, "chunk": 16},
  "data": {)" +
         data +
         R"(, "prefetch": 1},
  "train": {"batch_size": 4, "seq_len": 16, "steps": 3, "lr": 3e-3, "warmup_steps": 1, "seed": 7,
            "eval_every": 0, "eval_batches": 1, "checkpoint_every": 0, "log_every": 1}
})";
}

fs::path tokenizer_fixture() {
  return lt::traintest::source_dir() / "tests" / "engine" / "data" / "fixtures" / "tokenizer.json";
}

nlohmann::json eval_json(const lt::traintest::RunOutput& r) {
  INFO(r.err);
  REQUIRE(r.rc == 0);
  return nlohmann::json::parse(r.out);
}

void check_figures(const nlohmann::json& j) {
  const double loss = j["loss"].get<double>();
  CHECK(std::isfinite(loss));
  CHECK(loss > 0.0);
  CHECK(j["perplexity"].get<double>() == Approx(std::exp(loss)));
  CHECK(j["bits_per_token"].get<double>() == Approx(loss / std::log(2.0)));
  const double acc = j["accuracy"].get<double>();
  CHECK((acc >= 0.0 && acc <= 1.0));
}

}  // namespace

TEST_CASE("eval_text: every token but each document's first is a target exactly once", "[eval][train]") {
  const int64_t T = 8;
  const std::vector<int64_t> lengths = {1, T, T + 1, 3 * T + 2, 0, 2};
  // Token value = 1000 * document + position, so a target names its place.
  std::vector<std::vector<int32_t>> docs;
  for (size_t d = 0; d < lengths.size(); ++d) {
    docs.emplace_back();
    for (int64_t i = 0; i < lengths[d]; ++i) docs.back().push_back(static_cast<int32_t>(1000 * d + i));
  }
  const auto windows = lt::train::eval_windows(lengths, T);
  // ceil((n - 1) / T) windows per document.
  CHECK(windows.size() == 0 + 1 + 1 + 4 + 0 + 1);
  std::map<int32_t, int> seen;
  std::vector<int32_t> tokens(T), targets(T);
  for (const auto& w : windows) {
    CHECK(w.length >= 2);
    CHECK(w.length <= T + 1);
    lt::train::fill_eval_row(docs[static_cast<size_t>(w.document)], w, T, tokens.data(), targets.data());
    for (int64_t t = 0; t < T; ++t) {
      if (t + 1 < w.length) {
        CHECK(tokens[t] == docs[static_cast<size_t>(w.document)][static_cast<size_t>(w.begin + t)]);
        CHECK(targets[t] == tokens[t] + 1);  // the next token of the same document
        ++seen[targets[t]];
      } else {
        CHECK(targets[t] == -100);  // padding and the window's last token are not scored
        if (t >= w.length) CHECK(tokens[t] == 0);
      }
    }
  }
  size_t expected = 0;
  for (size_t d = 0; d < lengths.size(); ++d)
    for (int64_t i = 1; i < lengths[d]; ++i) {
      ++expected;
      CHECK(seen[static_cast<int32_t>(1000 * d + i)] == 1);
    }
  CHECK(seen.size() == expected);
}

TEST_CASE("eval_text: the figures equal a direct computation, for any batch size", "[eval][train]") {
  lt::train::RunConfig rc;
  rc.data.source = "text";
  rc.model.vocab_size = 256;
  rc.model.hidden_size = 32;
  rc.model.num_heads = 2;
  rc.model.head_dim = 16;
  rc.model.chunk = 16;
  rc.train.seq_len = 16;
  lt::model::Model m(rc.model, lt::Device::cpu());
  m.init_weights(3);
  const int64_t T = rc.train.seq_len;
  std::vector<std::vector<int32_t>> docs;
  for (int64_t n : {1, 16, 17, 50}) {
    docs.emplace_back();
    for (int64_t i = 0; i < n; ++i) docs.back().push_back(static_cast<int32_t>((i * 37 + n) % 256));
  }
  const std::vector<int64_t> one_byte(256, 1);

  // Direct: each window alone through Model::evaluate.
  double nats = 0.0;
  int64_t targets = 0;
  for (const auto& w : lt::train::eval_windows({1, 16, 17, 50}, T)) {
    std::vector<int32_t> tok(static_cast<size_t>(T)), tgt(static_cast<size_t>(T));
    lt::train::fill_eval_row(docs[static_cast<size_t>(w.document)], w, T, tok.data(), tgt.data());
    lt::Tensor a = lt::Tensor::empty({1, T}, lt::DType::i32), b = lt::Tensor::empty({1, T}, lt::DType::i32);
    std::copy(tok.begin(), tok.end(), a.data<int32_t>());
    std::copy(tgt.begin(), tgt.end(), b.data<int32_t>());
    lt::Tensor loss = lt::Tensor::zeros({}, lt::DType::f32);
    m.evaluate(a, b, 1.0, loss);
    nats += loss.item();
    targets += w.length - 1;
  }
  CHECK(targets == 0 + 15 + 16 + 49);

  for (int64_t B : {1, 3, 8}) {
    INFO("B " << B);
    rc.train.batch_size = B;
    int calls = 0;
    lt::train::EvalProgress last;
    auto r = lt::train::evaluate_documents(m, rc, docs, one_byte, [&](const lt::train::EvalProgress& p) {
      ++calls;
      last = p;
    });
    const int64_t windows = 0 + 1 + 1 + 4;
    CHECK(calls == (windows + B - 1) / B);
    CHECK(last.windows_done == windows);
    CHECK(last.windows_total == windows);
    CHECK(last.targets_done == targets);
    CHECK(r.documents == 4);
    CHECK(r.tokens == 1 + 16 + 17 + 50);
    CHECK(r.targets == targets);
    CHECK(r.bytes == targets);
    CHECK(r.nats == Approx(nats).epsilon(1e-5));
    CHECK(r.loss == Approx(nats / static_cast<double>(targets)).epsilon(1e-5));
    CHECK(r.perplexity == Approx(std::exp(r.loss)));
    CHECK(r.bits_per_token == Approx(r.loss / std::log(2.0)));
    CHECK(r.bits_per_byte == Approx(r.loss / std::log(2.0)));  // one byte per target
    CHECK((r.accuracy >= 0.0 && r.accuracy <= 1.0));
  }
  // Two bytes per token halve bits per byte; unknown bytes leave it NaN.
  rc.train.batch_size = 4;
  auto two = lt::train::evaluate_documents(m, rc, docs, std::vector<int64_t>(256, 2), nullptr);
  CHECK(two.bytes == 2 * targets);
  CHECK(two.bits_per_byte == Approx(two.loss / std::log(2.0) / 2.0));
  auto unknown = lt::train::evaluate_documents(m, rc, docs, {}, nullptr);
  CHECK(unknown.bytes == -1);
  CHECK(std::isnan(unknown.bits_per_byte));
}

TEST_CASE("trainer eval --data: a byte run scores a text file and a folder", "[eval][trainer][cli]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat. ";
  write_text(tmp / "t.txt", text);
  write_text(tmp / "c.json", tiny_config(out, R"("source": "text", "path": ")" + tmp / "t.txt" + "\"", 256));
  auto r = run_trainer({"--config", tmp / "c.json"}, tmp.path.string(), "train");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const std::string ck = out + "/step-00000003";

  const auto n = static_cast<int64_t>(text.size());
  auto e =
      run_trainer({"eval", "--checkpoint", ck, "--data", tmp / "t.txt", "--device", "cpu"}, tmp.path.string(), "file");
  const auto j = eval_json(e);
  CHECK(j["checkpoint"] == ck);
  CHECK(j["step"] == 3);
  CHECK(j["data"] == tmp / "t.txt");
  CHECK(j["documents"] == 1);
  CHECK(j["tokens"] == n);
  CHECK(j["targets"] == n - 1);
  CHECK(j["bytes"] == n - 1);
  check_figures(j);
  CHECK(j["bits_per_byte"].get<double>() == Approx(j["loss"].get<double>() / std::log(2.0)));
  CHECK_THAT(e.err, Catch::Contains("windows") && Catch::Contains("100.0%"));  // progress on stderr

  // The binary's figures are the in-process ones.
  auto lm = lt::train::load_model_from_checkpoint(ck, "cpu", false);
  const auto in = lt::train::load_eval_documents(lm.config, tmp / "t.txt");
  const auto direct = lt::train::evaluate_documents(*lm.model, lm.config, in.documents, in.token_bytes, nullptr);
  CHECK(j["loss"].get<double>() == Approx(direct.loss).epsilon(1e-9));
  CHECK(j["accuracy"].get<double>() == Approx(direct.accuracy).epsilon(1e-9));

  // A folder of two files (a hidden one ignored): two documents.
  fs::create_directories(tmp / "docs");
  write_text(tmp / "docs/a.txt", "hello there, cat");
  write_text(tmp / "docs/b.txt", text);
  write_text(tmp / "docs/.hidden", "not read");
  const auto folder = eval_json(
      run_trainer({"eval", "--checkpoint", ck, "--data", tmp / "docs", "--device", "cpu"}, tmp.path.string(), "dir"));
  CHECK(folder["documents"] == 2);
  CHECK(folder["tokens"] == 16 + n);
  CHECK(folder["targets"] == 16 + n - 2);
  CHECK(folder["bytes"] == 16 + n - 2);
  check_figures(folder);

  // Without --data, the random validation batches as before.
  const auto val = eval_json(run_trainer({"eval", "--checkpoint", ck, "--device", "cpu"}, tmp.path.string(), "val"));
  CHECK(val.contains("val_loss"));
}

TEST_CASE("trainer eval --data: a BPE token run scores text through its tokenizer.json, and shards",
          "[eval][trainer][cli]") {
  TempDir tmp;
  const std::string out = tmp / "out";
  const lt::data::Tokenizer tok = lt::data::Tokenizer::from_file(tokenizer_fixture().string());
  std::string corpus;
  for (int i = 0; i < 80; ++i) corpus += "def add(x, y):\n    return x + y  # sum " + std::to_string(i) + "\n";
  const std::vector<int32_t> ids = tok.encode(corpus);
  REQUIRE(ids.size() > 400);
  write_shard(tmp / "train.bin", std::vector<uint16_t>(ids.begin(), ids.end()));
  fs::copy_file(tokenizer_fixture(), tmp / "tokenizer.json");
  write_text(tmp / "c.json", tiny_config(out, R"("source": "tokens", "path": ")" + tmp / "train.bin" + "\"", 400));
  auto r = run_trainer({"--config", tmp / "c.json"}, tmp.path.string(), "train");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  const std::string ck = out + "/step-00000003";

  SECTION("text is encoded with the tokenizer.json beside the shards") {
    const std::string text = "def mul(a, b):\n    return a * b  # caf\xC3\xA9\n";
    write_text(tmp / "x.py", text);
    const std::vector<int32_t> enc = tok.encode(text);
    REQUIRE(enc.size() >= 2);
    const auto j = eval_json(
        run_trainer({"eval", "--checkpoint", ck, "--data", tmp / "x.py", "--device", "cpu"}, tmp.path.string(), "t"));
    CHECK(j["documents"] == 1);
    CHECK(j["tokens"] == static_cast<int64_t>(enc.size()));
    CHECK(j["targets"] == static_cast<int64_t>(enc.size()) - 1);
    const auto first_bytes = static_cast<int64_t>(tok.decode({enc[0]}).size());
    CHECK(j["bytes"] == static_cast<int64_t>(text.size()) - first_bytes);
    check_figures(j);
    const double bpb = j["loss"].get<double>() * static_cast<double>(j["targets"].get<int64_t>()) / std::log(2.0) /
                       static_cast<double>(j["bytes"].get<int64_t>());
    CHECK(j["bits_per_byte"].get<double>() == Approx(bpb));
  }
  SECTION("a shard is read as tokens; without a tokenizer.json bits_per_byte is null") {
    const auto j = eval_json(run_trainer({"eval", "--checkpoint", ck, "--data", tmp / "train.bin", "--device", "cpu"},
                                         tmp.path.string(), "s"));
    CHECK(j["tokens"] == static_cast<int64_t>(ids.size()));
    CHECK(j["targets"] == static_cast<int64_t>(ids.size()) - 1);
    CHECK(j["bytes"] == static_cast<int64_t>(corpus.size()) - static_cast<int64_t>(tok.decode({ids[0]}).size()));
    check_figures(j);
    // A glob of two shards: two documents.
    write_shard(tmp / "more.bin", std::vector<uint16_t>(ids.begin(), ids.begin() + 10));
    const auto g = eval_json(
        run_trainer({"eval", "--checkpoint", ck, "--data", tmp / "*.bin", "--device", "cpu"}, tmp.path.string(), "g"));
    CHECK(g["documents"] == 2);
    CHECK(g["targets"] == static_cast<int64_t>(ids.size()) - 1 + 9);

    fs::remove(tmp / "tokenizer.json");
    auto e = run_trainer({"eval", "--checkpoint", ck, "--data", tmp / "train.bin", "--device", "cpu"},
                         tmp.path.string(), "n");
    const auto n = eval_json(e);
    CHECK(n["targets"] == static_cast<int64_t>(ids.size()) - 1);
    CHECK(n["bytes"].is_null());
    CHECK(n["bits_per_byte"].is_null());
    CHECK_THAT(e.err, Catch::Contains("bits_per_byte is null"));
  }
}

TEST_CASE("trainer eval --data: every bad input exits 2 naming it and writes nothing", "[eval][trainer][cli]") {
  TempDir tmp;
  auto expect_bad = [&](const std::string& ck, const std::vector<std::string>& extra, const std::string& needle) {
    std::vector<std::string> args = {"eval", "--checkpoint", ck, "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_trainer(args, tmp.path.string(), "bad");
    INFO(r.err);
    CHECK(r.rc == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains(needle));
  };
  // A byte run, a token run without a tokenizer.json, and an MQAR run.
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat. ";
  write_text(tmp / "t.txt", text);
  write_text(tmp / "bytes.json",
             tiny_config(tmp / "bytes", R"("source": "text", "path": ")" + tmp / "t.txt" + "\"", 256));
  std::vector<uint16_t> toks(2048);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>(i % 31);
  fs::create_directories(tmp / "shards");
  write_shard(tmp / "shards/train.bin", toks);
  write_text(tmp / "tokens.json",
             tiny_config(tmp / "tokens", R"("source": "tokens", "path": ")" + tmp / "shards/train.bin" + "\"", 400));
  write_text(tmp / "mqar.json",
             tiny_config(tmp / "mqar", R"("source": "synthetic", "task": "mqar", "mqar_pairs": 2)", 32));
  for (const char* run : {"bytes", "tokens", "mqar"}) {
    auto r = run_trainer({"--config", tmp / (std::string(run) + ".json")}, tmp.path.string(), run);
    INFO(r.err);
    REQUIRE(r.rc == 0);
  }
  const std::string bytes = tmp / "bytes/step-00000003", tokens = tmp / "tokens/step-00000003",
                    mqar = tmp / "mqar/step-00000003";

  expect_bad(bytes, {"--data", tmp / "missing.txt"}, "missing.txt");
  write_text(tmp / "empty.txt", "");
  expect_bad(bytes, {"--data", tmp / "empty.txt"}, "empty.txt");
  fs::create_directories(tmp / "nofiles/sub");
  expect_bad(bytes, {"--data", tmp / "nofiles"}, "nofiles");
  write_text(tmp / "one.txt", "x");
  expect_bad(bytes, {"--data", tmp / "one.txt"}, "one.txt");  // one byte: nothing to score
  expect_bad(bytes, {"--data", tmp / "t.txt", "--batches", "2"}, "--batches");
  write_shard(tmp / "size.bin", toks, 20240520, 5000);
  expect_bad(tokens, {"--data", tmp / "size.bin"}, "size.bin");
  std::vector<uint16_t> big = toks;
  big[100] = 450;  // >= vocab 400
  write_shard(tmp / "vocab.bin", big);
  expect_bad(tokens, {"--data", tmp / "vocab.bin"}, "vocab.bin': token 450 at index 100");
  expect_bad(tokens, {"--data", tmp / "none-*.bin"}, "none-*.bin");
  expect_bad(tokens, {"--data", tmp / "t.txt"}, "tokenizer.json");
  expect_bad(mqar, {"--data", tmp / "t.txt"}, "mqar");
}
