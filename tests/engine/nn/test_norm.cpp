// Norm layers on the CPU (engine/nn/norm.h): forward and backward against the direct
// double-precision formulas (f64, f32; enough rows for several weight-gradient slots),
// backward of every input and parameter by finite differences in f64, bf16 against f32,
// dw / db accumulation, the residual gradient added into dx (dres), run-to-run bit-identical weight gradients, strided inputs, and the
// argument errors.
#include <catch2/catch.hpp>

#include <cstring>

#include "tests/engine/nn/norm_testing.h"
#include "tests/support/gradcheck.h"

using namespace lt;
using namespace lt::test;

namespace {

constexpr double kEps = 1e-5;

// Small shapes (gradcheck) and shapes with many rows (several dw slots per head).
Shape small_shape(NormForm f) { return f == NormForm::group ? Shape{2, 3, 3, 5} : Shape{3, 4, 6}; }
Shape many_rows_shape(NormForm f) { return f == NormForm::group ? Shape{5, 35, 2, 12} : Shape{5, 70, 24}; }

Tensor zeros_like_param(const Tensor& w) { return Tensor::zeros(w.shape(), w.dtype()); }

}  // namespace

TEST_CASE("norm forward matches the double formula", "[nn][norm]") {
  for (NormForm f : kAllNormForms)
    for (DType dt : {DType::f64, DType::f32}) {
      INFO(form_name(f) << " " << dtype_name(dt));
      const double tol = dt == DType::f64 ? 1e-13 : 2e-6;
      const NormInputs in = make_norm_inputs(f, many_rows_shape(f), dt, 11);
      const nn::NormOut out = norm_forward(f, in, kEps);
      const RefNorm ref = ref_norm(f, in, kEps);
      CHECK(out.y.shape() == in.x.shape());
      CHECK(out.y.dtype() == dt);
      CHECK(rel_err(out.y.to_vector(), ref.y) < tol);
      CHECK(rel_err(out.stats.rstd.to_vector(), ref.rstd) < tol);
      if (centers(f)) CHECK(rel_err(out.stats.mean.to_vector(), ref.mean) < tol);
      else CHECK_FALSE(out.stats.mean.defined());
    }
}

TEST_CASE("norm backward matches the double formula over many rows", "[nn][norm]") {
  for (NormForm f : kAllNormForms)
    for (DType dt : {DType::f64, DType::f32}) {
      INFO(form_name(f) << " " << dtype_name(dt));
      const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
      const NormInputs in = make_norm_inputs(f, many_rows_shape(f), dt, 21);
      const Tensor dy = random_tensor(in.x.shape(), 22, dt);
      const std::vector<double> dyv = dy.to_vector();
      const nn::NormOut out = norm_forward(f, in, kEps);
      Tensor dw = zeros_like_param(in.w), db = zeros_like_param(in.w);
      const NormGrads gr = norm_backward(f, dy, in, out.stats, dw, db);
      const RefNorm ref = ref_norm(f, in, kEps, &dyv);
      CHECK(rel_err(gr.dx.to_vector(), ref.dx) < tol);
      CHECK(rel_err(dw.to_vector(), ref.dw) < tol);
      if (has_bias(f)) CHECK(rel_err(db.to_vector(), ref.db) < tol);
      if (has_gate(f)) CHECK(rel_err(gr.dg.to_vector(), ref.dg) < tol);
      else CHECK_FALSE(gr.dg.defined());
    }
}

TEST_CASE("norm backward matches finite differences (f64)", "[nn][norm]") {
  for (NormForm f : kAllNormForms) {
    INFO(form_name(f));
    NormInputs in = make_norm_inputs(f, small_shape(f), DType::f64, 31);
    const Tensor dy = random_tensor(in.x.shape(), 32, DType::f64);
    const nn::NormOut out = norm_forward(f, in, kEps);
    Tensor dw = zeros_like_param(in.w), db = zeros_like_param(in.w);
    const NormGrads gr = norm_backward(f, dy, in, out.stats, dw, db);
    auto loss = [&] { return weighted_sum(norm_forward(f, in, kEps).y, dy); };
    CHECK(gradcheck(in.x, gr.dx, loss) < 1e-7);
    CHECK(gradcheck(in.w, dw, loss) < 1e-7);
    if (has_bias(f)) CHECK(gradcheck(in.b, db, loss) < 1e-7);
    if (has_gate(f)) CHECK(gradcheck(in.g, gr.dg, loss) < 1e-7);
  }
}

TEST_CASE("norm: dw and db accumulate, dx and dg are written", "[nn][norm]") {
  for (NormForm f : kAllNormForms) {
    INFO(form_name(f));
    const NormInputs in = make_norm_inputs(f, small_shape(f), DType::f64, 41);
    const Tensor dy = random_tensor(in.x.shape(), 42, DType::f64);
    const nn::NormOut out = norm_forward(f, in, kEps);
    Tensor dw1 = zeros_like_param(in.w), db1 = zeros_like_param(in.w);
    const NormGrads once = norm_backward(f, dy, in, out.stats, dw1, db1);
    // start from random values and run twice: dw = dw0 + 2 * gradient
    const Tensor dw0 = random_tensor(in.w.shape(), 43, DType::f64), db0 = random_tensor(in.w.shape(), 44, DType::f64);
    Tensor dw = dw0.clone(), db = db0.clone();
    norm_backward(f, dy, in, out.stats, dw, db);
    const NormGrads twice = norm_backward(f, dy, in, out.stats, dw, db);
    CHECK(rel_err(dw.to_vector(), (dw0 + dw1 * 2.0).to_vector()) < 1e-14);
    if (has_bias(f)) CHECK(rel_err(db.to_vector(), (db0 + db1 * 2.0).to_vector()) < 1e-14);
    else CHECK(same_bits(db, db0));  // untouched
    CHECK(same_bits(twice.dx, once.dx));
    if (has_gate(f)) CHECK(same_bits(twice.dg, once.dg));
  }
}

TEST_CASE("norm: a residual gradient (dres) is added to dx before its one rounding", "[nn][norm]") {
  for (NormForm f : {NormForm::rms, NormForm::layer}) {
    INFO(form_name(f));
    const Shape xs = many_rows_shape(f);
    // f64: dx with dres equals dx without it plus dres; dw, db are the same.
    const NormInputs in = make_norm_inputs(f, xs, DType::f64, 61);
    const Tensor dy = random_tensor(xs, 62, DType::f64), dres = random_tensor(xs, 63, DType::f64);
    const nn::NormOut out = norm_forward(f, in, kEps);
    Tensor dw_a = zeros_like_param(in.w), db_a = zeros_like_param(in.w);
    Tensor dw_b = zeros_like_param(in.w), db_b = zeros_like_param(in.w);
    const Tensor plain = norm_backward(f, dy, in, out.stats, dw_a, db_a).dx;
    const Tensor with = norm_backward(f, dy, in, out.stats, dw_b, db_b, dres).dx;
    CHECK(rel_err(with.to_vector(), (plain + dres).to_vector()) < 1e-15);
    CHECK(same_bits(dw_a, dw_b));
    CHECK(same_bits(db_a, db_b));
    // bf16: the f32 sum rounded once, bit for bit the f32 result on the same values rounded.
    const NormInputs in_b = make_norm_inputs(f, xs, DType::bf16, 64);
    NormInputs in_f = in_b;
    in_f.x = in_b.x.to(DType::f32);
    const Tensor dy_b = random_tensor(xs, 65, DType::bf16), dres_b = random_tensor(xs, 66, DType::bf16);
    const nn::NormOut out_b = norm_forward(f, in_b, kEps), out_f = norm_forward(f, in_f, kEps);
    Tensor dw_fb = zeros_like_param(in_b.w), db_fb = zeros_like_param(in_b.w);  // f32 gradients
    const Tensor dx_b = norm_backward(f, dy_b, in_b, out_b.stats, dw_fb, db_fb, dres_b).dx;
    const Tensor dx_f =
        norm_backward(f, dy_b.to(DType::f32), in_f, out_f.stats, dw_fb, db_fb, dres_b.to(DType::f32)).dx;
    REQUIRE(dx_b.dtype() == DType::bf16);
    CHECK(same_bits(dx_b, dx_f.to(DType::bf16)));
  }
  // dres must have x's shape and dtype.
  const NormInputs in = make_norm_inputs(NormForm::rms, {3, 4, 6}, DType::f64, 67);
  const nn::NormOut out = norm_forward(NormForm::rms, in, kEps);
  Tensor dw = zeros_like_param(in.w);
  CHECK_THROWS_WITH(nn::rms_norm_backward(in.x, in.x, in.w, out.stats, dw, Tensor::zeros({3, 4, 5}, DType::f64)),
                    Catch::Contains("rms_norm_backward") && Catch::Contains("dres"));
}

TEST_CASE("norm: bf16 activations against f32 on the same values", "[nn][norm]") {
  // The bf16 path computes in f32 from the same (bf16-representable) values, so it differs
  // from the f32 path only by the final rounding of y, dx, dg to bf16: at most half a bf16
  // ulp, 2^-9 of each element; 4e-3 relative to the largest element leaves room for that.
  for (NormForm f : kAllNormForms) {
    INFO(form_name(f));
    const NormInputs in_bf = make_norm_inputs(f, many_rows_shape(f), DType::bf16, 51);
    NormInputs in_f = in_bf;
    in_f.x = in_bf.x.to(DType::f32);
    if (in_bf.g.defined()) in_f.g = in_bf.g.to(DType::f32);
    const Tensor dy_bf = random_tensor(in_bf.x.shape(), 52, DType::bf16), dy_f = dy_bf.to(DType::f32);
    const nn::NormOut ob = norm_forward(f, in_bf, kEps), of = norm_forward(f, in_f, kEps);
    CHECK(ob.y.dtype() == DType::bf16);
    CHECK(rel_err(ob.y.to_vector(), of.y.to_vector()) < 4e-3);
    CHECK(rel_err(ob.stats.rstd.to_vector(), of.stats.rstd.to_vector()) < 1e-6);
    Tensor dwb = zeros_like_param(in_f.w), dbb = zeros_like_param(in_f.w);
    Tensor dwf = zeros_like_param(in_f.w), dbf = zeros_like_param(in_f.w);
    const NormGrads gb = norm_backward(f, dy_bf, in_bf, ob.stats, dwb, dbb);
    const NormGrads gf = norm_backward(f, dy_f, in_f, of.stats, dwf, dbf);
    CHECK(rel_err(gb.dx.to_vector(), gf.dx.to_vector()) < 4e-3);
    CHECK(rel_err(dwb.to_vector(), dwf.to_vector()) < 1e-5);
    if (has_bias(f)) CHECK(rel_err(dbb.to_vector(), dbf.to_vector()) < 1e-5);
    if (has_gate(f)) CHECK(rel_err(gb.dg.to_vector(), gf.dg.to_vector()) < 4e-3);
  }
}

TEST_CASE("norm: weight gradients are bit-identical run to run (CPU)", "[nn][norm]") {
  for (NormForm f : kAllNormForms) {
    INFO(form_name(f));
    const Shape xs = f == NormForm::group ? Shape{4, 300, 3, 16} : Shape{4, 500, 48};
    const NormInputs in = make_norm_inputs(f, xs, DType::f32, 61);
    const Tensor dy = random_tensor(xs, 62, DType::f32);
    const nn::NormOut out = norm_forward(f, in, kEps);
    Tensor dw_a = zeros_like_param(in.w), db_a = zeros_like_param(in.w);
    Tensor dw_b = zeros_like_param(in.w), db_b = zeros_like_param(in.w);
    const NormGrads a = norm_backward(f, dy, in, out.stats, dw_a, db_a);
    const NormGrads b = norm_backward(f, dy, in, out.stats, dw_b, db_b);
    CHECK(same_bits(dw_a, dw_b));
    CHECK(same_bits(db_a, db_b));
    CHECK(same_bits(a.dx, b.dx));
    CHECK(same_bits(norm_forward(f, in, kEps).y, out.y));
  }
}

TEST_CASE("norm: strided inputs give the same result as contiguous ones", "[nn][norm]") {
  for (NormForm f : kAllNormForms) {
    INFO(form_name(f));
    const NormInputs in = make_norm_inputs(f, small_shape(f), DType::f32, 71);
    // the same values through a transposed (non-contiguous) view
    NormInputs strided = in;
    strided.x = in.x.transpose(0, 1).contiguous().transpose(0, 1);
    REQUIRE_FALSE(strided.x.is_contiguous());
    if (in.g.defined()) strided.g = in.g.transpose(0, 1).contiguous().transpose(0, 1);
    const Tensor dy = random_tensor(in.x.shape(), 72, DType::f32);
    const Tensor dy_strided = dy.transpose(0, 1).contiguous().transpose(0, 1);
    const nn::NormOut a = norm_forward(f, in, kEps), b = norm_forward(f, strided, kEps);
    CHECK(same_bits(a.y, b.y));
    Tensor dw_a = zeros_like_param(in.w), db_a = zeros_like_param(in.w);
    Tensor dw_b = zeros_like_param(in.w), db_b = zeros_like_param(in.w);
    const NormGrads ga = norm_backward(f, dy, in, a.stats, dw_a, db_a);
    const NormGrads gb = norm_backward(f, dy_strided, strided, b.stats, dw_b, db_b);
    CHECK(same_bits(ga.dx, gb.dx));
    CHECK(same_bits(dw_a, dw_b));
  }
}

TEST_CASE("norm: bad arguments name the op and the shapes", "[nn][norm]") {
  const Tensor x = random_tensor({2, 3, 8}, 81);
  const Tensor w = Tensor::full({8}, 1.0), b = Tensor::zeros({8});
  CHECK_THROWS_WITH(nn::rms_norm_forward(x, Tensor::full({7}, 1.0), 1e-6),
                    Catch::Contains("rms_norm_forward") && Catch::Contains("w [7]") && Catch::Contains("[2, 3, 8]"));
  CHECK_THROWS_WITH(nn::rms_norm_forward(x, Tensor::full({8}, 1.0, DType::f64), 1e-6),
                    Catch::Contains("w [8] f64") && Catch::Contains("f32"));
  CHECK_THROWS_WITH(nn::rms_norm_forward(x.to(DType::f16), w, 1e-6),
                    Catch::Contains("rms_norm_forward") && Catch::Contains("dtype must be f32, bf16 or f64"));
  CHECK_THROWS_WITH(nn::rms_norm_forward(x, w, -1.0), Catch::Contains("eps"));
  CHECK_THROWS_WITH(nn::layer_norm_forward(x, w, Tensor::zeros({2, 4}), 1e-5),
                    Catch::Contains("layer_norm_forward") && Catch::Contains("b [2, 4]"));
  CHECK_THROWS_WITH(nn::group_norm_forward(x, w, b, 1e-5),
                    Catch::Contains("group_norm_forward") && Catch::Contains("w [8]") && Catch::Contains("[3, 8]"));
  CHECK_THROWS_WITH(nn::group_norm_forward(Tensor::zeros({8}), w, b, 1e-5),
                    Catch::Contains("group_norm_forward") && Catch::Contains("[..., H, D]"));
  CHECK_THROWS_WITH(nn::gated_rms_norm_forward(x, Tensor::zeros({2, 3, 4}), w, 1e-6),
                    Catch::Contains("gated_rms_norm_forward") && Catch::Contains("g [2, 3, 4]"));
  CHECK_THROWS_WITH(nn::rms_norm_forward(Tensor::zeros({2, 0}), Tensor::zeros({0}), 1e-6),
                    Catch::Contains("empty rows"));

  const nn::NormOut out = nn::layer_norm_forward(x, w, b, 1e-5);
  Tensor dw = Tensor::zeros({8}), db = Tensor::zeros({8});
  CHECK_THROWS_WITH(nn::layer_norm_backward(random_tensor({2, 3, 7}, 82), x, w, out.stats, dw, db),
                    Catch::Contains("layer_norm_backward") && Catch::Contains("dy [2, 3, 7]"));
  Tensor dw_bad = Tensor::zeros({9});
  CHECK_THROWS_WITH(nn::layer_norm_backward(x, x, w, out.stats, dw_bad, db), Catch::Contains("dw [9]"));
  Tensor dw_strided = Tensor::zeros({16}).slice(0, 0, 16, 2);
  CHECK_THROWS_WITH(nn::layer_norm_backward(x, x, w, out.stats, dw_strided, db), Catch::Contains("contiguous"));
  nn::NormStats rms_stats = nn::rms_norm_forward(x, w, 1e-6).stats;  // no mean
  CHECK_THROWS_WITH(nn::layer_norm_backward(x, x, w, rms_stats, dw, db),
                    Catch::Contains("layer_norm_backward") && Catch::Contains("stats.mean is undefined"));
  nn::NormStats short_stats{out.stats.mean.narrow(0, 0, 5), out.stats.rstd};
  CHECK_THROWS_WITH(nn::layer_norm_backward(x, x, w, short_stats, dw, db), Catch::Contains("stats.mean [5]"));
}

TEST_CASE("norm: empty batches give empty outputs and leave dw alone", "[nn][norm]") {
  const Tensor x = Tensor::zeros({0, 8});
  const Tensor w = Tensor::full({8}, 1.0);
  const nn::NormOut out = nn::rms_norm_forward(x, w, 1e-6);
  CHECK(out.y.shape() == Shape{0, 8});
  CHECK(out.stats.rstd.shape() == Shape{0});
  Tensor dw = Tensor::full({8}, 2.0);
  const Tensor dx = nn::rms_norm_backward(x, x, w, out.stats, dw);
  CHECK(dx.shape() == Shape{0, 8});
  CHECK(dw.to_vector() == std::vector<double>(8, 2.0));
}
