// safetensors I/O: round trip of every dtype (contiguous and strided views, bit-exact),
// metadata and file order, the byte layout checked by hand against the format, atomic
// replacement, and one error message per kind of damaged file.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"
#include "engine/tensor.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/io/temp_dir.h"

using namespace lt;
using Catch::Matchers::Contains;

namespace {

// Raw bytes of a tensor in row-major order (what the file must hold).
std::vector<uint8_t> tensor_bytes(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  std::vector<uint8_t> out(c.nbytes());
  if (!out.empty()) std::memcpy(out.data(), c.data_ptr(), out.size());
  return out;
}

// A file in the safetensors layout with the given header text (not padded) and data.
void write_raw_safetensors(const std::string& path, const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes(8);
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  test::write_bytes(path, bytes);
}

Tensor int_tensor(const Shape& shape, DType dtype, int64_t lo, int64_t step) {
  std::vector<int64_t> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = lo + static_cast<int64_t>(i) * step;
  return Tensor::from_vector(v, shape, dtype);
}

}  // namespace

TEST_CASE("safetensors: every dtype round-trips bit-exactly, views included", "[io][safetensors]") {
  test::TempDir dir;
  const std::string path = dir.file("all.safetensors");
  std::vector<io::NamedTensor> tensors;
  uint64_t seed = 11;
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    const Tensor base = test::random_tensor({5, 6}, seed++, dt);  // [5, 6]
    const std::string n = dtype_name(dt);
    tensors.push_back({n + ".contiguous", base});
    tensors.push_back({n + ".transposed", base.transpose(0, 1)});                          // [6, 5], strides [1, 6]
    tensors.push_back({n + ".strided", base.slice(1, 1, 6, 2).narrow(0, 1, 3)});           // [3, 3]
    tensors.push_back({n + ".broadcast", base.select(0, 2).unsqueeze(0).expand({4, 6})});  // stride 0
  }
  tensors.push_back({"i64", int_tensor({3, 4}, DType::i64, -(int64_t{1} << 40), (int64_t{1} << 35) + 7)});
  tensors.push_back({"i64.transposed", int_tensor({3, 4}, DType::i64, 5, -123456789).transpose(0, 1)});
  tensors.push_back({"i32", int_tensor({7}, DType::i32, -2'000'000'000, 600'000'001)});
  tensors.push_back({"i32.strided", int_tensor({4, 5}, DType::i32, -9, 3).slice(0, 0, 4, 3)});
  tensors.push_back({"u16", int_tensor({2, 9}, DType::u16, 65535 - 17 * 8000, 8000)});
  tensors.push_back({"u16.transposed", int_tensor({2, 9}, DType::u16, 3, 7000).transpose(0, 1)});
  tensors.push_back({"scalar", Tensor::from_vector(std::vector<double>{-3.25}, {}, DType::f32)});
  tensors.push_back({"empty", Tensor::empty({0, 3}, DType::f32)});
  for (const auto& nt : tensors)
    if (nt.name.find(".transposed") != std::string::npos || nt.name.find(".strided") != std::string::npos ||
        nt.name.find(".broadcast") != std::string::npos)
      REQUIRE_FALSE(nt.tensor.is_contiguous());

  io::write_safetensors(path, tensors);
  const io::SafetensorsFile f = io::read_safetensors(path);
  CHECK(f.path == path);
  CHECK(f.metadata.empty());
  REQUIRE(f.names.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const io::NamedTensor& want = tensors[i];
    INFO(want.name);
    CHECK(f.names[i] == want.name);
    REQUIRE(f.has(want.name));
    const Tensor got = f.get(want.name);
    CHECK(got.dtype() == want.tensor.dtype());
    CHECK(got.shape() == want.tensor.shape());
    CHECK(got.device() == Device::cpu());
    CHECK(got.is_contiguous());
    CHECK(tensor_bytes(got) == tensor_bytes(want.tensor));
    CHECK(got.to_vector() == want.tensor.to_vector());
  }
  CHECK_FALSE(f.has("f32"));
}

TEST_CASE("safetensors: metadata, file order and atomic replacement", "[io][safetensors]") {
  test::TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "1200"}, {"note", "quotes \" and \\ ok"}};
  const Tensor z = test::random_tensor({3}, 1);
  const Tensor a = test::random_tensor({2, 2}, 2, DType::bf16);
  io::write_safetensors(path, {{"zeta", z}, {"alpha", a}}, meta);
  io::SafetensorsFile f = io::read_safetensors(path);
  CHECK(f.metadata == meta);
  CHECK(f.names == std::vector<std::string>{"zeta", "alpha"});  // file order, not sorted

  // Replacing the file leaves only the new one; no temporary file remains.
  const Tensor b = test::random_tensor({4}, 3, DType::f64);
  io::write_safetensors(path, {{"beta", b}});
  f = io::read_safetensors(path);
  CHECK(f.names == std::vector<std::string>{"beta"});
  CHECK(f.metadata.empty());
  CHECK(f.get("beta").to_vector() == b.to_vector());
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    CHECK(e.path().filename() == "m.safetensors");
  }
  CHECK(files == 1);

  // Writer argument errors name the file and the tensor.
  const std::string dup = test::error_message([&] { io::write_safetensors(path, {{"x", z}, {"x", a}}); });
  CHECK_THAT(dup, Contains(path) && Contains("'x'") && Contains("twice"));
  CHECK_THAT(test::error_message([&] {
               io::write_safetensors(path, {{"u", Tensor()}});
             }),
             Contains("'u'") && Contains("undefined"));
  const std::string nodir = dir.file("no/such/dir/w.safetensors");
  CHECK_THAT(test::error_message([&] { io::write_safetensors(nodir, {{"x", z}}); }), Contains(nodir));
  CHECK(io::read_safetensors(path).names == std::vector<std::string>{"beta"});  // failed writes left it alone
}

TEST_CASE("safetensors: byte layout matches the format", "[io][safetensors]") {
  test::TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  io::write_safetensors(path,
                        {{"a", Tensor::from_vector(std::vector<double>{1.5, -2.0}, {2}, DType::f32)},
                         {"b", Tensor::from_vector(std::vector<int64_t>{1, -2, 258}, {3}, DType::i32)},
                         {"c", Tensor::from_vector(std::vector<double>{1.5}, {1, 1}, DType::bf16)}},
                        {{"format", "pt"}});
  const std::vector<uint8_t> bytes = test::read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];  // little-endian
  CHECK((8 + n) % 8 == 0);                                                    // data starts 8-byte aligned
  REQUIRE(8 + n <= bytes.size());
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  CHECK(header.front() == '{');
  const size_t close = header.find_last_of('}');
  REQUIRE(close != std::string::npos);
  CHECK(close + 8 > header.size());  // at most 7 padding bytes
  for (size_t i = close + 1; i < header.size(); ++i) CHECK(header[i] == ' ');
  const nlohmann::json expected = nlohmann::json::parse(R"({
    "__metadata__": {"format": "pt"},
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "I32", "shape": [3], "data_offsets": [8, 20]},
    "c": {"dtype": "BF16", "shape": [1, 1], "data_offsets": [20, 22]}})");
  CHECK(nlohmann::json::parse(header) == expected);
  const std::vector<uint8_t> data(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), bytes.end());
  const std::vector<uint8_t> want = {
      0x00, 0x00, 0xC0, 0x3F,  // 1.5f  = 0x3FC00000
      0x00, 0x00, 0x00, 0xC0,  // -2.0f = 0xC0000000
      0x01, 0x00, 0x00, 0x00,  // 1
      0xFE, 0xFF, 0xFF, 0xFF,  // -2
      0x02, 0x01, 0x00, 0x00,  // 258
      0xC0, 0x3F,              // bf16 1.5 = 0x3FC0
  };
  CHECK(data == want);
}

TEST_CASE("safetensors: each damaged file gets its own error naming the file", "[io][safetensors]") {
  test::TempDir dir;
  const std::string good = dir.file("good.safetensors");
  io::write_safetensors(good, {{"w", test::random_tensor({4, 4}, 5)}, {"v", test::random_tensor({8}, 6)}});
  const std::vector<uint8_t> bytes = test::read_bytes(good);
  auto read_error = [](const std::string& p) { return test::error_message([&] { io::read_safetensors(p); }); };

  SECTION("missing file") {
    const std::string p = dir.file("absent.safetensors");
    CHECK_THAT(read_error(p), Contains(p) && Contains("cannot open"));
  }
  SECTION("missing tensor name") {
    const io::SafetensorsFile f = io::read_safetensors(good);
    CHECK_THAT(test::error_message([&] { f.get("model.norm.weight"); }),
               Contains(good) && Contains("no tensor named 'model.norm.weight'"));
  }
  SECTION("truncated data") {
    const std::string p = dir.file("truncated.safetensors");
    test::write_bytes(p, bytes.data(), bytes.size() - 5);
    CHECK_THAT(read_error(p), Contains(p) && Contains("truncated: the tensors need 96 bytes of data but only 91"));
  }
  SECTION("truncated inside the length field") {
    const std::string p = dir.file("short.safetensors");
    test::write_bytes(p, bytes.data(), 5);
    CHECK_THAT(read_error(p), Contains(p) && Contains("truncated: 5 bytes"));
  }
  SECTION("corrupt header length") {
    const std::string p = dir.file("badlen.safetensors");
    std::vector<uint8_t> b = bytes;
    const uint64_t huge = 0x00FF'FFFF'FFFF'FFFFull;
    std::memcpy(b.data(), &huge, 8);
    test::write_bytes(p, b);
    CHECK_THAT(read_error(p), Contains(p) && Contains("corrupt header length " + std::to_string(huge)));
    const uint64_t past = bytes.size();  // plausible but longer than what follows
    std::memcpy(b.data(), &past, 8);
    test::write_bytes(p, b);
    CHECK_THAT(read_error(p),
               Contains(p) && Contains("corrupt header length " + std::to_string(past) + " or truncated"));
  }
  SECTION("header that is not JSON") {
    const std::string p = dir.file("notjson.safetensors");
    write_raw_safetensors(p, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4])", {1, 2, 3, 4});
    CHECK_THAT(read_error(p), Contains(p) && Contains("not valid JSON"));
  }
  SECTION("offset past the end") {
    const std::string p = dir.file("pastend.safetensors");
    write_raw_safetensors(p,
                          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                          R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})",
                          std::vector<uint8_t>(16, 7));
    CHECK_THAT(read_error(p),
               Contains(p) && Contains("tensor 'b': data_offsets [16, 24] point past the end of the data (16 bytes)"));
  }
  SECTION("unknown dtype") {
    const std::string p = dir.file("dtype.safetensors");
    write_raw_safetensors(p, R"({"q": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})",
                          std::vector<uint8_t>(4, 1));
    CHECK_THAT(read_error(p), Contains(p) && Contains("tensor 'q'") && Contains("unsupported dtype 'F8_E4M3'"));
  }
  SECTION("size that does not match the shape") {
    const std::string p = dir.file("span.safetensors");
    write_raw_safetensors(p, R"({"q": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 4]}})",
                          std::vector<uint8_t>(4, 1));
    CHECK_THAT(read_error(p),
               Contains(p) && Contains("tensor 'q': data_offsets span 4 bytes but shape [3] of BF16 needs 6"));
  }
  SECTION("overlapping tensors") {
    const std::string p = dir.file("overlap.safetensors");
    write_raw_safetensors(p,
                          R"({"a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]},)"
                          R"( "b": {"dtype": "I32", "shape": [2], "data_offsets": [4, 12]}})",
                          std::vector<uint8_t>(16, 7));
    CHECK_THAT(read_error(p), Contains(p) && Contains("tensor 'b' starts at data offset 4, expected 8"));
  }
  SECTION("bytes no tensor covers") {
    const std::string p = dir.file("trailing.safetensors");
    write_raw_safetensors(p, R"({"a": {"dtype": "U16", "shape": [2], "data_offsets": [0, 4]}})",
                          std::vector<uint8_t>(6, 7));
    CHECK_THAT(read_error(p), Contains(p) && Contains("cover 4 bytes of data but the file holds 6"));
  }
  SECTION("malformed entries") {
    const std::string p = dir.file("entry.safetensors");
    write_raw_safetensors(p, R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", {1, 2, 3, 4});
    CHECK_THAT(read_error(p), Contains(p) && Contains("tensor 'a': shape entry -1"));
    write_raw_safetensors(p, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", {1, 2, 3, 4});
    CHECK_THAT(read_error(p), Contains(p) && Contains("tensor 'a': data_offsets must be"));
    write_raw_safetensors(p, R"({"__metadata__": {"k": 3}})", {});
    CHECK_THAT(read_error(p), Contains(p) && Contains("__metadata__ value of 'k'"));
  }
}
