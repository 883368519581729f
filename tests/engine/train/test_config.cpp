// The config schema in-process: defaults, overrides typed by the schema, and each kind of
// bad input raising a ConfigError that names the key path and the expected form.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include "engine/train/config.h"
#include "tests/engine/train/trainer_test_util.h"

using lt::train::ConfigError;
using ojson = nlohmann::ordered_json;

namespace {
std::string resolve_error(const ojson& j) {
  try {
    lt::train::config_resolve(j);
  } catch (const ConfigError& e) { return e.what(); }
  return "";
}
std::string override_error(const std::string& assignment) {
  ojson j = ojson::object();
  try {
    lt::train::config_apply_override(j, assignment);
  } catch (const ConfigError& e) { return e.what(); }
  return "";
}
}  // namespace

TEST_CASE("config: defaults fill every schema key in schema order", "[trainer][config]") {
  auto rc = lt::train::config_resolve(ojson::object());
  for (const auto& e : lt::train::config_schema()) {
    INFO(e.path);
    REQUIRE(lt::train::config_get(rc.effective, e.path) != nullptr);
    CHECK(*lt::train::config_get(rc.effective, e.path) == e.default_value);
    CHECK_FALSE(e.description.empty());
  }
  CHECK(rc.effective.begin().key() == "description");
  // data.vocab_size 0 means the model's vocabulary for synthetic data.
  CHECK(rc.data.vocab_size == rc.model.vocab_size);
  CHECK(rc.train.schedule.total_steps == rc.train.steps);
}

TEST_CASE("config: values and overrides land in the typed structs", "[trainer][config]") {
  ojson j =
      ojson::parse(R"({"model": {"arch": "rwkv6", "hidden_size": 96}, "train": {"lr": 0.002, "lr_decay": "linear"}})");
  lt::train::config_apply_override(j, "train.batch_size=3");
  lt::train::config_apply_override(j, "model.tie_embeddings=true");
  lt::train::config_apply_override(j, "model.precision=bf16");
  lt::train::config_apply_override(j, "train.beta2=0.99");
  auto rc = lt::train::config_resolve(j);
  CHECK(rc.model.arch == lt::model::Arch::rwkv6);
  CHECK(rc.model.hidden_size == 96);
  CHECK(rc.model.tie_embeddings);
  CHECK(rc.model.precision == lt::model::Precision::bf16);
  CHECK(rc.train.batch_size == 3);
  CHECK(rc.train.schedule.lr == 0.002);
  CHECK(rc.train.schedule.decay == lt::optim::LrDecay::linear);
  CHECK(rc.train.adamw.beta2 == 0.99);
  CHECK((*lt::train::config_get(rc.effective, "train.batch_size")).get<int64_t>() == 3);
}

TEST_CASE("config: each kind of bad input names the key and the expected form", "[trainer][config]") {
  SECTION("unknown key, with a suggestion") {
    std::string e = resolve_error(ojson::parse(R"({"train": {"learning_rate": 0.1}})"));
    CHECK_THAT(e, Catch::Contains("'train.learning_rate' is unknown"));
    e = resolve_error(ojson::parse(R"({"train": {"batchsize": 4}})"));
    CHECK_THAT(e, Catch::Contains("train.batchsize"));
    e = resolve_error(ojson::parse(R"({"modle": {"arch": "kda"}})"));
    CHECK_THAT(e, Catch::Contains("'modle' is unknown"));
  }
  SECTION("wrong type") {
    std::string e = resolve_error(ojson::parse(R"({"train": {"steps": "many"}})"));
    CHECK_THAT(e, Catch::Contains("'train.steps'") && Catch::Contains("expected an integer"));
    e = resolve_error(ojson::parse(R"({"train": {"steps": 10.5}})"));
    CHECK_THAT(e, Catch::Contains("'train.steps'") && Catch::Contains("non-integer"));
    e = resolve_error(ojson::parse(R"({"model": {"tie_embeddings": 1}})"));
    CHECK_THAT(e, Catch::Contains("'model.tie_embeddings'") && Catch::Contains("true or false"));
    e = resolve_error(ojson::parse(R"({"model": 3})"));
    CHECK_THAT(e, Catch::Contains("'model'") && Catch::Contains("object"));
  }
  SECTION("out of range and not a choice") {
    std::string e = resolve_error(ojson::parse(R"({"train": {"min_lr_ratio": 1.5}})"));
    CHECK_THAT(e, Catch::Contains("'train.min_lr_ratio'") && Catch::Contains("in [0, 1]") && Catch::Contains("1.5"));
    e = resolve_error(ojson::parse(R"({"train": {"batch_size": 0}})"));
    CHECK_THAT(e, Catch::Contains("'train.batch_size'") && Catch::Contains("in [1, 1048576]"));
    e = resolve_error(ojson::parse(R"({"train": {"eval_every": -1}})"));
    CHECK_THAT(e, Catch::Contains("'train.eval_every'") && Catch::Contains("in [0, "));
    e = resolve_error(ojson::parse(R"({"model": {"chunk": 48}})"));
    CHECK_THAT(e, Catch::Contains("'model.chunk'") && Catch::Contains("one of 0, 16, 32, 64"));
    e = resolve_error(ojson::parse(R"({"model": {"arch": "gpt"}})"));
    CHECK_THAT(e, Catch::Contains("'model.arch'") && Catch::Contains("\"kda\", \"rwkv6\""));
    e = resolve_error(ojson::parse(R"({"device": "gpu"})"));
    CHECK_THAT(e, Catch::Contains("'device'"));
    CHECK_THAT(resolve_error(ojson::parse(R"({"device": "cuda:"})")), Catch::Contains("'device'"));
    CHECK_THAT(resolve_error(ojson::parse(R"({"device": "cuda:1x"})")), Catch::Contains("'device'"));
    CHECK(resolve_error(ojson::parse(R"({"device": "cuda:12"})")).empty());
  }
  SECTION("NaN and inf") {
    CHECK_THAT(override_error("train.lr=nan"), Catch::Contains("'train.lr'") && Catch::Contains("NaN"));
    CHECK_THAT(override_error("train.lr=inf"), Catch::Contains("'train.lr'") && Catch::Contains("NaN or inf"));
    // JSON has no NaN; a literal too large for a double is refused when the file is read.
    lt::traintest::TempDir tmp;
    lt::traintest::write_text(tmp / "huge.json", R"({"train": {"lr": 1e999}})");
    std::string e;
    try {
      lt::train::config_load_file(tmp / "huge.json");
    } catch (const ConfigError& x) { e = x.what(); }
    CHECK_THAT(e, Catch::Contains("huge.json") && Catch::Contains("1e999"));
  }
  SECTION("overrides are typed by the schema") {
    CHECK_THAT(override_error("train.steps=ten"), Catch::Contains("'train.steps'") && Catch::Contains("an integer"));
    CHECK_THAT(override_error("model.tie_embeddings=yes"), Catch::Contains("true or false"));
    CHECK_THAT(override_error("train.nope=1"), Catch::Contains("'train.nope' is unknown"));
    CHECK_THAT(override_error("train.lr"), Catch::Contains("key.path=value"));
  }
  SECTION("missing files") {
    lt::traintest::TempDir tmp;
    std::string e;
    try {
      lt::train::config_load_file(tmp / "absent.json");
    } catch (const ConfigError& x) { e = x.what(); }
    CHECK_THAT(e, Catch::Contains("absent.json"));
    lt::traintest::write_text(tmp / "bad.json", "{\"train\": {");
    e.clear();
    try {
      lt::train::config_load_file(tmp / "bad.json");
    } catch (const ConfigError& x) { e = x.what(); }
    CHECK_THAT(e, Catch::Contains("bad.json") && Catch::Contains("not valid JSON"));
    e = resolve_error(ojson{{"data", {{"source", "text"}, {"path", tmp / "no-such.txt"}}}});
    CHECK_THAT(e, Catch::Contains("'data.path'") && Catch::Contains("no-such.txt"));
    e = resolve_error(ojson{{"data", {{"source", "tokens"}}}});
    CHECK_THAT(e, Catch::Contains("'data.path'"));
  }
  SECTION("cross-key constraints name both keys") {
    std::string e = resolve_error(ojson::parse(R"({"model": {"vocab_size": 100}, "data": {"vocab_size": 200}})"));
    CHECK_THAT(e, Catch::Contains("data.vocab_size") && Catch::Contains("model.vocab_size"));
  }
}

TEST_CASE("config: diff lists changed keys; shape keys are the model's", "[trainer][config]") {
  auto a = lt::train::config_resolve(ojson::object()).effective;
  auto b = a;
  lt::train::config_set(b, "model.hidden_size", 128);
  lt::train::config_set(b, "train.steps", 5);
  auto d = lt::train::config_diff(a, b);
  REQUIRE(d.size() == 2);
  CHECK(d[0] == "model.hidden_size");
  CHECK(d[1] == "train.steps");
  const auto& shape = lt::train::config_shape_keys();
  CHECK(std::find(shape.begin(), shape.end(), "model.hidden_size") != shape.end());
  CHECK(std::find(shape.begin(), shape.end(), "train.steps") == shape.end());
}

TEST_CASE("config: every shipped config resolves and describes itself", "[trainer][config]") {
  std::filesystem::path configs = lt::traintest::source_dir() / "configs";
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(configs)) {
    if (f.path().extension() != ".json") continue;
    std::ifstream in(f.path());
    if (ojson::parse(in).contains("rows")) continue;  // a kbench row list (scripts/bench.sh), not a trainer config
    INFO(f.path());
    auto rc = lt::train::config_resolve(lt::train::config_load_file(f.path().string()));
    CHECK(rc.description.size() > 20);
    ++n;
  }
  CHECK(n >= 6);
}

TEST_CASE("config: data.eot_token comes from the tokenizer.json beside the shards unless given or off",
          "[trainer][config][segments]") {
  lt::traintest::TempDir tmp;
  lt::traintest::write_shard(tmp / "s.bin", std::vector<uint16_t>(600, 5));
  auto cfg = [&](const std::string& extra) {
    return ojson::parse(R"({"model": {"vocab_size": 300}, "data": {"source": "tokens", "path": ")" + (tmp / "s.bin") +
                        "\"" + extra + "}}");
  };
  CHECK(lt::train::config_resolve(cfg("")).data.eot_token == -1);  // no tokenizer.json
  std::filesystem::copy_file(lt::traintest::source_dir() / "tests" / "engine" / "data" / "fixtures" / "tokenizer.json",
                             tmp / "tokenizer.json");
  auto rc = lt::train::config_resolve(cfg(""));
  CHECK(rc.data.eot_token == 0);  // the fixture's <|endoftext|>
  CHECK(rc.data.reset_token() == 0);
  CHECK(lt::train::config_resolve(cfg(R"(, "eot_token": 7)")).data.eot_token == 7);
  rc = lt::train::config_resolve(cfg(R"(, "reset_state_at_eot": false)"));
  CHECK(rc.data.reset_token() == -1);
  CHECK_THAT(resolve_error(cfg(R"(, "eot_token": 300)")), Catch::Contains("'data.eot_token' (300)"));
  lt::traintest::write_text(tmp / "tokenizer.json", "{ not json");
  CHECK_THAT(resolve_error(cfg("")), Catch::Contains("data.eot_token") && Catch::Contains("tokenizer.json"));
  CHECK(lt::train::config_resolve(cfg(R"(, "reset_state_at_eot": false)")).data.eot_token == -1);
}
