// AdamW and the gradient norm on CUDA against the CPU (engine/optim/adamw.h): the norm for
// aligned and misaligned arenas (allocator poison on, so unwritten scratch or output shows
// as NaN) and its run-to-run bits; several update steps with the clip active and inactive
// and a decay boundary inside a vector of four, f32 and f64, aligned (vector path) and
// misaligned (scalar path); the bf16 shadow (poisoned with NaN first) equals the rounded
// params; a NaN gradient skips the step and counts it on the device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "allocator/caching_allocator.h"
#include "engine/ops.h"
#include "engine/optim/adamw.h"
#include "tests/engine/engine_test_util.h"

using namespace lt;
using lt::test::PoisonScope;
using lt::test::same_bits;
using test::rel_err;

namespace {

const Device kGpu = Device::cuda(0);

// The same arenas on the CPU and on the GPU; `offset` elements of padding in front make the
// GPU arenas misaligned for vector access when offset % 4 != 0.
struct Pair {
  optim::AdamWArenas cpu, gpu;
  Tensor skipped_cpu, skipped_gpu;
};

Tensor on_gpu(const Tensor& t, int64_t offset) {
  Tensor big = Tensor::full({t.numel() + offset}, NAN, t.dtype(), kGpu);
  Tensor view = big.narrow(0, offset, t.numel());
  view.copy_(t);
  return view;
}

Pair make_pair(int64_t P, DType dt, uint64_t seed, int64_t decay_end, int64_t offset) {
  Pair r;
  r.cpu.params = test::random_tensor({P}, seed, dt);
  r.cpu.grads = test::random_tensor({P}, seed + 1, dt);
  r.cpu.m = ops::mul_scalar(test::random_tensor({P}, seed + 2, dt), 0.1);
  r.cpu.v = test::uniform_tensor({P}, seed + 3, 0.01, 0.5, dt);
  r.cpu.decay_end = decay_end;
  r.cpu.params_bf16 = Tensor::full({P}, NAN, DType::bf16);
  r.gpu.params = on_gpu(r.cpu.params, offset);
  r.gpu.grads = on_gpu(r.cpu.grads, offset);
  r.gpu.m = on_gpu(r.cpu.m, offset);
  r.gpu.v = on_gpu(r.cpu.v, offset);
  r.gpu.decay_end = decay_end;
  r.gpu.params_bf16 = on_gpu(r.cpu.params_bf16, offset);
  r.skipped_cpu = Tensor::zeros({}, DType::i32);
  r.skipped_gpu = Tensor::zeros({}, DType::i32, kGpu);
  return r;
}

}  // namespace

TEST_CASE("cuda: grad_norm matches the CPU and is bit-reproducible", "[optim][adamw][cuda]") {
  PoisonScope poison;
  for (DType dt : {DType::f32, DType::f64}) {
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{4099}, int64_t{(1 << 20) + 3}}) {
      for (int64_t offset : {int64_t{0}, int64_t{1}}) {
        INFO(dtype_name(dt) << " n " << n << " offset " << offset);
        const Tensor g = test::random_tensor({n}, 50 + n, dt);
        const Tensor gg = on_gpu(g, offset);
        const Tensor ref = optim::grad_norm(g);
        const Tensor a = optim::grad_norm(gg), b = optim::grad_norm(gg);
        REQUIRE(a.device() == kGpu);
        REQUIRE(a.dtype() == dt);
        // Both sum in f64 (different orders) and round once: f32 agrees to its last bit or one ulp.
        CHECK(std::fabs(a.item() - ref.item()) <= (dt == DType::f32 ? 1.2e-7 : 1e-14) * ref.item());
        CHECK(same_bits(a, b));
      }
    }
  }
  Tensor g = test::random_tensor({5000}, 60).to(kGpu);
  g.narrow(0, 4321, 1).fill_(NAN);
  CHECK(std::isnan(optim::grad_norm(g).item()));
}

TEST_CASE("cuda: adamw steps match the CPU (clip on and off, decay boundary, shadow)", "[optim][adamw][cuda]") {
  const int64_t P = 10007, decay_end = 4099;  // the boundary falls inside a vector of four
  for (DType dt : {DType::f32, DType::f64}) {
    // The CPU computes in f64 and rounds once; CUDA computes f32 arenas in f32 (a few ulps).
    const double tol = dt == DType::f32 ? 2e-6 : 1e-13;
    for (int64_t offset : {int64_t{0}, int64_t{1}}) {
      for (double max_norm : {1e6, 10.0}) {  // inactive, active (the norms are ~100)
        INFO(dtype_name(dt) << " offset " << offset << " max_grad_norm " << max_norm);
        optim::AdamWConfig cfg;
        cfg.max_grad_norm = max_norm;
        Pair r = make_pair(P, dt, 100, decay_end, offset);
        for (int64_t t = 1; t <= 4; ++t) {
          const Tensor g = test::random_tensor({P}, 200 + t, dt);
          r.cpu.grads.copy_(g);
          r.gpu.grads.copy_(g);
          r.gpu.params_bf16.fill_(NAN);
          const Tensor nc = optim::grad_norm(r.cpu.grads), ng = optim::grad_norm(r.gpu.grads);
          if (max_norm == 10.0) REQUIRE(nc.item() > 10.0);
          optim::adamw_step(r.cpu, cfg, 2e-3, t, nc, r.skipped_cpu);
          optim::adamw_step(r.gpu, cfg, 2e-3, t, ng, r.skipped_gpu);
          CHECK(rel_err(r.gpu.params.to_vector(), r.cpu.params.to_vector()) <= tol);
          CHECK(rel_err(r.gpu.m.to_vector(), r.cpu.m.to_vector()) <= tol);
          CHECK(rel_err(r.gpu.v.to_vector(), r.cpu.v.to_vector()) <= tol);
          CHECK(same_bits(r.gpu.params_bf16, ops::convert(r.gpu.params, DType::bf16)));
        }
        CHECK(r.skipped_gpu.item() == 0);
      }
    }
  }
}

TEST_CASE("cuda: a NaN gradient skips the step on the device and counts it", "[optim][adamw][cuda]") {
  const int64_t P = 5003;
  optim::AdamWConfig cfg;
  for (int64_t offset : {int64_t{0}, int64_t{3}}) {
    INFO("offset " << offset);
    Pair r = make_pair(P, DType::f32, 300, 2000, offset);
    const Tensor p0 = r.gpu.params.clone(), m0 = r.gpu.m.clone(), v0 = r.gpu.v.clone();
    r.gpu.grads.narrow(0, 4000, 1).fill_(NAN);
    for (int i = 0; i < 2; ++i) {
      r.gpu.params_bf16.fill_(NAN);
      optim::adamw_step(r.gpu, cfg, 1e-2, 1, optim::grad_norm(r.gpu.grads), r.skipped_gpu);
    }
    CHECK(r.skipped_gpu.item() == 2);
    CHECK(same_bits(r.gpu.params, p0));
    CHECK(same_bits(r.gpu.m, m0));
    CHECK(same_bits(r.gpu.v, v0));
    CHECK(same_bits(r.gpu.params_bf16, ops::convert(p0, DType::bf16)));
    // A finite step after the skips updates and leaves the counter at 2.
    r.gpu.grads.copy_(test::random_tensor({P}, 301));
    optim::adamw_step(r.gpu, cfg, 1e-2, 1, optim::grad_norm(r.gpu.grads), r.skipped_gpu);
    CHECK_FALSE(same_bits(r.gpu.params, p0));
    CHECK(r.skipped_gpu.item() == 2);
  }
}
