// Activations on CUDA against the CPU on the same random inputs (f32, bf16), odd sizes,
// fresh outputs NaN-poisoned.
#include <catch2/catch.hpp>

#include <functional>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/device.h"
#include "engine/nn/activation.h"
#include "engine/ops.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using lt::test::PoisonScope;

namespace {

const Device kGpu = Device::cuda(0);

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Worst relative error over the outputs of f on the GPU against f on the CPU.
double gpu_vs_cpu(const std::vector<Tensor>& inputs, const Fn& f) {
  std::vector<Tensor> gpu_inputs;
  for (const Tensor& t : inputs) gpu_inputs.push_back(t.to(kGpu));
  const std::vector<Tensor> c = f(inputs), g = f(gpu_inputs);
  double worst = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    REQUIRE(g[i].device() == kGpu);
    REQUIRE(g[i].shape() == c[i].shape());
    worst = std::max(worst, test::rel_err(g[i].to_vector(), c[i].to_vector()));
  }
  return worst;
}

}  // namespace

TEST_CASE("cuda activations match the CPU", "[nn][activation][cuda]") {
  PoisonScope poison;
  const Shape shape{3, 37, 129};  // odd sizes, not a multiple of the block
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    // bf16 outputs may differ by one rounding step where expf differs by an ulp
    const double tol = dt == DType::f32 ? 1e-6 : 1e-2;
    const Tensor a = test::uniform_tensor(shape, 1, -8, 8, dt), b = test::random_tensor(shape, 2, dt);
    const Tensor dy = test::random_tensor(shape, 3, dt);
    CHECK(gpu_vs_cpu({a, b, dy}, [](const std::vector<Tensor>& t) {
            auto g = nn::swiglu_backward(t[2], t[0], t[1]);
            return std::vector<Tensor>{nn::swiglu_forward(t[0], t[1]), g.da, g.db};
          }) < tol);
    CHECK(gpu_vs_cpu({a, b, dy}, [](const std::vector<Tensor>& t) {
            auto g = nn::sigmoid_mul_backward(t[2], t[0], t[1]);
            return std::vector<Tensor>{nn::sigmoid_mul_forward(t[0], t[1]), g.dr, g.dv};
          }) < tol);
    CHECK(gpu_vs_cpu({a, b, dy}, [](const std::vector<Tensor>& t) {
            auto g = nn::silu_mul_backward(t[2], t[1], t[0]);
            return std::vector<Tensor>{nn::silu_mul_forward(t[1], t[0]), g.do_, g.dg};
          }) < tol);
    CHECK(gpu_vs_cpu({a, dy}, [](const std::vector<Tensor>& t) {
            return std::vector<Tensor>{nn::sqrelu_forward(t[0]), nn::sqrelu_backward(t[1], t[0])};
          }) < tol);
    CHECK(gpu_vs_cpu({a, dy}, [](const std::vector<Tensor>& t) {
            const Tensor yt = nn::tanh_forward(t[0]), yn = nn::neg_exp_forward(t[0]);
            return std::vector<Tensor>{yt, nn::tanh_backward(t[1], yt), yn, nn::neg_exp_backward(t[1], yn)};
          }) < tol);
    // views at an odd element offset: misaligned operands take the element path (the aligned
    // tensors above take the 16-byte path and its tail)
    auto flat = [](const Tensor& x) { return x.reshape({x.numel()}); };
    CHECK(gpu_vs_cpu({flat(a), flat(b), flat(dy)}, [](const std::vector<Tensor>& t) {
            auto part = [](const Tensor& x) { return x.narrow(0, 1, x.size(0) - 1); };
            auto g = nn::swiglu_backward(part(t[2]), part(t[0]), part(t[1]));
            return std::vector<Tensor>{nn::swiglu_forward(part(t[0]), part(t[1])), g.da, g.db};
          }) < tol);
    // token shift is exact arithmetic in the compute type: bit-identical results
    CHECK(gpu_vs_cpu({a, dy}, [](const std::vector<Tensor>& t) {
            return std::vector<Tensor>{nn::token_shift_forward(t[0]), nn::token_shift_backward(t[1])};
          }) == 0.0);
  }
}
