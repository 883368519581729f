// The CUDA backend against the CPU backend: copies, conversions (bit-exact), every op on
// the same random inputs (never zeros), random fills (bit-exact), streams, poison mode.
// Runs only with a GPU (the cuda test main exits 77 = skipped otherwise).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "allocator/caching_allocator.h"
#include "engine/device.h"
#include "engine/graph.h"
#include "engine/ops.h"
#include "engine/tensor.h"
#include "kernels/half.h"
#include "tests/engine/elementwise_cases.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using test::rel_err;

using lt::test::same_bits;

namespace {

const Device kGpu = Device::cuda(0);
const Device kCpu = Device::cpu();

// Runs f on CPU inputs and on the same inputs moved to the GPU; returns the worst relative
// error of the GPU result against the CPU one (inf on NaN or shape mismatch).
double gpu_vs_cpu(const std::vector<Tensor>& cpu_inputs, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                  bool* exact = nullptr) {
  std::vector<Tensor> gpu_inputs;
  for (const Tensor& t : cpu_inputs) gpu_inputs.push_back(t.to(kGpu));
  const Tensor rc = f(cpu_inputs), rg = f(gpu_inputs);
  REQUIRE(rg.device() == kGpu);
  if (rg.shape() != rc.shape()) return INFINITY;
  if (exact) *exact = same_bits(rg, rc);
  return rel_err(rg.to_vector(), rc.to_vector());
}

double tol_for(DType dt) { return dt == DType::f64 ? 1e-13 : dt == DType::f32 ? 2e-6 : 1e-2; }

}  // namespace

TEST_CASE("cuda: device query and host/device copies", "[engine][cuda]") {
  REQUIRE(cuda_available());
  REQUIRE(cuda_device_count() >= 1);
  CHECK(default_device() == kGpu);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u16}) {
    INFO(dtype_name(dt));
    Tensor h = test::uniform_tensor({3, 5, 7}, 1, 1, 1000, dt);
    Tensor g = h.to(kGpu);
    CHECK(g.device() == kGpu);
    CHECK(same_bits(g.to(kCpu), h));
    // strided device tensor -> host
    CHECK(same_bits(g.transpose(0, 2).narrow(1, 1, 3), h.transpose(0, 2).narrow(1, 1, 3)));
    // host tensor into a strided device view (broadcast + convert on the way)
    Tensor dst = Tensor::zeros({3, 5, 7}, DType::f32, kGpu);
    dst.narrow(2, 2, 4).copy_(h.narrow(2, 0, 4));
    Tensor ref = Tensor::zeros({3, 5, 7}, DType::f32);
    ref.narrow(2, 2, 4).copy_(h.narrow(2, 0, 4));
    CHECK(same_bits(dst, ref));
    // device -> device clone
    CHECK(same_bits(g.clone(), h));
  }
  CHECK_THROWS_WITH(ops::add(Tensor::zeros({2}), Tensor::zeros({2}, DType::f32, kGpu)),
                    Catch::Contains("different devices"));
}

TEST_CASE("cuda: dtype conversions are bit-identical to the CPU", "[engine][cuda]") {
  // every bf16 / f16 bit pattern to f32 and back
  for (DType half_t : {DType::bf16, DType::f16}) {
    std::vector<int64_t> all(65536);
    for (int64_t i = 0; i < 65536; ++i) all[i] = i;
    // reinterpret u16 patterns: build the half tensor on the host from raw bits
    Tensor h = Tensor::empty({65536}, half_t);
    for (int64_t i = 0; i < 65536; ++i) std::memcpy(static_cast<char*>(h.data_ptr()) + 2 * i, &all[i], 2);
    Tensor f_cpu = h.to(DType::f32), f_gpu = h.to(kGpu).to(DType::f32);
    CHECK(same_bits(f_gpu, f_cpu));
    CHECK(same_bits(f_gpu.to(half_t), f_cpu.to(half_t)));
  }
  // f32 values around every rounding boundary, subnormals, overflow, inf, NaN
  std::vector<double> v = test::random_tensor({20000}, 3, DType::f64).to_vector();
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(v[i], static_cast<int>(i % 300) - 150);
  v.insert(v.end(), {65504.0, 65519.99, 65520.0, 1e39, -1e39, INFINITY, -INFINITY, NAN, 0x1p-25, 3 * 0x1p-25,
                     1.0 + 0x1p-8, 1.0 + 3 * 0x1p-8, -0.0});
  Tensor f = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::f32);
  Tensor g = f.to(kGpu);
  for (DType dt : {DType::bf16, DType::f16, DType::f64}) {
    INFO(dtype_name(dt));
    CHECK(same_bits(g.to(dt), f.to(dt)));
  }
  Tensor d = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::f64);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) CHECK(same_bits(d.to(kGpu).to(dt), d.to(dt)));
  Tensor ints = test::uniform_tensor({1000}, 4, -1000, 1000, DType::f32);
  CHECK(same_bits(ints.to(kGpu).to(DType::i32), ints.to(DType::i32)));
}

TEST_CASE("cuda: every elementwise op of the op lists matches the CPU", "[engine][cuda]") {
  // Walks tests/engine/elementwise_cases.h (generated from kernels/op_lists.h): an op added to
  // a list is compared here without a line of this test changing.
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    Tensor a = test::random_tensor({4, 6, 5}, 10, dt).transpose(0, 2);  // [5, 6, 4] strided
    Tensor b = test::random_tensor({6, 1}, 11, dt);
    Tensor x = test::uniform_tensor({9, 7}, 12, -30, 30, dt);
    Tensor xp = test::uniform_tensor({9, 7}, 13, 0.01, 10, dt);
    // libm functions on both sides: within a few ulps of the dtype
    const double ulp_tol = dt == DType::f64 ? 1e-15 : dt == DType::f32 ? 1e-6 : 8e-3;
    for (const auto& c : test::elementwise_cases()) {
      const test::OpSpec* s = test::spec_of(c.name);
      REQUIRE(s != nullptr);  // test_elementwise_cases.cpp names the missing row
      INFO(c.name << " " << dtype_name(dt));
      const std::vector<Tensor> in = c.arity == 2                          ? std::vector<Tensor>{a, b}
                                     : s->domain == test::Domain::positive ? std::vector<Tensor>{xp}
                                                                           : std::vector<Tensor>{x};
      bool exact = false;
      const double err = gpu_vs_cpu(
          in, [&](const std::vector<Tensor>& t) { return c.run(t, *s); }, &exact);
      if (s->agreement == test::Agreement::bitwise) {
        CHECK(err == 0.0);  // one IEEE operation on both sides: bit-identical
        CHECK(exact);
      } else {
        CHECK(err <= ulp_tol);
      }
      if (c.run_in_place) {
        const double err_in_place = gpu_vs_cpu(in, [&](const std::vector<Tensor>& t) {
          Tensor out = t[0].clone();
          c.run_in_place(out, t);
          return out;
        });
        CHECK(err_in_place <= (s->agreement == test::Agreement::bitwise ? 0.0 : ulp_tol));
      }
    }
    Tensor cond = Tensor::from_vector(std::vector<double>{1, 0, 0, 1, 1, 0, 1}, {7}, dt);
    CHECK(gpu_vs_cpu({cond, x, xp}, [](const std::vector<Tensor>& t) { return ops::where(t[0], t[1], t[2]); }) == 0.0);
    // in-place accumulate on the device
    Tensor g = test::random_tensor({9, 7}, 14, dt);
    CHECK(gpu_vs_cpu({g, x}, [](const std::vector<Tensor>& t) {
            Tensor acc = t[0].clone();
            ops::add_(acc, t[1]);
            return acc;
          }) == 0.0);
  }
}

TEST_CASE("cuda: dense elementwise ops (16-byte vector path) match the CPU at every length and offset",
          "[engine][cuda]") {
  // Lengths around the vector width (8 bf16, 4 f32, 2 f64) and one long enough for the
  // grid-stride loop; offsets 0 (aligned: the vector path) and 1 (misaligned: the scalar path).
  // Binary, unary and fill.
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t n : {1, 7, 8, 9, 17, 4099, 1 << 20}) {
      for (int64_t off : {0, 1}) {
        INFO(dtype_name(dt) << " n " << n << " offset " << off);
        // the views are taken on each side (a copy to the GPU would realign them)
        const Tensor a = test::random_tensor({n + 1}, 20, dt), b = test::random_tensor({n + 1}, 21, dt);
        auto part = [n, off](const Tensor& t) { return t.narrow(0, off, n); };
        CHECK(gpu_vs_cpu({a, b}, [&](const std::vector<Tensor>& t) { return ops::mul(part(t[0]), part(t[1])); }) ==
              0.0);
        CHECK(gpu_vs_cpu({a, b}, [&](const std::vector<Tensor>& t) {
                Tensor acc = t[0].clone();
                Tensor view = part(acc);
                ops::add_(view, part(t[1]));
                return acc;
              }) == 0.0);
        CHECK(gpu_vs_cpu({a}, [&](const std::vector<Tensor>& t) {
                Tensor y = ops::mul_scalar(part(t[0]), 3.0);
                Tensor z = part(t[0]).clone();
                ops::unary_out(ops::UnaryOp::neg, z, z);
                return ops::add(y, z);
              }) == 0.0);
        CHECK(gpu_vs_cpu({a}, [&](const std::vector<Tensor>& t) {  // the element outside the view kept
                Tensor acc = t[0].clone();
                Tensor view = part(acc);
                view.fill_(-2.5);
                return acc;
              }) == 0.0);
      }
    }
  }
}

TEST_CASE("cuda: a row broadcast over a matrix (the bias path) matches the CPU bit for bit", "[engine][cuda]") {
  // Row widths on and off the vector width, the row as either operand, aligned and misaligned
  // matrices (offset 1: the strided path); a 3-D matrix merges to [rows, n].
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t n : {8, 24, 768, 13}) {
      for (int64_t off : {0, 1}) {
        INFO(dtype_name(dt) << " n " << n << " offset " << off);
        const int64_t rows = 37;
        const Tensor x = test::random_tensor({rows * n + 1}, 30, dt), r = test::random_tensor({n}, 31, dt);
        auto mat = [&](const Tensor& t) { return t.narrow(0, off, rows * n).view({rows, n}); };
        CHECK(gpu_vs_cpu({x, r}, [&](const std::vector<Tensor>& t) { return ops::add(mat(t[0]), t[1]); }) == 0.0);
        CHECK(gpu_vs_cpu({x, r}, [&](const std::vector<Tensor>& t) { return ops::sub(t[1], mat(t[0])); }) == 0.0);
        CHECK(gpu_vs_cpu({x, r}, [&](const std::vector<Tensor>& t) {
                Tensor y = mat(t[0]).clone();
                ops::add_out(y, y, t[1]);  // in place, as the linear layer's bias
                return y;
              }) == 0.0);
        CHECK(gpu_vs_cpu({x, r}, [&](const std::vector<Tensor>& t) {
                return ops::mul(mat(t[0]).view({rows, 1, n}), t[1].view({1, 1, n}));
              }) == 0.0);
      }
    }
  }
}

TEST_CASE("cuda: reductions, cumsum, shape ops match the CPU", "[engine][cuda]") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    INFO(dtype_name(dt));
    // short lines (one thread per line) and long lines (one block per line)
    for (int64_t len : {5, 300, 4097}) {
      Tensor x = test::random_tensor({3, len, 4}, 20 + len, dt);
      for (int64_t d : {0, 1, 2}) {
        INFO("len " << len << " dim " << d);
        const double tol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : 2e-2;
        CHECK(gpu_vs_cpu({x}, [&](const std::vector<Tensor>& t) { return ops::sum(t[0], d, false); }) <= tol);
        CHECK(gpu_vs_cpu({x}, [&](const std::vector<Tensor>& t) { return ops::max(t[0], d, true); }) == 0.0);
        CHECK(gpu_vs_cpu({x}, [&](const std::vector<Tensor>& t) { return ops::mean(t[0], d, false); }) <= tol);
      }
      CHECK(gpu_vs_cpu({x}, [](const std::vector<Tensor>& t) { return ops::sum_all(t[0]); }) <= 1e-2);
      // column sums of [len, n] (long lines over the outer dim: the column kernel), n below,
      // at and above a block's 8 columns
      for (int64_t n : {3, 8, 771}) {
        if (len < 256) continue;
        INFO("columns: len " << len << " n " << n);
        const double tol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : 2e-2;
        Tensor m = test::random_tensor({len, n}, 40 + n, dt);
        CHECK(gpu_vs_cpu({m}, [](const std::vector<Tensor>& t) { return ops::sum(t[0], 0, false); }) <= tol);
        CHECK(gpu_vs_cpu({m}, [](const std::vector<Tensor>& t) { return ops::max(t[0], 0, false); }) == 0.0);
        // the middle dim of [2, len, n]: outputs [2, n], rows of columns
        Tensor m3 = test::random_tensor({2, len, n}, 50 + n, dt);
        CHECK(gpu_vs_cpu({m3}, [](const std::vector<Tensor>& t) { return ops::sum(t[0], 1, false); }) <= tol);
      }
    }
    Tensor y = test::random_tensor({4, 8, 6}, 30, dt).permute({2, 0, 1});
    for (int64_t d : {0, 1, 2})
      for (bool rev : {false, true}) {
        bool exact = false;
        CHECK(gpu_vs_cpu(
                  {y}, [&](const std::vector<Tensor>& t) { return ops::cumsum(t[0], d, rev); }, &exact) == 0.0);
        CHECK(exact);  // same sequential order and roundings on both sides
      }
    CHECK(gpu_vs_cpu({y}, [](const std::vector<Tensor>& t) { return ops::sum_to(t[0], {4, 1}); }) <= tol_for(dt) * 10);
    CHECK(gpu_vs_cpu({y}, [](const std::vector<Tensor>& t) { return ops::pad(t[0], 2, 1, 3, -5.0); }) == 0.0);
    CHECK(gpu_vs_cpu({y, y}, [](const std::vector<Tensor>& t) {
            return ops::cat({t[0], t[1].narrow(1, 0, 2)}, 1);
          }) == 0.0);
    CHECK(gpu_vs_cpu({y}, [](const std::vector<Tensor>& t) { return ops::tril(t[0], -1); }) == 0.0);
    CHECK(gpu_vs_cpu({y}, [](const std::vector<Tensor>& t) { return ops::triu(t[0], 1); }) == 0.0);
  }
  CHECK(same_bits(ops::eye(5, DType::f32, kGpu), ops::eye(5, DType::f32)));
}

TEST_CASE("cuda: column_sums_into matches the CPU (vector and scalar rows, one and many row splits)",
          "[engine][cuda]") {
  // rows 100: one split (added in the block); 5000: 40 splits and the combine pass. cols 768
  // and 64: 16-byte vectors; 13: the scalar path. Two sets with y, then x alone.
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t rows : {100, 5000}) {
      for (int64_t cols : {768, 64, 13}) {
        INFO(dtype_name(dt) << " rows " << rows << " cols " << cols);
        const DType adt = dt == DType::f64 ? DType::f64 : DType::f32;
        const Tensor x0 = test::random_tensor({rows, cols}, 60, dt), x1 = test::random_tensor({rows, cols}, 61, dt);
        const Tensor y0 = test::random_tensor({rows, cols}, 62, dt), y1 = test::random_tensor({rows, cols}, 63, dt);
        const Tensor a = test::random_tensor({cols}, 64, adt), b = test::random_tensor({cols}, 65, adt);
        auto run = [&](const std::vector<Tensor>& t) {
          Tensor a0 = t[4].clone(), a1 = t[5].clone();
          ops::column_sums_into({&a0, &a1}, {t[0], t[1]}, {t[2], t[3]});
          Tensor c = t[5].clone();
          ops::column_sums_into({&c}, {t[1]});
          return ops::cat({a0, a1, c}, 0);
        };
        CHECK(gpu_vs_cpu({x0, x1, y0, y1, a, b}, run) <= (adt == DType::f64 ? 1e-12 : 1e-5));
      }
    }
  }
}

TEST_CASE("cuda: matmul matches the CPU for every flag and layout", "[engine][cuda]") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    // the CPU accumulates in f64; cuBLAS in the dtype's compute type (fp32 for 16-bit)
    const double tol = dt == DType::f64 ? 1e-13 : dt == DType::f32 ? 1e-5 : 1e-2;
    uint64_t seed = 40;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        INFO(dtype_name(dt) << " ta " << ta << " tb " << tb);
        const int64_t M = 37, K = 64, N = 29;
        Tensor a = test::random_tensor(ta ? Shape{2, 3, K, M} : Shape{2, 3, M, K}, seed++, dt);
        Tensor b = test::random_tensor(tb ? Shape{2, 3, N, K} : Shape{2, 3, K, N}, seed++, dt);
        Tensor w = test::random_tensor(tb ? Shape{N, K} : Shape{K, N}, seed++, dt);
        CHECK(gpu_vs_cpu({a, b}, [&](const std::vector<Tensor>& t) { return ops::matmul(t[0], t[1], ta, tb); }) <= tol);
        CHECK(gpu_vs_cpu({a, w}, [&](const std::vector<Tensor>& t) { return ops::matmul(t[0], t[1], ta, tb); }) <= tol);
        // transposed views instead of flags, and a permuted (non-collapsible) batch
        CHECK(gpu_vs_cpu({a, b}, [&](const std::vector<Tensor>& t) {
                return ops::matmul(t[0].transpose(-1, -2), t[1].transpose(-1, -2), !ta, !tb);
              }) <= tol);
        CHECK(gpu_vs_cpu({a, b}, [&](const std::vector<Tensor>& t) {
                return ops::matmul(t[0].transpose(0, 1), t[1].transpose(0, 1), ta, tb);
              }) <= tol);
      }
    // matmul_out: dW += alpha x^T dy
    Tensor x = test::random_tensor({50, 24}, 60, dt), dy = test::random_tensor({50, 16}, 61, dt);
    Tensor w0 = test::random_tensor({24, 16}, 62, dt);
    CHECK(gpu_vs_cpu({x, dy, w0}, [](const std::vector<Tensor>& t) {
            Tensor w = t[2].clone();
            ops::matmul_out(w, t[0], t[1], true, false, 0.5, 1.0);
            return w;
          }) <= tol * 2);
    // matmul_out into column blocks of a wider matrix: G [24, 2 * 8] viewed [2, 24, 8]
    Tensor x2 = test::random_tensor({2, 50, 24}, 63, dt), dy2 = test::random_tensor({2, 50, 8}, 64, dt);
    Tensor g0 = test::random_tensor({24, 16}, 65, dt);
    CHECK(gpu_vs_cpu({x2, dy2, g0}, [](const std::vector<Tensor>& t) {
            Tensor g = t[2].clone();
            Tensor blocks = g.view({24, 2, 8}).permute({1, 0, 2});
            ops::matmul_out(blocks, t[0], t[1], true, false, 0.5, 1.0);
            return g;
          }) <= tol * 2);
  }
}

TEST_CASE("cuda: triangular solve and l2norm match the CPU", "[engine][cuda]") {
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(dtype_name(dt));
    Tensor Lraw = test::random_tensor({2, 3, 64, 64}, 70, dt);
    Tensor L = ops::add(ops::mul_scalar(ops::tril(Lraw, -1), 0.1), ops::triu(Lraw, 0));
    Tensor B = test::random_tensor({2, 3, 64, 20}, 71, dt);
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    for (bool tr : {false, true}) {
      CHECK(gpu_vs_cpu({L, B}, [&](const std::vector<Tensor>& t) { return ops::solve_unit_lower(t[0], t[1], tr); }) <=
            tol);
      // strided right-hand side
      CHECK(gpu_vs_cpu({L, B}, [&](const std::vector<Tensor>& t) {
              return ops::solve_unit_lower(t[0], t[1].narrow(-2, 0, 64).narrow(-1, 3, 10), tr);
            }) <= tol);
    }
    Tensor x = test::random_tensor({4, 7, 2, 128}, 72, dt), dy = test::random_tensor({4, 7, 2, 128}, 73, dt);
    CHECK(gpu_vs_cpu({x}, [](const std::vector<Tensor>& t) { return ops::l2norm(t[0], 1e-6).first; }) <=
          tol_for(dt) * 4);
    CHECK(gpu_vs_cpu({x}, [](const std::vector<Tensor>& t) { return ops::l2norm(t[0], 1e-6).second; }) <=
          tol_for(dt) * 4);
    CHECK(gpu_vs_cpu({x, dy}, [](const std::vector<Tensor>& t) {
            auto [y, r] = ops::l2norm(t[0], 1e-6);
            return ops::l2norm_backward(t[1], y, r);
          }) <= tol_for(dt) * 10);
  }
}

TEST_CASE("cuda: random fills are bit-identical to the CPU", "[engine][cuda]") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    for (uint64_t seed : {uint64_t{0}, uint64_t{42}, ~uint64_t{0}}) {
      CHECK(same_bits(ops::randn({1 << 20}, seed, 12345, dt, kGpu), ops::randn({1 << 20}, seed, 12345, dt)));
      CHECK(same_bits(ops::rand({1000, 33}, seed, uint64_t{1} << 40, dt, kGpu),
                      ops::rand({1000, 33}, seed, uint64_t{1} << 40, dt)));
    }
    Tensor g = Tensor::zeros({64, 48}, dt, kGpu), c = Tensor::zeros({64, 48}, dt);
    Tensor gv = g.transpose(0, 1).narrow(1, 5, 50), cv = c.transpose(0, 1).narrow(1, 5, 50);
    ops::normal_(gv, 7, 3, 0.5, 0.02);
    ops::normal_(cv, 7, 3, 0.5, 0.02);
    CHECK(same_bits(g, c));
  }
}

TEST_CASE("cuda: streams, guards, record_stream", "[engine][cuda]") {
  Stream def = current_stream(kGpu);
  CHECK(def.id() == 0);
  Stream s = Stream::create(kGpu);
  CHECK(s.id() != 0);
  Tensor x = test::random_tensor({256, 256}, 80, DType::f32, kGpu);
  Tensor y;
  synchronize(kGpu);  // x's upload (default stream) must land before s reads it
  {
    StreamGuard guard(s);
    CHECK(current_stream(kGpu) == s);
    x.record_stream(s);  // x was allocated on the default stream, now used on s
    y = ops::matmul(ops::exp(ops::mul_scalar(x, 0.01)), x);
  }
  CHECK(current_stream(kGpu) == def);
  s.synchronize();
  Tensor ref = ops::matmul(ops::exp(ops::mul_scalar(x.to(kCpu), 0.01)), x.to(kCpu));
  CHECK(ops::max_rel_diff(y, ref) <= 1e-5);
  synchronize(kGpu);
}

TEST_CASE("cuda: empty() is NaN under the allocator's poison mode", "[engine][cuda]") {
  alloc::CachingAllocator& a = alloc::cuda_allocator(0);
  const bool was = a.poison();
  a.set_poison(true);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    std::vector<double> v = Tensor::empty({1000}, dt, kGpu).to_vector();
    int nans = 0;
    for (double x : v) nans += std::isnan(x);
    CHECK(nans == 1000);
  }
  a.set_poison(was);
}

TEST_CASE("cuda graph: a capture that uploads host memory fails by name; device-built tensors replay",
          "[engine][graph][cuda]") {
  const Device dev = Device::cuda(0);
  {
    CudaGraph g(dev);
    CHECK_THROWS_WITH(g.capture([&] {
      Tensor::from_vector(std::vector<double>{1, 2, 3}, {3}, DType::f32, dev);
    }),
                      Catch::Contains("host-to-device") && Catch::Contains("CUDA graph"));
    CHECK_FALSE(g.captured());
  }
  // The device-built form of such a constant (zeros, then a filled slice) is captured and
  // rewritten by every replay.
  Tensor out = Tensor::zeros({8}, DType::f32, dev);
  CudaGraph g(dev);
  g.capture([&] {
    Tensor m = Tensor::zeros({8}, DType::f32, dev);
    m.narrow(0, 0, 5).fill_(1.0);
    out.copy_(ops::mul_scalar(m, 2.0));
  });
  REQUIRE(g.captured());
  out.fill_(-1.0);
  g.replay(current_stream(dev));
  CHECK(out.to_vector() == std::vector<double>{2, 2, 2, 2, 2, 0, 0, 0});
}
