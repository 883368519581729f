// The generated elementwise cases (tests/engine/elementwise_cases.h) on the CPU: every op of
// kernels/op_lists.h has a spec row, its f32 result is its f64 result rounded (inputs the
// same f32 values), and its in-place form writes what its fresh form returns, bit for bit.
// test_engine_cuda.cpp walks the same cases against the CUDA backend.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "tests/engine/elementwise_cases.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;

namespace {

// The inputs of a case: a [5, 6, 4] strided and b [6, 1] broadcast for binary ops; values in
// [-30, 30] (or [0.01, 10] for Domain::positive) for unary ones. Never zero.
std::vector<Tensor> inputs_for(const test::ElementwiseCase& c, const test::OpSpec& s, DType dt) {
  if (c.arity == 2)
    return {test::random_tensor({4, 6, 5}, 10, dt).transpose(0, 2), test::random_tensor({6, 1}, 11, dt)};
  if (s.domain == test::Domain::positive) return {test::uniform_tensor({9, 7}, 13, 0.01, 10, dt)};
  return {test::uniform_tensor({9, 7}, 12, -30, 30, dt)};
}

}  // namespace

TEST_CASE("elementwise cases: every op of the lists has a spec row", "[engine][ops]") {
  const auto cases = test::elementwise_cases();
  std::set<std::string> names;
  for (const auto& c : cases) {
    INFO(c.name << ": no row in spec_of() (tests/engine/elementwise_cases.h)");
    CHECK(test::spec_of(c.name) != nullptr);
    CHECK(names.insert(c.name).second);
  }
  // One case per list row: the enums count the same rows.
  CHECK(cases.size() == static_cast<size_t>(kern::BinaryOp::count) + static_cast<size_t>(kern::UnaryOp::count));
}

TEST_CASE("elementwise cases: f32 equals f64 rounded, in-place equals fresh", "[engine][ops]") {
  for (const auto& c : test::elementwise_cases()) {
    const test::OpSpec* s = test::spec_of(c.name);
    REQUIRE(s != nullptr);
    INFO(c.name);
    const std::vector<Tensor> in32 = inputs_for(c, *s, DType::f32);
    std::vector<Tensor> in64;
    for (const Tensor& t : in32) in64.push_back(t.to(DType::f64));  // exactly the f32 values
    const Tensor r32 = c.run(in32, *s), r64 = c.run(in64, *s);
    REQUIRE(r32.shape() == r64.shape());
    REQUIRE(r32.dtype() == DType::f32);
    // Element by element: the f64 result rounded once (bitwise ops), or within 3 f32 ulps of
    // it (the libm functions).
    const double ulps = s->agreement == test::Agreement::bitwise ? 0.0 : 3.0;
    const std::vector<double> got = r32.to_vector(), want = r64.to(DType::f32).to_vector();
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::fabs(got[i] - want[i]) > ulps * 0x1p-23 * std::fabs(want[i])) {
        if (bad == 0) UNSCOPED_INFO("element " << i << ": " << std::hexfloat << got[i] << " against " << want[i]);
        ++bad;
      }
    CHECK(bad == 0);
    if (c.run_in_place) {
      for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
        INFO(dtype_name(dt));
        const std::vector<Tensor> in = inputs_for(c, *s, dt);
        Tensor out = in[0].clone();
        c.run_in_place(out, in);
        CHECK(test::same_bits(out, c.run(in, *s)));
      }
    }
  }
}
