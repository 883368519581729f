// The KDA mixer's Tensor API (engine/mixers/kda.h) on CUDA: the fused path against the ops
// path on the same device (allocator poison mode on, so an unwritten element is NaN), and
// the allocator gate: the fused backward reserves less than the ops path and allocates
// nothing of the state trajectory's size. Skipped (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "allocator/caching_allocator.h"
#include "engine/mixers/kda.h"
#include "kernels/cuda/cuda_check.h"
#include "tests/support/kda_testing.h"

using namespace lt;
using namespace lt::kda;
using namespace lt::kda::testing;

TEST_CASE("KDA on CUDA: fused (Tensor API) vs the ops path", "[kda][cuda][ops]") {
  alloc::cuda_allocator(0).set_poison(true);
  const uint64_t seed = test_seed() + 11;
  std::vector<Case> cases;
  auto add = [&](Dims d, bool h0, bool dht, DType dt) {
    Case c;
    c.dims = d;
    c.h0 = h0;
    c.dht = dht;
    c.dtype = dt;
    cases.push_back(c);
  };
  add({8, 512, 12, 64, 16}, false, false, DType::f32);
  add({8, 512, 12, 64, 64}, false, false, DType::f32);
  add({8, 512, 12, 64, 64}, false, false, DType::bf16);
  add({2, 300, 3, 64, 32}, true, true, DType::f32);
  add({2, 200, 2, 128, 64}, true, true, DType::f32);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Data x = make_data(c, seed + i);
    const TensorCase t = to_tensors(c, x, c.dtype, Device::cuda(0));
    const Result ops_r = run_mixer(c, t, mixers::KdaPath::ops);
    const Result fused_r = run_mixer(c, t, mixers::KdaPath::fused);
    const ErrReport e = compare(fused_r, ops_r, false, true, c.h0);
    // the ops path computes bf16 inputs in f32: the comparison then carries bf16 rounding.
    // Adaptive gate (kda_testing.h): what the naive f32 recurrence itself misses the ops
    // result by, on these inputs.
    const ErrReport e32 = compare(run_naive_f32(c, x), ops_r, false, true, c.h0);
    const double tol = c.dtype == DType::bf16 ? 1e-2 : 1e-5;
    const Gated gt = gate_errors(e, e32, tol);
    std::printf("[kda] cuda fused vs ops %-36s worst %.2e:%s%s\n", c.name().c_str(), e.worst(), e.str().c_str(),
                gt.adapted.c_str());
    INFO(c.name() << " seed " << seed + i << e.str() << gt.adapted << replay_hint());
    CHECK(gt.pass);
  }
}

TEST_CASE("KDA allocator gate: fused backward reserves less than ops, one trajectory", "[kda][cuda][alloc]") {
  alloc::CachingAllocator& A = alloc::cuda_allocator(0);
  A.set_poison(false);
  Case c;
  c.dims = {8, 512, 12, 64, 16};
  const Data x = make_data(c, test_seed() + 21);
  const TensorCase t = to_tensors(c, x, c.dtype, Device::cuda(0));
  const Dims& d = c.dims;
  const int64_t traj = static_cast<int64_t>(trajectory_bytes(d));
  struct Figures {
    int64_t allocs = 0, peak_in_use = 0, reserved = 0, big = 0;
  };
  auto measure = [&](mixers::KdaPath path, Figures& fwd_f, Figures& bwd_f) {
    mixers::KdaConfig cfg;
    cfg.chunk = d.C;
    cfg.path = path;
    LT_CUDA_CHECK(cudaDeviceSynchronize());
    A.empty_cache();
    A.set_trace(true);
    A.reset_peak_stats();
    A.reset_accumulated_stats();
    const int64_t in_use0 = A.stats().allocated_bytes.current, res0 = A.stats().reserved_bytes.current;
    auto out = mixers::kda_forward({t.q, t.k, t.v, t.f, t.b, t.A_log, t.dt_bias, Tensor(), Tensor()}, cfg);
    LT_CUDA_CHECK(cudaDeviceSynchronize());
    alloc::Stats s = A.stats();
    fwd_f.allocs = s.allocation.allocated;
    fwd_f.peak_in_use = s.allocated_bytes.peak - in_use0;
    fwd_f.reserved = s.reserved_bytes.peak - res0;
    for (auto& ev : A.trace())
      if (ev.action == alloc::TraceAction::alloc && static_cast<int64_t>(ev.requested_size) >= traj) ++fwd_f.big;
    // backward alone: cached blocks released first, so its reservation is its own
    A.empty_cache();
    A.set_trace(true);
    A.reset_peak_stats();
    A.reset_accumulated_stats();
    const int64_t in_use1 = A.stats().allocated_bytes.current, res1 = A.stats().reserved_bytes.current;
    {
      auto g = mixers::kda_backward(std::move(out.saved), t.dO);
      LT_CUDA_CHECK(cudaDeviceSynchronize());
    }
    s = A.stats();
    bwd_f.allocs = s.allocation.allocated;
    bwd_f.peak_in_use = s.allocated_bytes.peak - in_use1;
    bwd_f.reserved = s.reserved_bytes.peak - res1;
    for (auto& ev : A.trace())
      if (ev.action == alloc::TraceAction::alloc && static_cast<int64_t>(ev.requested_size) >= traj) ++bwd_f.big;
    A.set_trace(false);
  };
  Figures ff, fb, of, ob;
  measure(mixers::KdaPath::fused, ff, fb);
  measure(mixers::KdaPath::ops, of, ob);
  auto line = [&](const char* name, const Figures& f) {
    std::printf(
        "[kda] alloc gate %-14s allocations %4lld  peak in-use %9.1f MB  reserved %9.1f MB  "
        "allocations >= trajectory (%.1f MB): %lld\n",
        name, (long long)f.allocs, f.peak_in_use / 1e6, f.reserved / 1e6, traj / 1e6, (long long)f.big);
  };
  line("fused forward", ff);
  line("fused backward", fb);
  line("ops forward", of);
  line("ops backward", ob);
  CHECK(fb.reserved < ob.reserved);
  CHECK(ff.big == 1);  // the saved state trajectory h
  CHECK(fb.big == 0);  // the backward allocates nothing of trajectory size
}
