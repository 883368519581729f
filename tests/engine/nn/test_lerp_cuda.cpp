// RWKV6's fused token-shift interpolations on CUDA against the CPU on the same random
// inputs (f32, bf16), odd sizes (the element path) and widths of whole 16-byte packs (the
// vector path), with and without packed-document positions, fresh outputs NaN-poisoned.
#include <catch2/catch.hpp>

#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/device.h"
#include "engine/nn/lerp.h"
#include "engine/ops.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using lt::test::PoisonScope;

namespace {

const Device kGpu = Device::cuda(0);

// Every output of the four passes, on `dev`, from the same inputs.
std::vector<Tensor> passes(const std::vector<Tensor>& in, Device dev, const Tensor& positions) {
  std::vector<Tensor> t;
  for (const Tensor& x : in) t.push_back(x.to(dev));
  const Tensor &a = t[0], &mu0 = t[1], &mu1 = t[2], &d0 = t[3], &d1 = t[4], &mraw = t[5], &bias = t[6];
  const Tensor pos = positions.defined() ? positions.to(dev) : Tensor();
  std::vector<Tensor> out;
  const nn::ShiftMixOut f = nn::shift_mix_forward(a, {mu0, mu1}, pos);
  out.insert(out.end(), {f.delta, f.out[0], f.out[1]});
  Tensor dmu0 = Tensor::zeros(mu0.shape(), mu0.dtype(), dev), dmu1 = Tensor::zeros(mu1.shape(), mu1.dtype(), dev);
  out.push_back(nn::shift_mix_backward({d0, d1}, f.delta, {mu0, mu1}, d1, d0, {&dmu0, &dmu1}, pos));
  out.insert(out.end(), {dmu0, dmu1});
  const nn::Lerp5Out l = nn::lerp5_forward(a, f.delta, mraw, bias, false);
  out.insert(out.end(), {l.m, l.xl});
  const nn::Lerp5Grads g = nn::lerp5_backward({d0, d1, d0, f.out[0], d1}, f.delta, l.m);
  out.insert(out.end(), {g.da, g.ddelta, g.dm});
  return out;
}

}  // namespace

TEST_CASE("cuda lerp kernels match the CPU", "[nn][lerp][cuda]") {
  PoisonScope poison;
  const int64_t B = 3, T = 37;  // odd token counts, not a multiple of the block
  for (int64_t d : {129, 136}) {
    for (bool packed : {false, true}) {
      // positions in packed documents: a document starts at token 0 and at token 11 of each row
      Tensor positions;
      if (packed) {
        std::vector<double> pv;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < T; ++t) pv.push_back(static_cast<double>(t < 11 ? t : t - 11));
        positions = Tensor::from_vector(pv, {B * T}, DType::i32);
      }
      for (DType dt : {DType::f32, DType::bf16}) {
        INFO(dtype_name(dt) << " d " << d << (packed ? " packed" : ""));
        const std::vector<Tensor> in = {
            test::random_tensor({B, T, d}, 1, dt), test::random_tensor({d}, 2),
            test::random_tensor({d}, 3),           test::random_tensor({B, T, d}, 4, dt),
            test::random_tensor({B, T, d}, 5, dt), test::random_tensor({5, B * T, d}, 6, dt),
            test::random_tensor({5, d}, 7)};
        const std::vector<Tensor> c = passes(in, Device::cpu(), positions), g = passes(in, kGpu, positions);
        // f32: the same arithmetic up to the contraction of a * b + c into one rounding;
        // bf16: an output may then land on the neighbouring bf16 value (2^-8 relative)
        const double tol = dt == DType::f32 ? 1e-6 : 8e-3;
        for (size_t i = 0; i < c.size(); ++i) {
          INFO("output " << i);
          REQUIRE(g[i].device() == kGpu);
          REQUIRE(g[i].shape() == c[i].shape());
          CHECK(test::rel_err(g[i].to_vector(), c[i].to_vector()) < tol);
        }
      }
    }
  }
}
