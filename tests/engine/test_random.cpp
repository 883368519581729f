// Philox4x32-10 and the random fills on the CPU (the CUDA half compares bit-for-bit in
// test_engine_cuda.cpp).
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/ops.h"
#include "kernels/philox.h"

using namespace lt;

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors", "[engine]") {
  struct Kat {
    philox::Block ctr;
    philox::Key key;
    uint32_t out[4];
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const philox::Block r = philox::philox4x32_10(k.ctr, k.key);
    for (int i = 0; i < 4; ++i) CHECK(r.r[i] == k.out[i]);
  }
}

TEST_CASE("portable log and cos used by Box-Muller are accurate", "[engine]") {
  double worst_log = 0, worst_cos = 0;
  for (int i = 1; i <= 100000; ++i) {
    const double u = static_cast<double>(i) / 100001.0;
    const double l = std::log(u);
    worst_log = std::max(worst_log, std::fabs(philox::portable_log(u) - l) / std::fabs(l));
    const double t = static_cast<double>(i - 1) / 100000.0;
    worst_cos = std::max(worst_cos, std::fabs(philox::portable_cos_2pi(t) - std::cos(2 * M_PI * t)));
  }
  CHECK(worst_log < 1e-15);
  CHECK(worst_cos < 1e-15);
  CHECK(philox::portable_log(1.0) == 0.0);
  CHECK(std::fabs(philox::portable_log(0x1p-53) - std::log(0x1p-53)) < 1e-13);
}

TEST_CASE("random fills: deterministic, offset-addressable, view-independent", "[engine]") {
  Tensor a = ops::randn({64, 33}, 1234, 0, DType::f32);
  Tensor b = ops::randn({64, 33}, 1234, 0, DType::f32);
  CHECK(a.to_vector() == b.to_vector());
  Tensor c = ops::randn({64, 33}, 1235, 0, DType::f32);
  CHECK(a.to_vector() != c.to_vector());
  // element i of the stream is a pure function of (seed, offset + i)
  Tensor shifted = ops::randn({100}, 1234, 7, DType::f64);
  Tensor full = ops::randn({107}, 1234, 0, DType::f64);
  CHECK(shifted.to_vector() == full.narrow(0, 7, 100).to_vector());
  // filling a strided view gives the numbers of a contiguous tensor of the view's shape
  Tensor base = Tensor::zeros({8, 10}, DType::f32);
  Tensor view = base.transpose(0, 1).narrow(0, 2, 5);  // [5, 8] strided
  ops::uniform_(view, 99, 3, -1.0, 2.0);
  Tensor ref = Tensor::empty({5, 8}, DType::f32);
  ops::uniform_(ref, 99, 3, -1.0, 2.0);
  CHECK(view.to_vector() == ref.to_vector());
  // every dtype is the double value rounded once (bf16/f16 through f32)
  Tensor d64 = ops::randn({500}, 77, 0, DType::f64);
  Tensor d32 = ops::randn({500}, 77, 0, DType::f32);
  Tensor dbf = ops::randn({500}, 77, 0, DType::bf16);
  CHECK(d64.to(DType::f32).to_vector() == d32.to_vector());
  CHECK(d32.to(DType::bf16).to_vector() == dbf.to_vector());
}

TEST_CASE("random fills have the right moments", "[engine]") {
  const int64_t n = 200000;
  std::vector<double> u = ops::rand({n}, 5, 0, DType::f64).to_vector();
  std::vector<double> z = ops::randn({n}, 6, 0, DType::f64).to_vector();
  std::vector<double> s = Tensor::empty({n}, DType::f32).to_vector();
  Tensor scaled = Tensor::empty({n}, DType::f32);
  ops::normal_(scaled, 7, 0, 3.0, 0.5);
  s = scaled.to_vector();
  auto moments = [](const std::vector<double>& v, double& mean, double& var) {
    mean = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    var = 0;
    for (double x : v) var += (x - mean) * (x - mean);
    var /= static_cast<double>(v.size());
  };
  double m, v;
  moments(u, m, v);
  CHECK(std::fabs(m - 0.5) < 0.005);
  CHECK(std::fabs(v - 1.0 / 12) < 0.002);
  for (double x : u) CHECK((x >= 0.0 && x < 1.0));
  moments(z, m, v);
  CHECK(std::fabs(m) < 0.01);
  CHECK(std::fabs(v - 1.0) < 0.015);
  int beyond3 = 0;
  for (double x : z) beyond3 += std::fabs(x) > 3;
  CHECK(std::fabs(beyond3 / static_cast<double>(n) - 0.0027) < 0.0008);  // Gaussian tails
  moments(s, m, v);
  CHECK(std::fabs(m - 3.0) < 0.01);
  CHECK(std::fabs(v - 0.25) < 0.005);
  CHECK_THROWS_WITH(ops::randn({2}, 1, 0, DType::i32), Catch::Contains("float dtype"));
}
