// The RWKV6 mixer at the Tensor level (engine/mixers/rwkv6.h) on CUDA: the ops path (engine
// ops on the GPU) and the fused path with each backward (fused, fallback) against the f64
// naive recurrence and against each other, fp32 and bf16 (SIMT and tensor-core kernels);
// and the allocator gate: the fused backward's extra peak is below the fallback's by the
// fallback's two fp32 [B,T,H,D] intra buffers.
#include <catch2/catch.hpp>

#include <cstdio>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/device.h"
#include "engine/mixers/rwkv6.h"
#include "engine/ops.h"
#include "tests/kernels/rwkv6_test_util.h"

using namespace lt::rwkv6;
using namespace lt::rwkv6::test;

namespace {

using lt::Tensor;
using lt::mixers::Rwkv6Config;
using lt::mixers::Rwkv6Path;

struct DevInputs {
  Tensor r, k, v, w, u, h0, dO, dht;
  DevInputs(const Problem& p, lt::DType dt) {
    const Dims& d = p.d;
    const lt::Device dev = lt::Device::cuda(0);
    const lt::Shape tok{d.B, d.T, d.H, d.D}, st{d.B, d.H, d.D, d.D};
    r = Tensor::from_vector(p.r, tok, dt, dev), k = Tensor::from_vector(p.k, tok, dt, dev);
    v = Tensor::from_vector(p.v, tok, dt, dev), w = Tensor::from_vector(p.w, tok, dt, dev);
    dO = Tensor::from_vector(p.dO, tok, dt, dev);
    u = Tensor::from_vector(p.u, {d.H, d.D}, lt::DType::f32, dev);
    if (!p.h0.empty()) h0 = Tensor::from_vector(p.h0, st, lt::DType::f32, dev);
    if (!p.dht.empty()) dht = Tensor::from_vector(p.dht, st, lt::DType::f32, dev);
  }
  lt::mixers::Rwkv6Inputs inputs() const { return {r, k, v, w, u, h0, Tensor()}; }
};

struct Result {
  std::vector<double> x[8];  // o, ht, dr, dk, dv, dw, du, dh0
};
Result run_api(const DevInputs& in, Rwkv6Config cfg) {
  Result res;
  cfg.output_final_state = true;
  auto out = lt::mixers::rwkv6_forward(in.inputs(), cfg);
  auto g = lt::mixers::rwkv6_backward(std::move(out.saved), in.dO, in.dht);
  res.x[0] = out.o.to_vector(), res.x[1] = out.ht.to_vector();
  res.x[2] = g.dr.to_vector(), res.x[3] = g.dk.to_vector(), res.x[4] = g.dv.to_vector(), res.x[5] = g.dw.to_vector();
  res.x[6] = g.du.to_vector(), res.x[7] = g.dh0.to_vector();
  return res;
}

}  // namespace

TEST_CASE("rwkv6 mixer on CUDA: ops, fused with each backward vs naive and vs each other", "[rwkv6][cuda][mixer]") {
  struct ApiCase {
    Dims d;
    lt::DType dt;
  };
  const ApiCase cases[] = {{{2, 100, 2, 64, 64}, lt::DType::f32},
                           {{1, 75, 2, 128, 32}, lt::DType::f32},
                           {{2, 90, 2, 64, 16}, lt::DType::bf16},
                           {{2, 90, 2, 64, 64}, lt::DType::bf16}};  // tensor-core kernels
  uint64_t seed = 555;
  for (const auto& c : cases) {
    const bool bf = c.dt == lt::DType::bf16;
    Problem p(c.d, seed++, GateKind::kLogSigmoid, true, true);
    if (bf) p.round_to_bf16();
    Grads ref = naive_reference(p);
    const std::vector<double>* refs[8] = {&ref.o, &ref.ht, &ref.dr, &ref.dk, &ref.dv, &ref.dw, &ref.du, &ref.dh0};
    DevInputs in(p, c.dt);
    Rwkv6Config cfg;
    cfg.chunk = static_cast<int>(c.d.C);
    cfg.scale = p.scale;
    cfg.path = Rwkv6Path::ops;
    const Result ops = run_api(in, cfg);
    struct Run {
      Rwkv6Path path;
      BwdImpl backward;
    };
    for (const Run& run : {Run{Rwkv6Path::ops, BwdImpl::fused}, Run{Rwkv6Path::fused, BwdImpl::fused},
                           Run{Rwkv6Path::fused, BwdImpl::fallback}}) {
      cfg.path = run.path;
      cfg.backward = run.backward;
      const Result res = run.path == Rwkv6Path::ops ? ops : run_api(in, cfg);
      double worst = 0, worst_vs_ops = 0;
      for (int i = 0; i < 8; ++i) {
        worst = std::max(worst, rel_err_l2(res.x[i], *refs[i]));
        worst_vs_ops = std::max(worst_vs_ops, rel_err_l2(res.x[i], ops.x[i]));
      }
      std::printf("rwkv6 mixer cuda %s D%lld C%lld %-6s backward %-8s worst vs naive %.2e, vs ops path %.2e\n",
                  bf ? "bf16" : "fp32", (long long)c.d.D, (long long)c.d.C, lt::mixers::rwkv6_path_name(run.path),
                  bwd_impl_name(run.backward), worst, worst_vs_ops);
      CHECK(worst < (bf ? 1e-2 : 1e-5));
      CHECK(worst_vs_ops < (bf ? 1e-2 : 1e-5));
    }
  }
}

TEST_CASE("rwkv6 mixer on CUDA: the fused backward's peak allocation is below the fallback's by two fp32 [B,T,H,D]",
          "[rwkv6][cuda][alloc]") {
  struct AllocCase {
    Dims d;
    lt::DType dt;
  };
  for (const AllocCase& ac :
       {AllocCase{{2, 256, 4, 128, 64}, lt::DType::f32}, AllocCase{{1, 300, 2, 256, 32}, lt::DType::f32},
        AllocCase{{2, 512, 4, 64, 16}, lt::DType::f32},
        AllocCase{{2, 256, 4, 64, 64}, lt::DType::bf16}}) {  // tensor-core kernels
    const Dims& d = ac.d;
    Problem p(d, 99, GateKind::kLogSigmoid, true, true);
    if (ac.dt == lt::DType::bf16) p.round_to_bf16();
    DevInputs in(p, ac.dt);
    auto& A = lt::alloc::cuda_allocator(0);
    int64_t peak[2] = {0, 0};
    for (int variant = 0; variant < 2; ++variant) {
      Rwkv6Config cfg;
      cfg.chunk = static_cast<int>(d.C);
      cfg.path = Rwkv6Path::fused;
      cfg.backward = variant == 0 ? BwdImpl::fused : BwdImpl::fallback;
      auto out = lt::mixers::rwkv6_forward(in.inputs(), cfg);
      lt::synchronize(lt::Device::cuda(0));
      A.reset_peak_stats();
      const int64_t base = A.stats().allocated_bytes.current;
      {
        auto g = lt::mixers::rwkv6_backward(out.saved, in.dO, in.dht);
        lt::synchronize(lt::Device::cuda(0));
        peak[variant] = A.stats().allocated_bytes.peak - base;
      }
    }
    const int64_t two = 2 * d.token_numel() * 4;
    std::printf(
        "rwkv6 mixer alloc %s B%lld T%lld H%lld D%lld C%lld: backward extra peak fused %lld B, fallback %lld B, "
        "difference %lld B (two fp32 [B,T,H,D] = %lld B)\n",
        lt::dtype_name(ac.dt), (long long)d.B, (long long)d.T, (long long)d.H, (long long)d.D, (long long)d.C,
        (long long)peak[0], (long long)peak[1], (long long)(peak[1] - peak[0]), (long long)two);
    CHECK(peak[1] - peak[0] >= two);
  }
}
