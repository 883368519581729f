// Runtime ops on the CPU against plain-loop references on random inputs (never zeros),
// f32 and f64 (bf16 where the op supports it), including broadcasting and strided inputs.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/ops.h"
#include "engine/tensor.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using test::rel_err;

namespace {

double tol_for(DType dt) { return dt == DType::f64 ? 1e-13 : dt == DType::f32 ? 2e-6 : 1e-2; }

// Reference for a broadcasting binary op on the host, in double.
std::vector<double> ref_binary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f,
                               Shape& out_shape) {
  const size_t n = std::max(a.dim(), b.dim());
  out_shape.assign(n, 1);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.dim() ? 1 : a.shape()[i - (n - a.dim())];
    const int64_t db = i < n - b.dim() ? 1 : b.shape()[i - (n - b.dim())];
    out_shape[i] = std::max(da, db);
  }
  const std::vector<double> av = a.to_vector(), bv = b.to_vector();
  std::vector<double> out(static_cast<size_t>(shape_numel(out_shape)));
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    const auto idx = test::unravel(i, out_shape);
    out[i] = f(av[test::broadcast_index(idx, a.shape())], bv[test::broadcast_index(idx, b.shape())]);
  }
  return out;
}

// Round each reference value to the dtype (so bf16 results compare against what bf16 can hold).
std::vector<double> round_to(const std::vector<double>& v, DType dt) {
  if (dt == DType::f64) return v;
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, dt).to_vector();
}

}  // namespace

TEST_CASE("binary ops broadcast like numpy", "[engine]") {
  struct Pair {
    Shape a, b;
  };
  const Pair pairs[] = {{{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}},       {{5}, {1}},  {{2, 3, 4}, {2, 3, 4}},
                        {{1}, {3, 2}},    {{4, 1, 3, 1}, {5, 1, 1}}, {{}, {2, 2}}};
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    uint64_t seed = 100;
    for (const Pair& pr : pairs) {
      Tensor a = test::random_tensor(pr.a, seed++, dt);
      Tensor b = test::random_tensor(pr.b, seed++, dt);
      struct Op {
        const char* name;
        Tensor (*fn)(const Tensor&, const Tensor&);
        double (*ref)(double, double);
      };
      const Op ops_list[] = {
          {"add", ops::add, [](double x, double y) { return x + y; }},
          {"sub", ops::sub, [](double x, double y) { return x - y; }},
          {"mul", ops::mul, [](double x, double y) { return x * y; }},
          {"div", ops::div, [](double x, double y) { return x / y; }},
      };
      for (const Op& op : ops_list) {
        INFO(op.name << " " << dtype_name(dt) << " " << shape_str(pr.a) << " with " << shape_str(pr.b));
        Shape out_shape;
        const std::vector<double> ref = ref_binary(a, b, op.ref, out_shape);
        Tensor out = op.fn(a, b);
        CHECK(out.shape() == out_shape);
        CHECK(out.dtype() == dt);
        CHECK(rel_err(out.to_vector(), round_to(ref, dt)) <= tol_for(dt));
      }
    }
  }
}

TEST_CASE("binary ops on strided views, out= forms and in-place accumulation", "[engine]") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor base = test::random_tensor({6, 5, 4}, 7, dt);
    Tensor a = base.transpose(0, 2).narrow(1, 1, 3);  // [4, 3, 6] strided
    Tensor b = test::random_tensor({4, 1, 6}, 8, dt);
    Shape out_shape;
    const auto ref = ref_binary(
        a, b, [](double x, double y) { return x * y; }, out_shape);
    CHECK(rel_err(ops::mul(a, b).to_vector(), ref) <= tol_for(dt));
    CHECK(rel_err((a * b).to_vector(), ref) <= tol_for(dt));

    // out= into a strided view of a larger tensor
    Tensor big = Tensor::zeros({4, 3, 8}, dt);
    Tensor view = big.narrow(2, 1, 6);
    ops::mul_out(view, a, b);
    CHECK(rel_err(view.to_vector(), ref) <= tol_for(dt));
    std::vector<double> bv = big.to_vector();
    for (int64_t i = 0; i < big.numel(); ++i)
      if (i % 8 == 0 || i % 8 == 7) CHECK(bv[i] == 0.0);

    // a += b (broadcast) in place
    Tensor g = test::random_tensor({3, 4}, 9, dt);
    const std::vector<double> g0 = g.to_vector();
    Tensor dg = test::random_tensor({4}, 10, dt);
    ops::add_(g, dg);
    std::vector<double> gv = g.to_vector(), dv = dg.to_vector();
    for (int64_t i = 0; i < 12; ++i) CHECK(std::fabs(gv[i] - (g0[i] + dv[i % 4])) <= tol_for(dt) * 4);
  }
}

TEST_CASE("unary and scalar ops match std:: references", "[engine]") {
  struct Op {
    const char* name;
    std::function<Tensor(const Tensor&)> fn;
    double (*ref)(double);
    bool positive;
  };
  const Op ops_list[] = {
      {"neg", [](const Tensor& x) { return ops::neg(x); }, [](double x) { return -x; }, false},
      {"exp", [](const Tensor& x) { return ops::exp(x); }, [](double x) { return std::exp(x); }, false},
      {"log", [](const Tensor& x) { return ops::log(x); }, [](double x) { return std::log(x); }, true},
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); },
       false},
      {"softplus", [](const Tensor& x) { return ops::softplus(x); },
       [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }, false},
      {"silu", [](const Tensor& x) { return ops::silu(x); }, [](double x) { return x / (1 + std::exp(-x)); }, false},
      {"sqrt", [](const Tensor& x) { return ops::sqrt(x); }, [](double x) { return std::sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return ops::rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, true},
      {"square", [](const Tensor& x) { return ops::square(x); }, [](double x) { return x * x; }, false},
      {"abs", [](const Tensor& x) { return ops::abs(x); }, [](double x) { return std::fabs(x); }, false},
      {"relu", [](const Tensor& x) { return ops::relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, false},
      {"tanh", [](const Tensor& x) { return ops::tanh(x); }, [](double x) { return std::tanh(x); }, false},
      {"add_scalar", [](const Tensor& x) { return ops::add_scalar(x, 0.75); }, [](double x) { return x + 0.75; },
       false},
      {"mul_scalar", [](const Tensor& x) { return ops::mul_scalar(x, -1.5); }, [](double x) { return x * -1.5; },
       false},
      {"rsub_scalar", [](const Tensor& x) { return ops::rsub_scalar(x, 2.0); }, [](double x) { return 2.0 - x; },
       false},
      {"pow_scalar", [](const Tensor& x) { return ops::pow_scalar(x, 1.5); }, [](double x) { return std::pow(x, 1.5); },
       true},
      {"clamp", [](const Tensor& x) { return ops::clamp(x, -0.5, 0.5); },
       [](double x) { return std::min(std::max(x, -0.5), 0.5); }, false},
  };
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    // values spread over [-30, 30] so softplus's threshold and sigmoid's branches are hit
    Tensor x = test::uniform_tensor({7, 9}, 21, -30, 30, dt).transpose(0, 1);  // strided
    Tensor xp = test::uniform_tensor({7, 9}, 22, 0.01, 10, dt);
    for (const Op& op : ops_list) {
      INFO(op.name << " " << dtype_name(dt));
      const Tensor& in = op.positive ? xp : x;
      std::vector<double> ref = in.to_vector();
      for (double& v : ref) v = op.ref(v);
      Tensor out = op.fn(in);
      CHECK(out.shape() == in.shape());
      CHECK(out.is_contiguous());
      // bf16 computes in f32 and rounds once: within half a bf16 ulp of the reference
      CHECK(rel_err(out.to_vector(), round_to(ref, dt)) <= (dt == DType::bf16 ? 8e-3 : tol_for(dt) * 4));
    }
  }
  // softplus threshold exactly as fla: x > 20 returns x
  Tensor t = Tensor::from_vector(std::vector<double>{20.5, 19.5, -40}, {3}, DType::f32);
  std::vector<double> sp = ops::softplus(t).to_vector();
  CHECK(sp[0] == 20.5);
  CHECK(sp[1] == Approx(std::log1p(std::exp(19.5))).epsilon(1e-6));
  CHECK(sp[2] > 0.0);
  // unary_out in place
  Tensor y = test::random_tensor({5}, 3, DType::f64);
  std::vector<double> yv = y.to_vector();
  ops::unary_out(ops::UnaryOp::exp, y, y);
  for (int i = 0; i < 5; ++i) CHECK(y.to_vector()[i] == Approx(std::exp(yv[i])).epsilon(1e-15));
}

TEST_CASE("where selects with broadcasting", "[engine]") {
  Tensor cond = Tensor::from_vector(std::vector<double>{1, 0, 1}, {3}, DType::f32);
  Tensor a = test::random_tensor({2, 3}, 1, DType::f64);
  Tensor b = test::random_tensor({2, 1}, 2, DType::f64);
  std::vector<double> out = ops::where(cond, a, b).to_vector(), av = a.to_vector(), bv = b.to_vector();
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) CHECK(out[r * 3 + c] == (c != 1 ? av[r * 3 + c] : bv[r]));
}

TEST_CASE("reductions: sum, max, mean along a dim, sum_all, sum_to", "[engine]") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    Tensor x = test::random_tensor({3, 4, 300}, 31, dt).transpose(1, 2);  // [3, 300, 4] strided
    const Shape& sh = x.shape();
    const std::vector<double> xv = x.to_vector();
    for (int64_t d = 0; d < 3; ++d) {
      for (bool keep : {false, true}) {
        INFO(dtype_name(dt) << " dim " << d << " keepdim " << keep);
        Shape os = sh;
        os[d] = 1;
        std::vector<double> rs(static_cast<size_t>(shape_numel(os)), 0.0), rm(rs.size(), -INFINITY);
        for (int64_t i = 0; i < x.numel(); ++i) {
          auto idx = test::unravel(i, sh);
          idx[d] = 0;
          int64_t o = 0;
          for (int k = 0; k < 3; ++k) o = o * os[k] + idx[k];
          rs[o] += xv[i];
          rm[o] = std::max(rm[o], xv[i]);
        }
        Tensor s = ops::sum(x, d, keep), m = ops::max(x, d, keep), mn = ops::mean(x, d, keep);
        Shape expect = os;
        if (!keep) expect.erase(expect.begin() + d);
        CHECK(s.shape() == expect);
        CHECK(m.shape() == expect);
        const double tol = dt == DType::f64 ? 1e-13 : dt == DType::f32 ? 1e-5 : 2e-2;
        CHECK(rel_err(s.to_vector(), rs) <= tol);
        CHECK(rel_err(m.to_vector(), round_to(rm, dt)) == 0.0);
        std::vector<double> rmean = rs;
        for (double& v : rmean) v /= static_cast<double>(sh[d]);
        CHECK(rel_err(mn.to_vector(), rmean) <= tol);
      }
    }
    double total = 0;
    for (double v : xv) total += v;
    Tensor all = ops::sum_all(x);
    CHECK(all.dim() == 0);
    CHECK(std::fabs(all.item() - total) <= (dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-3 : 0.5));
  }
  // NaN propagates through max
  Tensor n = Tensor::from_vector(std::vector<double>{1, NAN, 3, 4}, {2, 2}, DType::f32);
  std::vector<double> nm = ops::max(n, 1).to_vector();
  CHECK(std::isnan(nm[0]));
  CHECK(nm[1] == 4);
  // sum_to: the backward of broadcasting
  Tensor g = test::random_tensor({2, 3, 4}, 41, DType::f64);
  std::vector<double> gv = g.to_vector();
  Tensor st = ops::sum_to(g, {3, 1});
  CHECK(st.shape() == Shape{3, 1});
  for (int j = 0; j < 3; ++j) {
    double r = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) r += gv[(i * 3 + j) * 4 + k];
    CHECK(st.to_vector()[j] == Approx(r).epsilon(1e-14));
  }
  CHECK(ops::sum_to(g, {2, 3, 4}).to_vector() == gv);
  CHECK_THROWS_WITH(ops::sum_to(g, {5}), Catch::Contains("sum_to"));
}

TEST_CASE("column_sums_into adds each set's column sums (of x, or of x * y) into its accumulator", "[engine]") {
  const int64_t rows = 37, cols = 13;
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    INFO(dtype_name(dt));
    const DType adt = dt == DType::f64 ? DType::f64 : DType::f32;
    const Tensor x0 = test::random_tensor({rows, cols}, 50, dt), x1 = test::random_tensor({rows, cols}, 51, dt);
    const Tensor y0 = test::random_tensor({rows, cols}, 52, dt), y1 = test::random_tensor({rows, cols}, 53, dt);
    const Tensor start = test::random_tensor({cols}, 54, adt);
    // The reference from the inputs' values in f64; the accumulators start non-zero.
    auto expect = [&](const Tensor& x, const Tensor* y) {
      const std::vector<double> xv = x.to_vector(), yv = y ? y->to_vector() : std::vector<double>();
      std::vector<double> e = start.to_vector();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) e[c] += xv[r * cols + c] * (y ? yv[r * cols + c] : 1.0);
      return e;
    };
    const double tol = adt == DType::f64 ? 1e-13 : 1e-6;
    Tensor a0 = start.clone(), a1 = start.clone();
    ops::column_sums_into({&a0, &a1}, {x0, x1}, {y0, y1});
    CHECK(rel_err(a0.to_vector(), expect(x0, &y0)) <= tol);
    CHECK(rel_err(a1.to_vector(), expect(x1, &y1)) <= tol);
    Tensor b = start.clone();
    ops::column_sums_into({&b}, {x1.view({1, rows, cols})});  // leading dims are rows too
    CHECK(rel_err(b.to_vector(), expect(x1, nullptr)) <= tol);
  }
  Tensor acc = Tensor::zeros({13}, DType::f32);
  const Tensor x = test::random_tensor({4, 13}, 55);
  CHECK_THROWS_WITH(ops::column_sums_into({&acc}, {x, x}), Catch::Contains("column_sums_into"));
  Tensor wrong = Tensor::zeros({12}, DType::f32);
  CHECK_THROWS_WITH(ops::column_sums_into({&wrong}, {x}), Catch::Contains("acc [12]"));
  Tensor f64acc = Tensor::zeros({13}, DType::f64);
  CHECK_THROWS_WITH(ops::column_sums_into({&f64acc}, {x}), Catch::Contains("f32"));
  CHECK_THROWS_WITH(ops::column_sums_into({&acc}, {x}, {x.narrow(0, 0, 2)}), Catch::Contains("y [2, 13]"));
}

TEST_CASE("cumsum forward and reverse along any dim", "[engine]") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = test::random_tensor({4, 5, 6}, 51, dt).permute({2, 0, 1});  // [6, 4, 5] strided
    const Shape& sh = x.shape();
    const std::vector<double> xv = x.to_vector();
    for (int64_t d = 0; d < 3; ++d) {
      for (bool rev : {false, true}) {
        INFO(dtype_name(dt) << " dim " << d << " reverse " << rev);
        std::vector<double> ref(xv.size());
        for (int64_t i = 0; i < x.numel(); ++i) {
          auto idx = test::unravel(i, sh);
          double acc = 0;
          for (int64_t j = 0; j < sh[d]; ++j) {
            if (rev ? j < idx[d] : j > idx[d]) continue;
            auto jdx = idx;
            jdx[d] = j;
            acc += xv[(jdx[0] * sh[1] + jdx[1]) * sh[2] + jdx[2]];
          }
          ref[i] = acc;
        }
        Tensor c = ops::cumsum(x, d, rev);
        CHECK(c.shape() == sh);
        CHECK(rel_err(c.to_vector(), ref) <= tol_for(dt) * 4);
      }
    }
  }
  // chunk-local cumsum via a view: [B, T] -> [B, NT, C], cumsum over C
  Tensor g = test::random_tensor({2, 12}, 52, DType::f64);
  Tensor cl = ops::cumsum(g.view({2, 3, 4}), 2).view({2, 12});
  std::vector<double> gv = g.to_vector(), cv = cl.to_vector();
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 12; ++t) {
      double acc = 0;
      for (int s = t - t % 4; s <= t; ++s) acc += gv[b * 12 + s];
      CHECK(cv[b * 12 + t] == Approx(acc).epsilon(1e-14));
    }
}

namespace {
// C = op(A) op(B) reference in double; shapes as given to ops::matmul.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, Shape& out_shape) {
  const int64_t M = ta ? a.size(-1) : a.size(-2), K = ta ? a.size(-2) : a.size(-1);
  const int64_t N = tb ? b.size(-2) : b.size(-1);
  const int64_t ba = a.numel() / (M * K), bb = b.numel() / (K * N), batch = std::max(ba, bb);
  out_shape = a.dim() >= b.dim() ? Shape(a.shape().begin(), a.shape().end() - 2)
                                 : Shape(b.shape().begin(), b.shape().end() - 2);
  out_shape.push_back(M);
  out_shape.push_back(N);
  const std::vector<double> av = a.to_vector(), bv = b.to_vector();
  std::vector<double> c(static_cast<size_t>(batch * M * N));
  for (int64_t q = 0; q < batch; ++q)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double x = av[(ba == 1 ? 0 : q) * M * K + (ta ? k * M + m : m * K + k)];
          const double y = bv[(bb == 1 ? 0 : q) * K * N + (tb ? n * K + k : k * N + n)];
          s += x * y;
        }
        c[(q * M + m) * N + n] = s;
      }
  return c;
}
}  // namespace

TEST_CASE("matmul: batched, transposed flags, shared 2-D operand, strided views", "[engine]") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    const double tol = dt == DType::f64 ? 1e-13 : dt == DType::f32 ? 1e-6 : 1e-2;
    uint64_t seed = 300;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t B = 3, M = 5, K = 7, N = 4;
        Tensor a = test::random_tensor(ta ? Shape{2, B, K, M} : Shape{2, B, M, K}, seed++, dt);
        Tensor b = test::random_tensor(tb ? Shape{2, B, N, K} : Shape{2, B, K, N}, seed++, dt);
        INFO(dtype_name(dt) << " ta " << ta << " tb " << tb);
        Shape os;
        const auto ref = ref_matmul(a, b, ta, tb, os);
        Tensor c = ops::matmul(a, b, ta, tb);
        CHECK(c.shape() == os);
        CHECK(rel_err(c.to_vector(), ref) <= tol);
        // the same product with the operands given as transposed views (no flags)
        Tensor c2 = ops::matmul(ta ? a.transpose(-1, -2) : a, tb ? b.transpose(-1, -2) : b);
        CHECK(rel_err(c2.to_vector(), ref) <= tol);
        // shared 2-D right operand: x[B, T, D] @ W[D, E]
        Tensor w = test::random_tensor(tb ? Shape{N, K} : Shape{K, N}, seed++, dt);
        Shape os2;
        const auto ref2 = ref_matmul(a, w, ta, tb, os2);
        CHECK(rel_err(ops::matmul(a, w, ta, tb).to_vector(), ref2) <= tol);
        // shared 2-D left operand
        Tensor wl = test::random_tensor(ta ? Shape{K, M} : Shape{M, K}, seed++, dt);
        Shape os3;
        const auto ref3 = ref_matmul(wl, b, ta, tb, os3);
        Tensor c3 = ops::matmul(wl, b, ta, tb);
        CHECK(c3.shape() == os3);
        CHECK(rel_err(c3.to_vector(), ref3) <= tol);
      }
    // non-collapsible batch strides get copied: a permuted batch
    Tensor a = test::random_tensor({4, 3, 5, 6}, 400, dt).permute({1, 0, 2, 3});  // [3, 4, 5, 6]
    Tensor b = test::random_tensor({3, 4, 6, 2}, 401, dt);
    Shape os;
    const auto ref = ref_matmul(a, b, false, false, os);
    CHECK(rel_err(ops::matmul(a, b).to_vector(), ref) <= tol);
  }
  // matmul_out accumulates with beta = 1 and scales with alpha
  Tensor a = test::random_tensor({6, 3}, 500, DType::f64);
  Tensor dy = test::random_tensor({6, 4}, 501, DType::f64);
  Tensor dw = test::random_tensor({3, 4}, 502, DType::f64);
  const std::vector<double> dw0 = dw.to_vector();
  Shape os;
  const auto prod = ref_matmul(a, dy, true, false, os);
  ops::matmul_out(dw, a, dy, true, false, 0.5, 1.0);
  std::vector<double> dwv = dw.to_vector();
  for (size_t i = 0; i < dwv.size(); ++i) CHECK(dwv[i] == Approx(dw0[i] + 0.5 * prod[i]).epsilon(1e-14));
  // errors name the shapes
  CHECK_THROWS_WITH(ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})),
                    Catch::Contains("matmul: inner dims differ (3 vs 4) in [2, 3] x [4, 5]"));
  CHECK_THROWS_WITH(ops::matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 5})),
                    Catch::Contains("batch dims must match"));
  CHECK_THROWS_WITH(ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 5}, DType::f64)),
                    Catch::Contains("dtypes differ"));
}

TEST_CASE("tril / triu keep the documented diagonals", "[engine]") {
  Tensor x = test::random_tensor({2, 4, 5}, 600, DType::f32);
  const std::vector<double> xv = x.to_vector();
  for (int64_t diag : {-1, 0, 1}) {
    std::vector<double> l = ops::tril(x, diag).to_vector(), u = ops::triu(x, diag).to_vector();
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 5; ++j) {
          const size_t k = (b * 4 + i) * 5 + j;
          CHECK(l[k] == (j - i <= diag ? xv[k] : 0.0));
          CHECK(u[k] == (j - i >= diag ? xv[k] : 0.0));
        }
  }
  Tensor e = ops::eye(3, DType::f64);
  CHECK(e.to_vector() == std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1});
}

TEST_CASE("solve_unit_lower solves L X = B and L^T X = B", "[engine]") {
  for (DType dt : {DType::f32, DType::f64}) {
    const int64_t Bn = 3, C = 16, N = 5;
    // strict lower part random and small (as in (I + A) with A = beta k k^T scores), the
    // diagonal and upper part garbage: the op must ignore them
    Tensor Lraw = test::random_tensor({Bn, C, C}, 700, dt);
    Tensor L = ops::add(ops::mul_scalar(ops::tril(Lraw, -1), 0.3), ops::triu(Lraw, 0));
    Tensor Bm = test::random_tensor({Bn, N, C}, 701, dt).transpose(-1, -2);  // [Bn, C, N] strided
    const std::vector<double> lv = L.to_vector(), bv = Bm.to_vector();
    for (bool tr : {false, true}) {
      INFO(dtype_name(dt) << " transpose " << tr);
      Tensor X = ops::solve_unit_lower(L, Bm, tr);
      CHECK(X.shape() == Bm.shape());
      // residual of the unit-lower system, in double
      const std::vector<double> xv = X.to_vector();
      double worst = 0;
      for (int64_t q = 0; q < Bn; ++q)
        for (int64_t i = 0; i < C; ++i)
          for (int64_t n = 0; n < N; ++n) {
            double s = xv[(q * C + i) * N + n];  // unit diagonal
            for (int64_t j = 0; j < C; ++j) {
              const bool strict_lower = tr ? j > i : j < i;
              if (!strict_lower) continue;
              const double l = tr ? lv[(q * C + j) * C + i] : lv[(q * C + i) * C + j];
              s += l * xv[(q * C + j) * N + n];
            }
            worst = std::max(worst, std::fabs(s - bv[(q * C + i) * N + n]));
          }
      CHECK(worst <= (dt == DType::f64 ? 1e-12 : 1e-4));
    }
  }
  // the UT transform: T = (I + A)^{-1} for strictly lower A
  Tensor A = ops::tril(test::random_tensor({8, 8}, 702, DType::f64), -1);
  Tensor I = ops::eye(8, DType::f64);
  Tensor T = ops::solve_unit_lower(A, I);
  Tensor prod = ops::matmul(ops::add(I, A), T);
  CHECK(ops::max_abs_diff(prod, I) <= 1e-12);
  CHECK_THROWS_WITH(ops::solve_unit_lower(Tensor::zeros({4, 4}), Tensor::zeros({5, 2})),
                    Catch::Contains("got L [4, 4] and B [5, 2]"));
}

TEST_CASE("l2norm forward, backward against finite differences", "[engine]") {
  Tensor x = test::random_tensor({3, 2, 8}, 800, DType::f64);
  const double eps = 1e-6;
  auto [y, rstd] = ops::l2norm(x, eps);
  CHECK(y.shape() == x.shape());
  CHECK(rstd.shape() == Shape{3, 2});
  const std::vector<double> xv = x.to_vector(), yv = y.to_vector(), rv = rstd.to_vector();
  for (int r = 0; r < 6; ++r) {
    double ss = 0;
    for (int d = 0; d < 8; ++d) ss += xv[r * 8 + d] * xv[r * 8 + d];
    const double ref_r = 1 / std::sqrt(ss + eps);
    CHECK(rv[r] == Approx(ref_r).epsilon(1e-14));
    for (int d = 0; d < 8; ++d) CHECK(yv[r * 8 + d] == Approx(xv[r * 8 + d] * ref_r).epsilon(1e-14));
  }
  // loss = sum(w * y): dx from l2norm_backward vs central differences
  Tensor w = test::random_tensor({3, 2, 8}, 801, DType::f64);
  Tensor dx = ops::l2norm_backward(w, y, rstd);
  const std::vector<double> wv = w.to_vector(), dxv = dx.to_vector();
  auto loss = [&](const std::vector<double>& xs) {
    Tensor t = Tensor::from_vector(xs, {3, 2, 8}, DType::f64);
    return ops::sum_all(ops::mul(ops::l2norm(t, eps).first, w)).item();
  };
  const double h = 1e-6;
  double worst = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    std::vector<double> xp = xv, xm = xv;
    xp[i] += h;
    xm[i] -= h;
    worst = std::max(worst, std::fabs((loss(xp) - loss(xm)) / (2 * h) - dxv[i]));
  }
  CHECK(worst <= 1e-8);
  // bf16 inputs: y in bf16, rstd in f32
  auto [yb, rb] = ops::l2norm(x.to(DType::bf16), eps);
  CHECK(yb.dtype() == DType::bf16);
  CHECK(rb.dtype() == DType::f32);
  CHECK(rel_err(yb.to_vector(), yv) <= 1e-2);
}

TEST_CASE("pad, cat and convert", "[engine]") {
  Tensor x = test::random_tensor({2, 5, 3}, 900, DType::f32);
  Tensor p = ops::pad(x, 1, 1, 2, -7.0);
  CHECK(p.shape() == Shape{2, 8, 3});
  const std::vector<double> xv = x.to_vector(), pv = p.to_vector();
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 8; ++t)
      for (int c = 0; c < 3; ++c)
        CHECK(pv[(b * 8 + t) * 3 + c] == (t >= 1 && t < 6 ? xv[(b * 5 + t - 1) * 3 + c] : -7.0));
  CHECK(p.narrow(1, 1, 5).to_vector() == xv);

  Tensor y = test::random_tensor({2, 2, 3}, 901, DType::f32);
  Tensor c = ops::cat({x, y}, 1);
  CHECK(c.shape() == Shape{2, 7, 3});
  CHECK(c.narrow(1, 0, 5).to_vector() == xv);
  CHECK(c.narrow(1, 5, 2).to_vector() == y.to_vector());
  CHECK_THROWS_WITH(ops::cat({x, Tensor::zeros({2, 2, 4})}, 1),
                    Catch::Contains("cat: shape [2, 2, 4] does not match [2, 5, 3]"));

  Tensor h = ops::convert(x, DType::f16);
  CHECK(h.dtype() == DType::f16);
  CHECK(rel_err(h.to_vector(), xv) <= 1e-3);
  Tensor d = ops::convert(x.transpose(0, 2), DType::f64);
  CHECK(d.is_contiguous());
  CHECK(d.to_vector() == x.transpose(0, 2).to_vector());
}
