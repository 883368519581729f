// Data loader: determinism by seed, MQAR structure, the byte stream's regularities, text
// and token-shard windows and splits, one error per bad input, exact resume from state(),
// and identical batches with and without prefetching, and with staging (slots of a host
// staging ring written by the prefetch thread, uploaded through data::upload).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "engine/data/loader.h"
#include "tests/engine/io/temp_dir.h"

using namespace lt;
using Catch::Matchers::Contains;
using data::Batch;
using data::DataConfig;
using data::Loader;
using data::Split;

namespace {

constexpr int32_t kShardMagic = 20240520;

// An llm.c shard written by hand: int32 header[256] {magic, version, n}, then uint16 tokens.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens, int32_t magic = kShardMagic,
                 int32_t version = 1, int64_t header_count = -1) {
  std::vector<uint8_t> bytes(1024 + 2 * tokens.size(), 0);
  const int32_t header[3] = {
      magic, version, static_cast<int32_t>(header_count >= 0 ? header_count : static_cast<int64_t>(tokens.size()))};
  std::memcpy(bytes.data(), header, sizeof header);
  if (!tokens.empty()) std::memcpy(bytes.data() + 1024, tokens.data(), 2 * tokens.size());
  test::write_bytes(path, bytes);
}

// Deterministic pseudo-random bytes (any 8 consecutive ones identify their position).
std::vector<uint8_t> noise_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

std::vector<Batch> draw(Loader& l, int n) {
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back(l.next());
  return out;
}

// Compares the rows wherever they are held (vectors, or a staging slot).
bool same(const Batch& a, const Batch& b) {
  if (a.B != b.B || a.T != b.T || a.valid_targets != b.valid_targets) return false;
  const size_t n = static_cast<size_t>(a.B * a.T);
  return a.token_data() && b.token_data() && std::equal(a.token_data(), a.token_data() + n, b.token_data()) &&
         std::equal(a.target_data(), a.target_data() + n, b.target_data());
}
bool same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return false;
  return true;
}

// Where row `row` of `b` (tokens then the last target) starts in `hay`, or -1; checks
// targets are the tokens shifted by one.
int64_t find_window(const Batch& b, int64_t row, const std::vector<int64_t>& hay) {
  std::vector<int64_t> w(static_cast<size_t>(b.T + 1));
  for (int64_t t = 0; t < b.T; ++t) {
    w[static_cast<size_t>(t)] = b.tokens[static_cast<size_t>(row * b.T + t)];
    if (t + 1 < b.T &&
        b.targets[static_cast<size_t>(row * b.T + t)] != b.tokens[static_cast<size_t>(row * b.T + t + 1)])
      return -1;
  }
  w[static_cast<size_t>(b.T)] = b.targets[static_cast<size_t>(row * b.T + b.T - 1)];
  const auto it = std::search(hay.begin(), hay.end(), w.begin(), w.end());
  return it == hay.end() ? -1 : static_cast<int64_t>(it - hay.begin());
}

template <class V>
std::vector<int64_t> widen(const V& v, size_t begin, size_t end) {
  return std::vector<int64_t>(v.begin() + static_cast<std::ptrdiff_t>(begin),
                              v.begin() + static_cast<std::ptrdiff_t>(end));
}

DataConfig synthetic(const std::string& task, int64_t vocab, int prefetch = 0) {
  DataConfig c;
  c.source = "synthetic";
  c.task = task;
  c.vocab_size = vocab;
  c.mqar_pairs = 8;
  c.prefetch = prefetch;
  return c;
}

std::string loader_error(const DataConfig& c, Split split = Split::train, int64_t T = 16) {
  return test::error_message([&] { Loader l(c, split, 2, T, 1); });
}

}  // namespace

TEST_CASE("data: synthetic sources are deterministic by seed; seeds and splits differ", "[data]") {
  for (const char* task : {"mqar", "bytes"}) {
    INFO(task);
    const DataConfig c = synthetic(task, 128);
    Loader a(c, Split::train, 4, 64, 7), b(c, Split::train, 4, 64, 7), other(c, Split::train, 4, 64, 8),
        val(c, Split::val, 4, 64, 7);
    const auto ba = draw(a, 5), bb = draw(b, 5), bo = draw(other, 5), bv = draw(val, 5);
    CHECK(same(ba, bb));
    for (int i = 0; i < 5; ++i) {
      CHECK(ba[static_cast<size_t>(i)].tokens != bo[static_cast<size_t>(i)].tokens);
      CHECK(ba[static_cast<size_t>(i)].tokens != bv[static_cast<size_t>(i)].tokens);
    }
    CHECK(ba[0].tokens != ba[1].tokens);  // successive batches differ
    CHECK(a.vocab_size() == 128);
  }
}

TEST_CASE("data: MQAR rows are key-value pairs then queries answered by their values", "[data]") {
  const int64_t V = 96, N = 8, B = 16, T = 64;
  DataConfig c = synthetic("mqar", V);
  c.mqar_pairs = N;
  Loader l(c, Split::train, B, T, 3);
  std::map<int64_t, int64_t> first_query_offset;  // how far the first query lies into the region
  for (int rep = 0; rep < 4; ++rep) {
    const Batch b = l.next();
    REQUIRE(b.tokens.size() == static_cast<size_t>(B * T));
    CHECK(b.valid_targets == B * N);
    int64_t valid = 0;
    for (int64_t r = 0; r < B; ++r) {
      const int32_t* tok = b.tokens.data() + r * T;
      const int32_t* tgt = b.targets.data() + r * T;
      std::map<int32_t, int32_t> value_of;
      std::set<int32_t> values;
      for (int64_t j = 0; j < N; ++j) {
        const int32_t k = tok[2 * j], v = tok[2 * j + 1];
        CHECK((k >= 1 && k < V / 2));   // keys: lower half (0 excluded)
        CHECK((v >= V / 2 && v < V));   // values: upper half
        CHECK(value_of.count(k) == 0);  // distinct keys
        CHECK(values.count(v) == 0);    // distinct values
        value_of[k] = v;
        values.insert(v);
        CHECK(tgt[2 * j] == -100);
        CHECK(tgt[2 * j + 1] == -100);
      }
      std::set<int32_t> queried;
      int64_t first = -1;
      for (int64_t t = 2 * N; t < T; ++t) {
        CHECK((tok[t] >= 0 && tok[t] < V));
        if (tgt[t] == -100) continue;
        ++valid;
        CHECK((t - 2 * N) % 2 == 0);  // queries at even offsets of the query region
        REQUIRE(value_of.count(tok[t]) == 1);
        CHECK(tgt[t] == value_of[tok[t]]);  // the answer is the key's value
        CHECK(queried.insert(tok[t]).second);
        if (first < 0) first = t - 2 * N;
      }
      CHECK(queried.size() == static_cast<size_t>(N));  // every key queried once
      ++first_query_offset[first];
    }
    CHECK(valid == b.valid_targets);
  }
  CHECK(first_query_offset.size() > 1);  // query placement varies between rows

  // The configuration errors name the key.
  DataConfig big = c;
  big.mqar_pairs = 20;
  CHECK_THAT(test::error_message([&] { Loader x(big, Split::train, 2, 64, 1); }),
             Contains("mqar_pairs 20") && Contains("T >= 4 x pairs = 80"));
  DataConfig small_vocab = c;
  small_vocab.vocab_size = 16;
  CHECK_THAT(loader_error(small_vocab, Split::train, 64), Contains("vocab_size 16") && Contains("mqar_pairs 8"));
  DataConfig task = c;
  task.task = "parity";
  CHECK_THAT(loader_error(task), Contains("unknown synthetic task 'parity'"));
}

TEST_CASE("data: an MQAR training mixture draws rows of each pair count; validation rows keep mqar_pairs", "[data]") {
  const int64_t V = 512, B = 64, T = 128;
  DataConfig c = synthetic("mqar", V);
  c.mqar_pairs = 16;
  c.mqar_min_pairs = 2;  // levels 2, 4, 8, 16: half the rows 2, a sixth each of the others
  Loader train(c, Split::train, B, T, 5);
  std::map<int64_t, int64_t> rows_with;  // pairs -> rows
  for (int rep = 0; rep < 8; ++rep) {
    const Batch b = train.next();
    int64_t valid = 0;
    for (int64_t r = 0; r < B; ++r) {
      const int32_t* tok = b.tokens.data() + r * T;
      const int32_t* tgt = b.targets.data() + r * T;
      int64_t n = 0;
      for (int64_t t = 0; t < T; ++t) n += tgt[t] != -100;
      valid += n;
      ++rows_with[n];
      for (int64_t j = 0; j < n; ++j) CHECK((tok[2 * j] >= 1 && tok[2 * j] < V / 2));  // the row's keys lead it
      for (int64_t t = 0; t < 2 * n; ++t) CHECK(tgt[t] == -100);
    }
    CHECK(valid == b.valid_targets);
  }
  REQUIRE(rows_with.size() == 4);
  CHECK(rows_with.count(2) == 1);
  CHECK(rows_with.count(16) == 1);
  const double half = static_cast<double>(rows_with[2]) / (8.0 * B);
  INFO("share of 2-pair rows " << half);
  CHECK((half > 0.4 && half < 0.6));
  Loader val(c, Split::val, B, T, 5);
  CHECK(val.next().valid_targets == B * 16);  // validation: the hard setting only

  // Without a mixture (0, or equal to mqar_pairs) the rows are those of a plain source.
  DataConfig plain = c;
  plain.mqar_min_pairs = 0;
  DataConfig same = c;
  same.mqar_min_pairs = 16;
  Loader a(plain, Split::train, B, T, 9), b(same, Split::train, B, T, 9);
  const Batch ba = a.next(), bb = b.next();
  CHECK(ba.tokens == bb.tokens);
  CHECK(ba.targets == bb.targets);
  CHECK(ba.valid_targets == B * 16);
  DataConfig bad = c;
  bad.mqar_min_pairs = 17;
  CHECK_THAT(loader_error(bad, Split::train, T), Contains("mqar_min_pairs 17"));
}

TEST_CASE("data: the byte stream is in range, shifted by one, and predictable", "[data]") {
  const int64_t V = 256, B = 8, T = 128;
  Loader l(synthetic("bytes", V), Split::train, B, T, 5);
  // A bigram predictor (most frequent next token after each token) fitted on 20 batches and
  // scored on 10 others: chance is 1 / 256; the stream's phrases, counts and copies make
  // the next token far more predictable than that.
  std::vector<std::vector<int64_t>> bigram(static_cast<size_t>(V), std::vector<int64_t>(static_cast<size_t>(V), 0));
  int64_t hits = 0, scored = 0;
  for (int rep = 0; rep < 30; ++rep) {
    const Batch b = l.next();
    CHECK(b.valid_targets == B * T);
    for (int64_t r = 0; r < B; ++r)
      for (int64_t t = 0; t < T; ++t) {
        const size_t i = static_cast<size_t>(r * T + t);
        REQUIRE((b.tokens[i] >= 0 && b.tokens[i] < V));
        REQUIRE((b.targets[i] >= 0 && b.targets[i] < V));
        if (t + 1 < T) CHECK(b.targets[i] == b.tokens[i + 1]);
        auto& row = bigram[static_cast<size_t>(b.tokens[i])];
        if (rep < 20) {
          ++row[static_cast<size_t>(b.targets[i])];
        } else {
          const auto best = std::max_element(row.begin(), row.end()) - row.begin();
          hits += best == b.targets[i];
          ++scored;
        }
      }
  }
  const double accuracy = static_cast<double>(hits) / static_cast<double>(scored);
  INFO("bigram accuracy on held-out batches " << accuracy << " (chance " << 1.0 / V << ")");
  CHECK(accuracy > 0.15);  // over 38 x chance
}

TEST_CASE("data: text windows come from each file's split, never across files", "[data]") {
  test::TempDir dir;
  const std::vector<uint8_t> a = noise_bytes(200, 1), b = noise_bytes(120, 2);
  test::write_bytes(dir.file("b_second.txt"), b);
  test::write_bytes(dir.file("a_first.txt"), a);
  DataConfig c;
  c.source = "text";
  c.val_fraction = 0.1;
  const int64_t T = 8, B = 4;

  SECTION("one file") {
    c.path = dir.file("a_first.txt");
    Loader train(c, Split::train, B, T, 1), val(c, Split::val, B, T, 1);
    CHECK(train.vocab_size() == 256);
    const std::vector<int64_t> train_part = widen(a, 0, 180), val_part = widen(a, 180, 200);
    std::set<int64_t> starts;
    for (int i = 0; i < 500; ++i) {
      const Batch bt = train.next();
      CHECK(bt.valid_targets == B * T);
      for (int64_t r = 0; r < B; ++r) {
        const int64_t s = find_window(bt, r, train_part);
        REQUIRE(s >= 0);
        starts.insert(s);
      }
    }
    CHECK(starts.size() == 180 - T);  // every window start drawn, the last included
    CHECK(*starts.begin() == 0);
    CHECK(*starts.rbegin() == 180 - T - 1);
    for (int i = 0; i < 20; ++i) {
      const Batch bv = val.next();
      for (int64_t r = 0; r < B; ++r) CHECK(find_window(bv, r, val_part) >= 0);
    }
  }
  SECTION("a folder: files by name, each split on its own") {
    c.path = dir.path().string();
    Loader train(c, Split::train, B, T, 2), val(c, Split::val, B, T, 2);
    const std::vector<int64_t> a_train = widen(a, 0, 180), b_train = widen(b, 0, 108);
    const std::vector<int64_t> a_val = widen(a, 180, 200), b_val = widen(b, 108, 120);
    int from_a = 0, from_b = 0;
    for (int i = 0; i < 100; ++i) {
      const Batch bt = train.next(), bv = val.next();
      for (int64_t r = 0; r < B; ++r) {
        const bool in_a = find_window(bt, r, a_train) >= 0, in_b = find_window(bt, r, b_train) >= 0;
        CHECK(in_a != in_b);
        from_a += in_a;
        from_b += in_b;
        CHECK((find_window(bv, r, a_val) >= 0 || find_window(bv, r, b_val) >= 0));
      }
    }
    // Windows are drawn uniformly: a has 172 train windows, b 100.
    CHECK(from_a > from_b);
    CHECK(from_b > 100);
  }
  SECTION("a split too short for one window") {
    c.path = dir.file("b_second.txt");
    CHECK_THAT(loader_error(c, Split::val, 12),
               Contains(c.path) && Contains("no window of T + 1 = 13 tokens fits in the val split"));
  }
}

TEST_CASE("data: llm.c token shards round-trip through a glob", "[data]") {
  test::TempDir dir;
  const int64_t V = 50257;
  std::vector<uint16_t> s0(300), s1(200);
  for (size_t i = 0; i < s0.size(); ++i) s0[i] = static_cast<uint16_t>((i * 7919 + 13) % V);
  for (size_t i = 0; i < s1.size(); ++i) s1[i] = static_cast<uint16_t>((i * 104729 + 5) % V);
  s0[17] = V - 1;  // the largest valid token
  write_shard(dir.file("shard_000.bin"), s0);
  write_shard(dir.file("shard_001.bin"), s1);
  DataConfig c;
  c.source = "tokens";
  c.path = dir.file("shard_*.bin");
  c.vocab_size = V;
  c.val_fraction = 0.2;
  const int64_t T = 16, B = 3;
  Loader train(c, Split::train, B, T, 4), val(c, Split::val, B, T, 4);
  CHECK(train.vocab_size() == V);
  const std::vector<int64_t> t0 = widen(s0, 0, 240), t1 = widen(s1, 0, 160), v0 = widen(s0, 240, 300),
                             v1 = widen(s1, 160, 200);
  int from0 = 0, from1 = 0;
  for (int i = 0; i < 60; ++i) {
    const Batch bt = train.next(), bv = val.next();
    for (int64_t r = 0; r < B; ++r) {
      const bool in0 = find_window(bt, r, t0) >= 0, in1 = find_window(bt, r, t1) >= 0;
      CHECK(in0 != in1);
      from0 += in0;
      from1 += in1;
      CHECK((find_window(bv, r, v0) >= 0 || find_window(bv, r, v1) >= 0));
    }
  }
  CHECK(from0 > 0);
  CHECK(from1 > 0);

  // One file by name works as well.
  c.path = dir.file("shard_001.bin");
  Loader one(c, Split::train, B, T, 4);
  const Batch b1 = one.next();
  for (int64_t r = 0; r < B; ++r) CHECK(find_window(b1, r, t1) >= 0);
}

TEST_CASE("data: each bad input gets an error naming the file or key", "[data]") {
  test::TempDir dir;
  DataConfig text;
  text.source = "text";
  DataConfig tok;
  tok.source = "tokens";
  tok.vocab_size = 1000;
  std::vector<uint16_t> good(100);
  for (size_t i = 0; i < good.size(); ++i) good[i] = static_cast<uint16_t>(i * 9);

  SECTION("missing files") {
    text.path = dir.file("nope.txt");
    CHECK_THAT(loader_error(text), Contains(text.path) && Contains("does not exist"));
    tok.path = dir.file("nope.bin");
    CHECK_THAT(loader_error(tok), Contains(tok.path) && Contains("cannot open"));
    tok.path = dir.file("nope_*.bin");
    CHECK_THAT(loader_error(tok), Contains(tok.path) && Contains("no token shard matches"));
    text.path = "";
    CHECK_THAT(loader_error(text), Contains("data.path"));
  }
  SECTION("empty text") {
    text.path = dir.file("empty.txt");
    test::write_bytes(text.path, nullptr, 0);
    CHECK_THAT(loader_error(text), Contains(text.path) && Contains("is empty"));
    const std::string folder = dir.file("texts");
    std::filesystem::create_directory(folder);
    text.path = folder;
    CHECK_THAT(loader_error(text), Contains(folder) && Contains("holds no files"));
    test::write_bytes(folder + "/x.txt", nullptr, 0);
    CHECK_THAT(loader_error(text), Contains(folder) && Contains("is empty"));
  }
  SECTION("bad magic") {
    tok.path = dir.file("magic.bin");
    write_shard(tok.path, good, 20240519);
    CHECK_THAT(loader_error(tok), Contains(tok.path) && Contains("bad magic 20240519"));
  }
  SECTION("bad version") {
    tok.path = dir.file("version.bin");
    write_shard(tok.path, good, kShardMagic, 2);
    CHECK_THAT(loader_error(tok), Contains(tok.path) && Contains("unsupported version 2"));
  }
  SECTION("size mismatch") {
    tok.path = dir.file("size.bin");
    write_shard(tok.path, good, kShardMagic, 1, 101);
    CHECK_THAT(loader_error(tok), Contains(tok.path) && Contains("size mismatch: the header says 101 tokens"));
    test::write_bytes(tok.path, std::vector<uint8_t>(100, 0));
    CHECK_THAT(loader_error(tok), Contains(tok.path) && Contains("shorter than the 1024-byte header"));
  }
  SECTION("token >= vocab") {
    tok.path = dir.file("vocab.bin");
    good[42] = 1000;
    write_shard(tok.path, good);
    CHECK_THAT(loader_error(tok), Contains(tok.path) && Contains("token 1000 at index 42 is >= vocab_size 1000"));
    // Each loader checks the tokens of its split: one in the validation tail (the last 5 of
    // 100) stops the validation loader.
    good[42] = 5;
    good[97] = 4000;
    write_shard(tok.path, good);
    tok.val_fraction = 0.05;
    CHECK_THAT(loader_error(tok, Split::val, 2),
               Contains(tok.path) && Contains("token 4000 at index 97 is >= vocab_size 1000"));
    CHECK(loader_error(tok, Split::train, 2) == "(no exception)");
  }
  SECTION("unknown source and bad settings") {
    DataConfig c;
    c.source = "parquet";
    CHECK_THAT(loader_error(c), Contains("unknown source 'parquet'"));
    c = DataConfig{};
    c.prefetch = -1;
    CHECK_THAT(loader_error(c), Contains("prefetch -1"));
    tok.path = dir.file("ok.bin");
    write_shard(tok.path, good);
    tok.val_fraction = 1.0;
    CHECK_THAT(loader_error(tok), Contains("val_fraction 1"));
  }
}

TEST_CASE("data: state() and restore() continue exactly, with and without prefetch", "[data]") {
  test::TempDir dir;
  std::vector<uint16_t> s(400);
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint16_t>((i * 31) % 500);
  write_shard(dir.file("s.bin"), s);
  test::write_bytes(dir.file("t.txt"), noise_bytes(300, 9));
  std::vector<DataConfig> configs = {synthetic("mqar", 64), synthetic("bytes", 256)};
  DataConfig text;
  text.source = "text";
  text.path = dir.file("t.txt");
  configs.push_back(text);
  DataConfig tok;
  tok.source = "tokens";
  tok.path = dir.file("s.bin");
  tok.vocab_size = 500;
  configs.push_back(tok);

  for (DataConfig c : configs) {
    for (int prefetch : {0, 2}) {
      INFO(c.source << " " << c.task << " prefetch " << prefetch);
      c.prefetch = prefetch;
      Loader a(c, Split::train, 3, 32, 11);
      draw(a, 3);
      const std::string saved = a.state().dump();  // through text, as in a checkpoint
      const auto expected = draw(a, 4);

      Loader b(c, Split::train, 3, 32, 999);  // another seed: the state overrides it
      draw(b, 2);
      b.restore(nlohmann::json::parse(saved));
      CHECK(same(draw(b, 4), expected));
      CHECK(b.state().dump() == a.state().dump());

      a.restore(nlohmann::json::parse(saved));  // rewinding a running loader
      CHECK(same(draw(a, 4), expected));
    }
  }

  // A state from another configuration is refused, naming what differs.
  DataConfig c = synthetic("mqar", 64);
  Loader a(c, Split::train, 3, 32, 1);
  const nlohmann::json st = a.state();
  Loader longer(c, Split::train, 3, 64, 1);
  CHECK_THAT(test::error_message([&] { longer.restore(st); }), Contains("'T' is 32 in the saved state but 64"));
  Loader val(c, Split::val, 3, 32, 1);
  CHECK_THAT(test::error_message([&] { val.restore(st); }), Contains("'split'"));
  DataConfig bytes = synthetic("bytes", 64);
  Loader other(bytes, Split::train, 3, 32, 1);
  CHECK_THAT(test::error_message([&] { other.restore(st); }), Contains("'task'"));
  nlohmann::json broken = st;
  broken["rng"][2] = "xyz";
  CHECK_THAT(test::error_message([&] { a.restore(broken); }), Contains("bad rng word 'xyz'"));
  broken = st;
  broken.erase("batches");
  CHECK_THAT(test::error_message([&] { a.restore(broken); }), Contains("missing key 'batches'"));
}

TEST_CASE("data: prefetching does not change the batches", "[data]") {
  test::TempDir dir;
  test::write_bytes(dir.file("t.txt"), noise_bytes(500, 4));
  DataConfig text;
  text.source = "text";
  text.path = dir.file("t.txt");
  for (DataConfig c : {synthetic("mqar", 128), synthetic("bytes", 256), text}) {
    INFO(c.source << " " << c.task);
    c.prefetch = 0;
    Loader inline_loader(c, Split::train, 4, 48, 21);
    c.prefetch = 2;
    Loader ahead(c, Split::train, 4, 48, 21);
    c.prefetch = 5;
    Loader far_ahead(c, Split::train, 4, 48, 21);
    const auto want = draw(inline_loader, 20);
    CHECK(same(draw(ahead, 20), want));
    CHECK(same(draw(far_ahead, 20), want));
    CHECK(ahead.state() == inline_loader.state());
  }
}

TEST_CASE("data: a staging loader writes the same batches into staging slots; upload returns the slots",
          "[data][staging]") {
  for (DataConfig c : {synthetic("mqar", 128), synthetic("bytes", 256)}) {
    for (int prefetch : {0, 2}) {
      INFO(c.task << " prefetch " << prefetch);
      c.prefetch = prefetch;
      Loader plain(c, Split::train, 3, 40, 5);
      Loader staged(c, Split::train, 3, 40, 5, data::Staging{Device::cpu(), 3});
      REQUIRE(staged.staging() != nullptr);
      CHECK(plain.staging() == nullptr);
      const auto want = draw(plain, 12);
      for (int i = 0; i < 12; ++i) {
        Batch b = staged.next();
        REQUIRE(b.staged);
        CHECK(b.tokens.empty());
        CHECK(same(b, want[static_cast<size_t>(i)]));
        data::DeviceBatch d = data::upload(b, Device::cpu());
        CHECK_FALSE(b.staged);  // the slot went back with the copy
        REQUIRE(d.tokens.shape() == Shape{3, 40});
        REQUIRE(d.targets.shape() == Shape{3, 40});
        const auto& w = want[static_cast<size_t>(i)];
        std::vector<double> tok = d.tokens.to_vector(), tgt = d.targets.to_vector();
        CHECK(std::equal(tok.begin(), tok.end(), w.tokens.begin()));
        CHECK(std::equal(tgt.begin(), tgt.end(), w.targets.begin()));
      }
      CHECK(staged.state() == plain.state());
      // Nothing held beyond the queue and the slot being filled: the ring did not grow.
      CHECK(staged.staging()->stats().grown == 0);
      // Uploading again is an error, not stale data.
      Batch b = staged.next();
      data::upload(b, Device::cpu());
      CHECK_THROWS_WITH(data::upload(b, Device::cpu()), Contains("holds no data"));
    }
  }
  // A consumer that keeps more batches than there are slots: the ring grows instead of
  // blocking, and restore() still continues exactly.
  DataConfig c = synthetic("mqar", 64, 2);
  Loader plain(c, Split::train, 2, 40, 8);
  Loader staged(c, Split::train, 2, 40, 8, data::Staging{Device::cpu(), 2});
  const auto want = draw(plain, 10);
  const auto kept = draw(staged, 10);
  CHECK(same(kept, want));
  CHECK(staged.staging()->stats().grown > 0);
  const nlohmann::json saved = plain.state();
  const auto more = draw(plain, 3);
  staged.restore(saved);
  CHECK(same(draw(staged, 3), more));
}

TEST_CASE("data: row slices of a batch are its rows; the position does not depend on the slicing", "[data][dist]") {
  for (DataConfig c : {synthetic("mqar", 64), synthetic("bytes", 256)}) {
    for (int prefetch : {0, 2}) {
      INFO(c.task << " prefetch " << prefetch);
      c.prefetch = prefetch;
      const int64_t B = 6, T = 64;
      Loader whole(c, Split::train, B, T, 5);
      std::vector<std::unique_ptr<Loader>> parts;  // 3 ranks of 2 rows, staged like the trainer's
      for (int r = 0; r < 3; ++r)
        parts.push_back(std::make_unique<Loader>(c, Split::train, B, T, 5, data::Staging{Device::cpu(), 0},
                                                 data::RowSlice{2 * r, 2}));
      for (int step = 0; step < 3; ++step) {
        Batch w = whole.next();
        int64_t valid = 0;
        for (int r = 0; r < 3; ++r) {
          Batch p = parts[static_cast<size_t>(r)]->next();
          REQUIRE(p.B == 2);
          CHECK(p.global_valid_targets == w.valid_targets);
          valid += p.valid_targets;
          const size_t n = static_cast<size_t>(2 * T), off = static_cast<size_t>(2 * r * T);
          CHECK(std::equal(p.token_data(), p.token_data() + n, w.token_data() + off));
          CHECK(std::equal(p.target_data(), p.target_data() + n, w.target_data() + off));
        }
        CHECK(valid == w.valid_targets);
      }
      // The saved position is the whole batch's: any slicing resumes from it.
      for (const auto& p : parts) CHECK(p->state().dump() == whole.state().dump());
    }
  }
  DataConfig c = synthetic("mqar", 64);
  CHECK_THAT(test::error_message([&] {
               Loader bad(c, Split::train, 4, 8, 1, std::nullopt, data::RowSlice{3, 2});
             }),
             Contains("row slice [3, 5) is not within the batch of 4 rows"));
}

TEST_CASE("data: with restarts at the end-of-text token, a target equal to it is not scored", "[data][segments]") {
  test::TempDir dir;
  // Documents of 1..9 tokens, each opened by the end-of-text token 0 (llm.c's layout).
  std::vector<uint16_t> toks;
  for (int d = 0; toks.size() < 400; ++d) {
    toks.push_back(0);
    for (int i = 0; i < 1 + d % 9; ++i) toks.push_back(static_cast<uint16_t>(1 + (d * 31 + i * 7) % 50));
  }
  write_shard(dir.file("docs.bin"), toks);
  DataConfig c;
  c.source = "tokens";
  c.path = dir.file("docs.bin");
  c.vocab_size = 64;
  c.eot_token = 0;
  const int64_t B = 4, T = 32;
  for (bool reset : {true, false}) {
    c.reset_state_at_eot = reset;
    CHECK(c.reset_token() == (reset ? 0 : -1));
    Loader l(c, Split::train, B, T, 5);
    for (int i = 0; i < 10; ++i) {
      const Batch b = l.next();
      int64_t valid = 0, masked = 0;
      for (int64_t j = 0; j < B * T; ++j) {
        const int32_t tok = b.token_data()[j], tgt = b.target_data()[j];
        CHECK(tok < 64);
        if (tgt == -100) ++masked;
        else ++valid;
        // the row's next token is an end-of-text exactly where the target is masked (with restarts)
        if (j % T + 1 < T) CHECK((b.token_data()[j + 1] == 0 && reset) == (tgt == -100));
      }
      CHECK(valid == b.valid_targets);
      if (!reset) CHECK(masked == 0);
      if (reset) CHECK(masked > 0);
    }
  }
  // The synthetic source never restarts.
  DataConfig s;
  s.eot_token = 3;
  CHECK(s.reset_token() == -1);
}
