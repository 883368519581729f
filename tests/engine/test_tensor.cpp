// Tensor runtime on the CPU: factories, views sharing storage, contiguous, copies,
// dtype conversions (bf16/f16 rounding against an independent reference), printing,
// error messages.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <sstream>

#include "allocator/caching_allocator.h"
#include "engine/device.h"
#include "engine/ops.h"
#include "engine/tensor.h"
#include "kernels/half.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;

namespace {
std::vector<double> iota(int64_t n, double start = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i);
  return v;
}
float bitsf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST_CASE("tensor factories: shape, strides, contiguity, values", "[engine]") {
  Tensor e = Tensor::empty({2, 3, 4}, DType::f32);
  CHECK(e.shape() == Shape{2, 3, 4});
  CHECK(e.strides() == Shape{12, 4, 1});
  CHECK(e.numel() == 24);
  CHECK(e.is_contiguous());
  CHECK(e.device() == Device::cpu());
  CHECK(e.nbytes() == 96);

  Tensor z = Tensor::zeros({3, 5}, DType::f64);
  for (double v : z.to_vector()) CHECK(v == 0.0);
  Tensor f = Tensor::full({4}, -2.5, DType::bf16);
  for (double v : f.to_vector()) CHECK(v == -2.5);

  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u16}) {
    Tensor t = Tensor::from_vector(iota(6), {2, 3}, dt);
    CHECK(t.dtype() == dt);
    CHECK(t.to_vector() == iota(6));
  }
  Tensor scalar = Tensor::from_vector(std::vector<double>{3.5}, {}, DType::f32);
  CHECK(scalar.dim() == 0);
  CHECK(scalar.numel() == 1);
  CHECK(scalar.item() == 3.5);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{(int64_t{1} << 40) + 3, -7}, {2}, DType::i64);
  CHECK(ids.data<int64_t>()[0] == (int64_t{1} << 40) + 3);
  CHECK(ids.data<int64_t>()[1] == -7);
}

TEST_CASE("views share storage and index correctly", "[engine]") {
  // x[i, j, k] = 100 i + 10 j + k
  std::vector<double> v;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) v.push_back(100 * i + 10 * j + k);
  Tensor x = Tensor::from_vector(v, {2, 3, 4}, DType::f32);

  Tensor n = x.narrow(2, 1, 2);  // [2, 3, 2]
  CHECK(n.shares_storage(x));
  CHECK(n.shape() == Shape{2, 3, 2});
  CHECK(!n.is_contiguous());
  CHECK(n.to_vector() == std::vector<double>{1, 2, 11, 12, 21, 22, 101, 102, 111, 112, 121, 122});

  Tensor s = x.slice(1, 0, 3, 2);  // j = 0, 2
  CHECK(s.shares_storage(x));
  CHECK(s.to_vector() == std::vector<double>{0, 1, 2, 3, 20, 21, 22, 23, 100, 101, 102, 103, 120, 121, 122, 123});
  CHECK(x.slice(1, -2, 100).shape() == Shape{2, 2, 4});  // Python clamping

  Tensor sel = x.select(0, 1).select(-1, 3);  // [3]: 103, 113, 123
  CHECK(sel.to_vector() == std::vector<double>{103, 113, 123});

  Tensor t = x.transpose(0, 2);  // [4, 3, 2]
  CHECK(t.shares_storage(x));
  CHECK(t.shape() == Shape{4, 3, 2});
  std::vector<double> tv = t.to_vector();
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) CHECK(tv[(k * 3 + j) * 2 + i] == 100 * i + 10 * j + k);

  Tensor p = x.permute({1, 2, 0});  // [3, 4, 2]
  std::vector<double> pv = p.contiguous().to_vector();
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 2; ++i) CHECK(pv[(j * 4 + k) * 2 + i] == 100 * i + 10 * j + k);

  Tensor r = x.view({6, 4});
  CHECK(r.shares_storage(x));
  CHECK(r.to_vector() == v);
  CHECK(x.view({-1}).shape() == Shape{24});
  CHECK(x.unsqueeze(1).shape() == Shape{2, 1, 3, 4});
  CHECK(x.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  CHECK(x.unsqueeze(1).squeeze(1).shape() == Shape{2, 3, 4});

  // a view of a narrowed tensor whose rows stay contiguous is still a view
  Tensor rows = x.narrow(1, 1, 2);  // [2, 2, 4], rows of 4 contiguous
  Tensor rv = rows.view({2, 8});
  CHECK(rv.shares_storage(x));
  CHECK(rv.to_vector() == rows.to_vector());

  // writes through a view land in the base
  Tensor col = x.select(2, 0);  // x[:, :, 0]
  col.fill_(-1.0);
  std::vector<double> after = x.to_vector();
  for (int64_t i = 0; i < 24; ++i) CHECK(after[i] == (i % 4 == 0 ? -1.0 : v[i]));

  // expand: stride 0
  Tensor b = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3, 1}, DType::f32).expand({2, 3, 4});
  CHECK(b.shape() == Shape{2, 3, 4});
  CHECK(b.strides()[0] == 0);
  CHECK(b.strides()[2] == 0);
  std::vector<double> bv = b.to_vector();
  for (int64_t i = 0; i < 24; ++i) CHECK(bv[i] == 1 + (i / 4) % 3);
}

TEST_CASE("contiguous, reshape and clone copy correctly", "[engine]") {
  Tensor x = test::random_tensor({3, 4, 5, 2}, 11, DType::f64);
  const std::vector<double> xv = x.to_vector();
  Tensor p = x.permute({2, 0, 3, 1});  // [5, 3, 2, 4]
  Tensor c = p.contiguous();
  CHECK(c.is_contiguous());
  CHECK(!c.shares_storage(x));
  std::vector<double> cv = c.to_vector();
  for (int a = 0; a < 5; ++a)
    for (int b = 0; b < 3; ++b)
      for (int d = 0; d < 2; ++d)
        for (int e = 0; e < 4; ++e) CHECK(cv[((a * 3 + b) * 2 + d) * 4 + e] == xv[((b * 4 + e) * 5 + a) * 2 + d]);
  CHECK(x.contiguous().shares_storage(x));  // already contiguous: same tensor

  // reshape of a non-viewable tensor copies; view throws naming the shapes
  Tensor t = x.transpose(0, 1);
  CHECK_THROWS_WITH(t.view({12, 10}), Catch::Contains("view: cannot view [4, 3, 5, 2]"));
  Tensor rs = t.reshape({12, 10});
  CHECK(!rs.shares_storage(x));
  CHECK(rs.to_vector() == t.contiguous().to_vector());

  Tensor cl = x.clone();
  CHECK(!cl.shares_storage(x));
  CHECK(cl.to_vector() == xv);
}

TEST_CASE("copy_ broadcasts, converts and writes strided views", "[engine]") {
  Tensor dst = Tensor::zeros({4, 6}, DType::f64);
  Tensor src = Tensor::from_vector(std::vector<double>{1.5, -2.25, 3.0}, {3}, DType::f32);
  dst.narrow(1, 2, 3).copy_(src);  // broadcast along rows, f32 -> f64, strided destination
  std::vector<double> d = dst.to_vector();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) CHECK(d[r * 6 + c] == (c >= 2 && c < 5 ? src.to_vector()[c - 2] : 0.0));
  CHECK_THROWS_WITH(dst.copy_(Tensor::zeros({5})), Catch::Contains("cannot broadcast [5] to [4, 6]"));
}

TEST_CASE("dtype conversion: bf16 round-to-nearest-even edge cases", "[engine]") {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3f800000, 0x3f80},                        // 1
      {0x3f808000, 0x3f80},                        // 1 + 2^-8: tie, keep even
      {0x3f818000, 0x3f82},                        // 1 + 3*2^-8: tie, round up to even
      {0x3f808001, 0x3f81},                        // just above the tie
      {0x3f80ffff, 0x3f81}, {0x7f7fffff, 0x7f80},  // FLT_MAX overflows to inf
      {0x7f800000, 0x7f80},                        // inf
      {0xff800000, 0xff80},                        // -inf
      {0x7fc00000, 0x7fc0},                        // qNaN
      {0x7f800001, 0x7fc0},                        // sNaN -> quiet NaN
      {0x80000000, 0x8000},                        // -0
      {0x00000001, 0x0000},                        // smallest denormal rounds to 0
      {0x00008000, 0x0000},                        // tie, even
      {0x00018000, 0x0002},                        // tie, up to even
      {0xc0490fdb, 0xc049},                        // -pi
  };
  std::vector<double> in;
  for (const Case& c : cases) in.push_back(bitsf(c.in));
  Tensor f = Tensor::from_vector(in, {static_cast<int64_t>(in.size())}, DType::f64).to(DType::f32);
  Tensor b = f.to(DType::bf16);
  for (size_t i = 0; i < in.size(); ++i) {
    INFO("input bits 0x" << std::hex << cases[i].in);
    CHECK(b.data<bfloat16>()[i].bits == cases[i].out);
    CHECK(test::ref_round_to_16(bitsf(cases[i].in), true) == (std::isnan(in[i]) ? 0x7fc0 : cases[i].out));
  }
  // random floats over the whole exponent range against the independent reference
  Tensor r = test::random_tensor({4096}, 5, DType::f64);
  std::vector<double> rv = r.to_vector();
  for (size_t i = 0; i < rv.size(); ++i) rv[i] = std::ldexp(rv[i], static_cast<int>(i % 200) - 100);
  Tensor rf = Tensor::from_vector(rv, {4096}, DType::f32);
  Tensor rb = rf.to(DType::bf16);
  int bad = 0;
  for (int64_t i = 0; i < 4096; ++i)
    if (rb.data<bfloat16>()[i].bits != test::ref_round_to_16(rf.data<float>()[i], true)) ++bad;
  CHECK(bad == 0);
  // every non-NaN bf16 survives bf16 -> f32 -> bf16
  int bad_roundtrip = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = bf16_bits_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(v) && float_to_bf16_bits(v) != h) ++bad_roundtrip;
  }
  CHECK(bad_roundtrip == 0);
}

TEST_CASE("dtype conversion: f16 round-to-nearest-even edge cases", "[engine]") {
  struct Case {
    float in;
    uint16_t out;
  };
  const Case cases[] = {
      {1.0f, 0x3c00},
      {65504.0f, 0x7bff},  // largest finite
      {65519.99f, 0x7bff},
      {65520.0f, 0x7c00},  // tie with the next binade: to inf
      {-70000.0f, 0xfc00},
      {std::ldexp(1.0f, -24), 0x0001},         // smallest subnormal
      {std::ldexp(1.0f, -25), 0x0000},         // tie: even
      {std::ldexp(3.0f, -25), 0x0002},         // tie: up to even
      {std::ldexp(1.0f, -14), 0x0400},         // smallest normal
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},  // tie: even
      {1.0f + std::ldexp(3.0f, -11), 0x3c02},  // tie: up to even
      {-0.0f, 0x8000},
      {NAN, 0x7e00},
      {INFINITY, 0x7c00},
  };
  for (const Case& c : cases) {
    INFO("input " << c.in);
    CHECK(float_to_f16_bits(c.in) == c.out);
    CHECK(test::ref_round_to_16(c.in, false) == c.out);
  }
  std::vector<double> in;
  for (const Case& c : cases) in.push_back(c.in);
  Tensor h = Tensor::from_vector(in, {static_cast<int64_t>(in.size())}, DType::f64).to(DType::f32).to(DType::f16);
  for (size_t i = 0; i < in.size(); ++i) CHECK(h.data<float16>()[i].bits == cases[i].out);
  // random floats across the f16 range (normals, subnormals, overflow)
  Tensor r = test::random_tensor({4096}, 9, DType::f64);
  std::vector<double> rv = r.to_vector();
  for (size_t i = 0; i < rv.size(); ++i) rv[i] = std::ldexp(rv[i], static_cast<int>(i % 46) - 28);
  Tensor rf = Tensor::from_vector(rv, {4096}, DType::f32);
  Tensor rh = rf.to(DType::f16);
  int bad = 0;
  for (int64_t i = 0; i < 4096; ++i)
    if (rh.data<float16>()[i].bits != test::ref_round_to_16(rf.data<float>()[i], false)) ++bad;
  CHECK(bad == 0);
  int bad_roundtrip = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float v = f16_bits_to_float(static_cast<uint16_t>(b));
    if (!std::isnan(v) && float_to_f16_bits(v) != b) ++bad_roundtrip;
  }
  CHECK(bad_roundtrip == 0);
}

TEST_CASE("dtype conversion between float and integer dtypes", "[engine]") {
  Tensor x = Tensor::from_vector(std::vector<double>{-2.75, -0.5, 0.5, 3.75, 1e6}, {5}, DType::f64);
  CHECK(x.to(DType::i32).to_vector() == std::vector<double>{-2, 0, 0, 3, 1e6});
  CHECK(x.to(DType::f32).to(DType::f64).to_vector() == x.to_vector());  // all exact in f32
  Tensor u = Tensor::from_vector(std::vector<double>{0, 1, 65535}, {3}, DType::u16);
  CHECK(u.to(DType::f32).to_vector() == std::vector<double>{0, 1, 65535});
  CHECK(ops::convert(x, DType::f64).shares_storage(x) == false);
  CHECK(x.to(DType::f64).shares_storage(x));
}

TEST_CASE("to_string shows shape, dtype, device and elides", "[engine]") {
  Tensor x = Tensor::from_vector(iota(6), {2, 3}, DType::f32);
  const std::string s = x.to_string();
  CHECK(s.find("Tensor[2, 3] f32 cpu") != std::string::npos);
  CHECK(s.find("[[1, 2, 3],") != std::string::npos);
  CHECK(s.find("[4, 5, 6]]") != std::string::npos);
  Tensor big = Tensor::zeros({100});
  CHECK(big.to_string(10).find("... (90 more)") != std::string::npos);
  std::ostringstream os;
  os << x;
  CHECK(os.str() == s);
}

TEST_CASE("shape errors name the shapes", "[engine]") {
  Tensor x = Tensor::zeros({2, 64, 4});
  CHECK_THROWS_WITH(x.narrow(1, 60, 8),
                    Catch::Contains("narrow: start 60 + length 8 > size 64 of dim 1 of [2, 64, 4]"));
  CHECK_THROWS_WITH(x.view({3, -1}), Catch::Contains("[2, 64, 4]"));
  CHECK_THROWS_WITH(x.permute({0, 1}), Catch::Contains("permute"));
  CHECK_THROWS_WITH(x.squeeze(1), Catch::Contains("squeeze: dim 1 of [2, 64, 4] is not 1"));
  CHECK_THROWS_WITH(x.size(3), Catch::Contains("dim 3 out of range for shape [2, 64, 4]"));
  CHECK_THROWS_WITH(Tensor::from_vector(std::vector<double>{1, 2}, {3}), Catch::Contains("2 values for shape [3]"));
  CHECK_THROWS_WITH(Tensor::empty({1, 1, 1, 1, 1, 1, 1, 1, 1}), Catch::Contains("more than 8 dims"));
  CHECK_THROWS_AS(Tensor().device(), std::invalid_argument);
}

TEST_CASE("devices: parse, names, CPU fallback", "[engine]") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK_THROWS_WITH(Device::parse("gpu"), Catch::Contains("unknown device 'gpu'"));
  CHECK(default_device() == (cuda_available() ? Device::cuda(0) : Device::cpu()));
  CHECK(cuda_available() == (cuda_device_count() > 0));
  CHECK(current_stream(Device::cpu()).id() == 0);
  synchronize(Device::cpu());
  CHECK(parse_dtype("bfloat16") == DType::bf16);
  CHECK_THROWS_WITH(parse_dtype("fp8"), Catch::Contains("unknown dtype 'fp8'"));
}

TEST_CASE("empty() is NaN under the host allocator's poison mode", "[engine]") {
  alloc::CachingAllocator& a = alloc::host_allocator();
  const bool was = a.poison();
  a.set_poison(true);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    std::vector<double> v = Tensor::empty({777}, dt).to_vector();
    int nans = 0;
    for (double x : v) nans += std::isnan(x);
    CHECK(nans == 777);
  }
  a.set_poison(was);
}
