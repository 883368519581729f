// Byte-level BPE tokenizer (engine/data/tokenizer.h) against the Python `tokenizers` package:
// the fixtures in tests/engine/data/fixtures/ (tokenizer.json trained as prepare_tokens.py
// trains, tokenizer_cases.txt, and the ids the package gave for each case, with and without
// add_prefix_space, in tokenizer_cases.json) are written by scripts/make_tokenizer_fixture.py.
// Also: the pre-tokenizer split by hand, encode → decode identity on random UTF-8, the byte
// alphabet, errors naming the file and the unsupported component, and the sample command's
// prompt encoding (engine/train/loop.h) with and without a tokenizer.json.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "engine/data/tokenizer.h"
#include "engine/train/config.h"
#include "engine/train/prompt.h"
#include "tests/engine/io/temp_dir.h"
#include "tests/support/test_seed.h"

using namespace lt;
using Catch::Matchers::Contains;
using data::Tokenizer;

namespace {

namespace fs = std::filesystem;

// tests/engine/data/fixtures: under $LINTRAIN_TEST_DATA (CTest sets it to <source>/tests), else
// under the working directory (the checkout's root), else in the first folder above the test
// binary that holds it.
fs::path fixtures() {
  const fs::path rel = fs::path("engine") / "data" / "fixtures";
  if (const char* root = std::getenv("LINTRAIN_TEST_DATA")) return fs::path(root) / rel;
  if (fs::exists(fs::current_path() / "tests" / rel / "tokenizer.json")) return fs::current_path() / "tests" / rel;
  for (auto p = fs::read_symlink("/proc/self/exe").parent_path(); p.has_relative_path(); p = p.parent_path())
    if (fs::exists(p / "tests" / rel / "tokenizer.json")) return p / "tests" / rel;
  throw std::runtime_error("tests/engine/data/fixtures not found: set LINTRAIN_TEST_DATA to <source>/tests");
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string fixture_tokenizer_path() { return (fixtures() / "tokenizer.json").string(); }

nlohmann::json fixture_tokenizer_json() { return nlohmann::json::parse(read_text(fixture_tokenizer_path())); }

void write_text(const std::string& path, const std::string& text) { test::write_bytes(path, text.data(), text.size()); }

void append_utf8(std::string& s, char32_t c) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// A random valid UTF-8 string of up to 40 code points: ASCII (spaces, tabs, newlines and
// apostrophes often), pieces of contractions and of the end-of-text token, Latin, Cyrillic,
// CJK, emoji and combining marks, and any scalar value (surrogates excluded).
std::string random_utf8(std::mt19937_64& rng) {
  static const std::vector<std::string> pieces = {" ",   "  ",  "\t", "\n", "\r\n",        "'",           "'s",
                                                  "'ll", "'re", "<|", "|>", "<|endoftext", "endoftext|>", "\xC2\xA0"};
  static const std::vector<char32_t> chars = {U'é',    U'ß',   U'Ж',   U'ё', U'日', U'本', U'한',  U'👍',
                                              U'🏽', 0x200D, 0x0301, U'½', U'Ⅻ',  U'٣',  0x3000, 0x2028};
  std::string s;
  const int n = static_cast<int>(rng() % 41);
  for (int i = 0; i < n; ++i) {
    switch (rng() % 6) {
      case 0: s += pieces[rng() % pieces.size()]; break;
      case 1: append_utf8(s, chars[rng() % chars.size()]); break;
      case 2:
      case 3: s += static_cast<char>(0x20 + rng() % 0x5F); break;  // printable ASCII
      case 4: append_utf8(s, static_cast<char32_t>(rng() % 0x80)); break;
      default: {
        char32_t c = static_cast<char32_t>(rng() % 0x110000);
        if (c >= 0xD800 && c <= 0xDFFF) c -= 0x800;
        append_utf8(s, c);
      }
    }
  }
  return s;
}

}  // namespace

TEST_CASE("tokenizer: the ids of the Python package for every fixture case", "[tokenizer]") {
  const Tokenizer tok = Tokenizer::from_file(fixture_tokenizer_path());
  nlohmann::json spaced_json = fixture_tokenizer_json();
  spaced_json["pre_tokenizer"]["add_prefix_space"] = true;
  const Tokenizer spaced = Tokenizer::from_json_text(spaced_json.dump(), "tokenizer.json (add_prefix_space)");
  CHECK(tok.vocab_size() == 400);

  const auto cases = nlohmann::json::parse(read_text(fixtures() / "tokenizer_cases.json"))["cases"];
  const std::string text = read_text(fixtures() / "tokenizer_cases.txt");
  // Each line of tokenizer_cases.txt, then the whole file: the JSON holds the same texts.
  REQUIRE(cases.size() >= 10);
  CHECK(cases.back()["text"].get<std::string>() == text);
  for (const auto& c : cases) {
    const std::string t = c["text"].get<std::string>();
    INFO("text: " << nlohmann::json(t).dump());
    const auto ids = tok.encode(t);
    CHECK(ids == c["ids"].get<std::vector<int32_t>>());
    CHECK(tok.decode(ids) == t);
    CHECK(spaced.encode(t) == c["ids_prefix_space"].get<std::vector<int32_t>>());
  }
}

TEST_CASE("tokenizer: the GPT-2 pre-tokenizer split, by hand", "[tokenizer]") {
  using V = std::vector<std::string_view>;
  CHECK(data::byte_level_split("") == V{});
  CHECK(data::byte_level_split("I'm here, they'll see") == V{"I", "'m", " here", ",", " they", "'ll", " see"});
  CHECK(data::byte_level_split("'S 'x ''s") == V{"'", "S", " '", "x", " ''", "s"});  // contractions: lower case only
  CHECK(data::byte_level_split("abc123 45.6!!") == V{"abc", "123", " 45", ".", "6", "!!"});
  // Whitespace: a run before a word gives up its last space to the word; at the end it stays whole.
  CHECK(data::byte_level_split("a   b") == V{"a", "  ", " b"});
  CHECK(data::byte_level_split("a \tb") == V{"a", " ", "\t", "b"});
  CHECK(data::byte_level_split("x\n\ny  ") == V{"x", "\n", "\n", "y", "  "});
  CHECK(data::byte_level_split(" !?") == V{" !?"});
  // Non-ASCII letters and numbers (\p{L}, \p{N}), marks and emoji (neither).
  CHECK(data::byte_level_split("Straße Ёлка 日本 ½Ⅻ") == V{"Straße", " Ёлка", " 日本", " ½Ⅻ"});
  CHECK(data::byte_level_split("e\xCC\x81 👍🏽x") == V{"e", "\xCC\x81", " 👍🏽", "x"});
  // U+00A0 and U+3000 are whitespace, but only U+0020 joins the following word.
  CHECK(data::byte_level_split("a\xC2\xA0"
                               "b") == V{"a", "\xC2\xA0", "b"});
  CHECK_THROWS_WITH(data::byte_level_split("ok\xC3("), Contains("not valid UTF-8 at byte 2"));
  CHECK_THROWS_WITH(data::byte_level_split("\xED\xA0\x80"), Contains("not valid UTF-8"));  // a surrogate
  CHECK_THROWS_WITH(data::byte_level_split("\xC0\xAF"), Contains("not valid UTF-8"));      // overlong
}

TEST_CASE("tokenizer: the byte alphabet", "[tokenizer]") {
  const auto a = data::byte_level_alphabet();
  REQUIRE(a.size() == 256);
  CHECK(std::set<std::string>(a.begin(), a.end()).size() == 256);
  CHECK(a['A'] == "A");
  CHECK(a['~'] == "~");
  CHECK(a[0xE9] == "\xC3\xA9");  // é stands for itself
  CHECK(a[0] == "\xC4\x80");     // U+0100
  CHECK(a[' '] == "\xC4\xA0");   // U+0120 "Ġ"
  CHECK(a['\n'] == "\xC4\x8A");  // U+010A "Ċ"
  CHECK(a[0xAD] == "\xC5\x83");  // U+0143, the last stand-in
}

TEST_CASE("tokenizer: encode then decode is the identity on random UTF-8", "[tokenizer]") {
  const Tokenizer tok = Tokenizer::from_file(fixture_tokenizer_path());
  std::mt19937_64 rng(testing::test_seed() + 34);
  for (int i = 0; i < 3000; ++i) {
    const std::string s = random_utf8(rng);
    const auto ids = tok.encode(s);
    INFO("text: " << nlohmann::json(s).dump() << testing::replay_hint());
    REQUIRE(tok.decode(ids) == s);
    for (int32_t id : ids) REQUIRE((id >= 0 && id < tok.vocab_size()));
  }
}

TEST_CASE("tokenizer: decode skips unknown ids and gives added tokens as text", "[tokenizer]") {
  const Tokenizer tok = Tokenizer::from_file(fixture_tokenizer_path());
  const auto ids = tok.encode("a<|endoftext|>b");
  REQUIRE(ids.size() == 3);
  CHECK(ids[1] == 0);
  CHECK(tok.decode({ids[0], -1, 100000, ids[1], ids[2]}) == "a<|endoftext|>b");
  CHECK_THROWS_WITH(tok.encode("\xFF"), Contains("not valid UTF-8 at byte 0"));
}

TEST_CASE("tokenizer: an unsupported tokenizer.json names the file and the component", "[tokenizer]") {
  test::TempDir tmp;
  const std::string path = tmp.file("tokenizer.json");
  auto error_for = [&](const nlohmann::json& j) {
    write_text(path, j.dump());
    return test::error_message([&] { Tokenizer::from_file(path); });
  };
  {
    nlohmann::json j = fixture_tokenizer_json();
    j["model"]["type"] = "WordPiece";
    const std::string e = error_for(j);
    CHECK_THAT(e, Contains(path) && Contains("model.type") && Contains("WordPiece"));
  }
  {
    nlohmann::json j = fixture_tokenizer_json();
    j["normalizer"] = {{"type", "NFC"}};
    CHECK_THAT(error_for(j), Contains(path) && Contains("normalizer") && Contains("NFC"));
  }
  {
    nlohmann::json j = fixture_tokenizer_json();
    j["pre_tokenizer"] = {{"type", "Metaspace"}};
    CHECK_THAT(error_for(j), Contains(path) && Contains("pre_tokenizer.type") && Contains("Metaspace"));
  }
  {
    nlohmann::json j = fixture_tokenizer_json();
    j["model"]["byte_fallback"] = true;
    CHECK_THAT(error_for(j), Contains(path) && Contains("model.byte_fallback"));
  }
  {
    nlohmann::json j = fixture_tokenizer_json();
    j["added_tokens"][0]["lstrip"] = true;
    CHECK_THAT(error_for(j), Contains(path) && Contains("added_tokens[0].lstrip"));
  }
  {
    nlohmann::json j = fixture_tokenizer_json();
    j["decoder"] = {{"type", "WordPiece"}};
    CHECK_THAT(error_for(j), Contains(path) && Contains("decoder.type"));
  }
  {
    nlohmann::json j = fixture_tokenizer_json();
    j["model"]["merges"][3] = {"no-such-token", "x"};
    CHECK_THAT(error_for(j), Contains(path) && Contains("model.merges[3]"));
  }
  write_text(path, "{\"model\": ");
  CHECK_THAT(test::error_message([&] { Tokenizer::from_file(path); }), Contains(path) && Contains("not JSON"));
  CHECK_THAT(test::error_message([&] { Tokenizer::from_file(tmp.file("missing.json")); }),
             Contains("missing.json") && Contains("cannot be read"));
}

TEST_CASE("tokenizer: sample prompts are text with a tokenizer.json, ids without", "[tokenizer][train]") {
  test::TempDir tmp;
  train::RunConfig rc;
  rc.data.source = "tokens";
  rc.data.path = tmp.file("tokens_*.bin");
  rc.model.vocab_size = 400;
  // No tokenizer.json beside the shards: ids, and text is an error that says so.
  CHECK(train::encode_prompt(rc, "12, 7 99") == std::vector<int32_t>{12, 7, 99});
  CHECK_THAT(test::error_message([&] { train::encode_prompt(rc, "def "); }), Contains("give ids separated by spaces"));

  fs::copy_file(fixture_tokenizer_path(), tmp.file("tokenizer.json"));
  const Tokenizer tok = Tokenizer::from_file(fixture_tokenizer_path());
  CHECK(train::encode_prompt(rc, "def ") == tok.encode("def "));
  CHECK(train::encode_prompt(rc, "12 7") == tok.encode("12 7"));  // text now, not ids
  CHECK(train::decode_tokens(rc, train::encode_prompt(rc, "def f(x):\n  return 'é'")) == "def f(x):\n  return 'é'");
  rc.model.vocab_size = 100;  // a tokenizer larger than the model
  CHECK_THAT(test::error_message([&] { train::encode_prompt(rc, "Привет"); }),
             Contains("tokenizer.json") && Contains("outside the model's vocab 100"));

  // Byte vocabularies: bytes in, bytes out, as before.
  train::RunConfig bytes;
  bytes.data.source = "text";
  CHECK(train::encode_prompt(bytes, "h\xC3\xA9") == std::vector<int32_t>{'h', 0xC3, 0xA9});
  CHECK(train::decode_tokens(bytes, {'h', 0xC3, 0xA9}) == "h\xC3\xA9");
}
