// Checkpoint folders: atomic write, manifest verification (truncated, corrupted, missing
// manifest), newest-that-verifies selection, keep-the-last-K.
#include <catch2/catch.hpp>

#include <filesystem>

#include "engine/ops.h"
#include "engine/train/checkpoint.h"
#include "tests/engine/train/trainer_test_util.h"

namespace fs = std::filesystem;

namespace {
std::vector<lt::io::NamedTensor> some_weights(uint64_t seed) {
  return {{"model.embeddings.weight", lt::ops::randn({16, 8}, seed)},
          {"model.norm.weight", lt::ops::randn({8}, seed + 1)}};
}
std::string write_step(const std::string& out, int64_t step, int64_t keep = 10) {
  nlohmann::json state = {{"step", step}, {"data", {{"drawn", step * 3}}}};
  return lt::train::checkpoint_write(out, step, some_weights(static_cast<uint64_t>(step)),
                                     {{"m.model.norm.weight", lt::ops::randn({8}, 99)}}, state,
                                     R"({"train":{"steps":10}})", keep);
}
}  // namespace

TEST_CASE("checkpoint: write, verify, load round-trip", "[trainer][checkpoint]") {
  lt::traintest::TempDir tmp;
  std::string dir = write_step(tmp.path.string(), 7);
  CHECK(fs::path(dir).filename() == "step-00000007");
  CHECK(lt::train::checkpoint_verify(dir).empty());
  auto c = lt::train::checkpoint_load(dir);
  CHECK(c.step == 7);
  CHECK(c.loop_state["data"]["drawn"] == 21);
  CHECK(c.config["train"]["steps"] == 10);
  auto w = some_weights(7);
  CHECK(lt::ops::max_abs_diff(c.model.get("model.embeddings.weight"), w[0].tensor) == 0.0);
  CHECK(c.state.has("m.model.norm.weight"));
  // No temporary folder is left behind.
  for (const auto& e : fs::directory_iterator(tmp.path)) CHECK(e.path().filename().string().rfind(".step-", 0) != 0);
}

TEST_CASE("checkpoint: a truncated, corrupted or unfinished newest one is skipped", "[trainer][checkpoint]") {
  lt::traintest::TempDir tmp;
  const std::string out = tmp.path.string();
  write_step(out, 1);
  std::string d2 = write_step(out, 2);
  std::string d3 = write_step(out, 3);
  REQUIRE(*lt::train::checkpoint_find_latest(out) == d3);

  SECTION("truncated file") {
    fs::resize_file(d3 + "/model.safetensors", fs::file_size(d3 + "/model.safetensors") - 10);
    CHECK_THAT(lt::train::checkpoint_verify(d3), Catch::Contains("model.safetensors") && Catch::Contains("truncated"));
    CHECK(*lt::train::checkpoint_find_latest(out) == d2);
    CHECK_THROWS_WITH(lt::train::checkpoint_load(d3), Catch::Contains("does not verify"));
  }
  SECTION("corrupted byte, same size") {
    std::string p = d3 + "/state.safetensors";
    std::string bytes = lt::traintest::read_text(p);
    bytes[bytes.size() - 3] ^= 0x40;
    lt::traintest::write_text(p, bytes);
    CHECK_THAT(lt::train::checkpoint_verify(d3), Catch::Contains("state.safetensors") && Catch::Contains("checksum"));
    CHECK(*lt::train::checkpoint_find_latest(out) == d2);
  }
  SECTION("manifest missing (interrupted before the last write)") {
    fs::remove(d3 + "/manifest.json");
    CHECK_THAT(lt::train::checkpoint_verify(d3), Catch::Contains("manifest.json is missing"));
    CHECK(*lt::train::checkpoint_find_latest(out) == d2);
  }
  SECTION("every one broken: none") {
    for (const auto& d : lt::train::checkpoint_list(out)) fs::remove(d + "/manifest.json");
    CHECK_FALSE(lt::train::checkpoint_find_latest(out).has_value());
  }
}

TEST_CASE("checkpoint: keeps the last K, replaces a rewritten step", "[trainer][checkpoint]") {
  lt::traintest::TempDir tmp;
  const std::string out = tmp.path.string();
  for (int64_t s = 1; s <= 5; ++s) write_step(out, s * 10, 2);
  auto all = lt::train::checkpoint_list(out);
  REQUIRE(all.size() == 2);
  CHECK(fs::path(all[0]).filename() == "step-00000050");
  CHECK(fs::path(all[1]).filename() == "step-00000040");
  write_step(out, 50, 2);
  CHECK(lt::train::checkpoint_list(out).size() == 2);
  CHECK(lt::train::checkpoint_verify(all[0]).empty());
}

TEST_CASE("checkpoint: FNV-1a 64 of a known string", "[trainer][checkpoint]") {
  lt::traintest::TempDir tmp;
  lt::traintest::write_text(tmp / "a", "a");
  CHECK(lt::train::file_fnv1a64(tmp / "a") == 0xaf63dc4c8601ec8cull);  // FNV-1a 64 of "a"
}
