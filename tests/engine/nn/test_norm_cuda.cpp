// Norm layers, CUDA against the CPU on the same random inputs (never zeros): every form, f32
// and bf16, odd row lengths and row counts (L = 100, rows not a multiple of a block's
// warps), model-sized shapes with many weight-gradient slots, rows long enough for the
// backward's global-memory partials (L = 6200) and rows of its register path (L = 256, 512,
// 768) and of its grouped register path (L = 8 .. 128: 1 to 16 lanes a row). Outputs and scratch NaN-poisoned through the allocator's poison mode, so an
// unwritten element fails. The weight gradients start from
// the same random values on both sides (they are accumulated). Also: bit-identical results
// run to run on the device. Runs only with a GPU (the cuda test main exits 77 otherwise).
#include <catch2/catch.hpp>

#include <cstring>

#include "allocator/caching_allocator.h"
#include "tests/engine/nn/norm_testing.h"

using namespace lt;
using namespace lt::test;

namespace {

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();
constexpr double kEps = 1e-5;

// f32: both sides compute in f32, in different orders. bf16 (y, dx, dg): the f32 values
// agree to ~1e-6 but may round to neighbouring bf16 values, one bf16 ulp = 2^-8 of an
// element; 8e-3 relative to the largest element covers that. Weight gradients and statistics
// are f32 for both dtypes.
double act_tol(DType dt) { return dt == DType::f32 ? 1e-5 : 8e-3; }
constexpr double kParamTol = 1e-5;

std::vector<Shape> shapes_for(NormForm f) {
  // L = 256, 512, 768: rows that fit the backward's register path (kernels/cuda/norm.cu);
  // L = 8, 16, 32, 64, 128: rows of 1..16 lanes (bf16; twice that in f32), the grouped paths
  if (f == NormForm::group)
    return {{3, 37, 3, 20}, {2, 129, 12, 64}, {2, 5, 2, 6200}, {2, 33, 4, 256}, {2, 37, 3, 32}, {2, 9, 5, 8}};
  std::vector<Shape> s = {{2, 37, 100}, {4, 129, 768}, {3, 7, 6200}, {2, 33, 512},
                          {5, 41, 64},  {3, 19, 16},   {2, 33, 128}};
  if (f == NormForm::gated) s.push_back({8, 512, 12, 64});  // KDA's o_norm at B = 8, T = 512
  return s;
}

}  // namespace

TEST_CASE("cuda norm: forward and backward match the CPU", "[nn][norm][cuda]") {
  PoisonScope poison;
  uint64_t seed = 1000;
  for (NormForm f : kAllNormForms)
    for (DType dt : {DType::f32, DType::bf16})
      for (const Shape& xs : shapes_for(f)) {
        INFO(form_name(f) << " " << dtype_name(dt) << " x " << shape_str(xs));
        seed += 10;
        const NormInputs in_c = make_norm_inputs(f, xs, dt, seed);
        const NormInputs in_g = norm_inputs_to(in_c, kGpu);
        const nn::NormOut oc = norm_forward(f, in_c, kEps), og = norm_forward(f, in_g, kEps);
        REQUIRE(og.y.device() == kGpu);
        CHECK(rel_err(og.y.to_vector(), oc.y.to_vector()) < act_tol(dt));
        CHECK(rel_err(og.stats.rstd.to_vector(), oc.stats.rstd.to_vector()) < kParamTol);
        if (centers(f)) CHECK(rel_err(og.stats.mean.to_vector(), oc.stats.mean.to_vector()) < kParamTol);

        const Tensor dy_c = random_tensor(xs, seed + 5, dt), dy_g = dy_c.to(kGpu);
        const Tensor dw0 = random_tensor(in_c.w.shape(), seed + 6), db0 = random_tensor(in_c.w.shape(), seed + 7);
        Tensor dw_c = dw0.clone(), db_c = db0.clone();
        Tensor dw_g = dw0.to(kGpu), db_g = db0.to(kGpu);
        const NormGrads gc = norm_backward(f, dy_c, in_c, oc.stats, dw_c, db_c);
        const NormGrads gg = norm_backward(f, dy_g, in_g, og.stats, dw_g, db_g);
        CHECK(rel_err(gg.dx.to_vector(), gc.dx.to_vector()) < act_tol(dt));
        // compare the accumulated part (dw - dw0), the part the kernels computed
        CHECK(rel_err((dw_g.to(kCpu) - dw0).to_vector(), (dw_c - dw0).to_vector()) < kParamTol);
        if (has_bias(f)) CHECK(rel_err((db_g.to(kCpu) - db0).to_vector(), (db_c - db0).to_vector()) < kParamTol);
        else CHECK(same_bits(db_g, db0));
        if (has_gate(f)) CHECK(rel_err(gg.dg.to_vector(), gc.dg.to_vector()) < act_tol(dt));
      }
}

TEST_CASE("cuda norm: a residual gradient added into dx matches the CPU on both row paths", "[nn][norm][cuda]") {
  PoisonScope poison;
  uint64_t seed = 3000;
  for (NormForm f : {NormForm::rms, NormForm::layer})
    for (DType dt : {DType::f32, DType::bf16})
      for (const Shape& xs : shapes_for(f)) {  // L = 100, 6200: the general rows; 512, 768: registers
        INFO(form_name(f) << " " << dtype_name(dt) << " x " << shape_str(xs));
        seed += 10;
        const NormInputs in_c = make_norm_inputs(f, xs, dt, seed);
        const NormInputs in_g = norm_inputs_to(in_c, kGpu);
        const nn::NormOut oc = norm_forward(f, in_c, kEps), og = norm_forward(f, in_g, kEps);
        const Tensor dy_c = random_tensor(xs, seed + 5, dt), dres_c = random_tensor(xs, seed + 8, dt);
        Tensor dw_c = Tensor::zeros(in_c.w.shape(), DType::f32), db_c = Tensor::zeros(in_c.w.shape(), DType::f32);
        Tensor dw_g = dw_c.to(kGpu), db_g = db_c.to(kGpu);
        const NormGrads gc = norm_backward(f, dy_c, in_c, oc.stats, dw_c, db_c, dres_c);
        const NormGrads gg = norm_backward(f, dy_c.to(kGpu), in_g, og.stats, dw_g, db_g, dres_c.to(kGpu));
        CHECK(rel_err(gg.dx.to_vector(), gc.dx.to_vector()) < act_tol(dt));
        CHECK(rel_err(dw_g.to_vector(), dw_c.to_vector()) < kParamTol);
      }
}

TEST_CASE("cuda norm: bit-identical results run to run", "[nn][norm][cuda]") {
  for (NormForm f : kAllNormForms) {
    INFO(form_name(f));
    const Shape xs = f == NormForm::group ? Shape{2, 129, 12, 64} : Shape{4, 129, 768};
    const NormInputs in = norm_inputs_to(make_norm_inputs(f, xs, DType::f32, 2000), kGpu);
    const Tensor dy = random_tensor(xs, 2001, DType::f32, kGpu);
    const nn::NormOut a = norm_forward(f, in, kEps), b = norm_forward(f, in, kEps);
    CHECK(same_bits(a.y, b.y));
    Tensor dw_a = Tensor::zeros(in.w.shape(), DType::f32, kGpu), db_a = Tensor::zeros(in.w.shape(), DType::f32, kGpu);
    Tensor dw_b = Tensor::zeros(in.w.shape(), DType::f32, kGpu), db_b = Tensor::zeros(in.w.shape(), DType::f32, kGpu);
    const NormGrads ga = norm_backward(f, dy, in, a.stats, dw_a, db_a);
    const NormGrads gb = norm_backward(f, dy, in, a.stats, dw_b, db_b);
    CHECK(same_bits(ga.dx, gb.dx));
    CHECK(same_bits(dw_a, dw_b));
    CHECK(same_bits(db_a, db_b));
  }
}

TEST_CASE("cuda norm: f64 is a CPU-only dtype", "[nn][norm][cuda]") {
  const NormInputs in = norm_inputs_to(make_norm_inputs(NormForm::rms, {2, 8}, DType::f64, 3000), kGpu);
  CHECK_THROWS_WITH(norm_forward(NormForm::rms, in, kEps), Catch::Contains("cuda norm: dtype f64"));
}
