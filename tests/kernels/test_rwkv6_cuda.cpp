// RWKV6 CUDA kernels (kernels/cuda/rwkv6/) against the float64 naive recurrence on fresh
// random inputs (fla-style: r, k, v, u ~ randn, w = logsigmoid(randn), -exp(randn) or the
// strong -exp(randn + 1.5)), every output and gradient NaN-poisoned before each run. Shapes
// cover D = 64, 128, 256, a partial last chunk, chunks 16/32/64, an initial state, a
// final-state gradient, fp32 (SIMT kernels) and bf16 (tensor-core kernels at chunk 32/64,
// SIMT at chunk 16; strong decays drive most diagonal-block columns through the exact
// elementwise path). Fused and fallback backward, and the backward that reuses the forward's
// states.
// Gate: relative norm error ||x - ref|| / ||ref|| <= 1e-5 (fp32) / 1e-2 (bf16), per output.
// Also: launch counts (fwd 2, fused bwd 3, fallback 4) from the launch atlas.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "allocator/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/launch.h"
#include "tests/kernels/rwkv6_test_util.h"

using namespace lt::rwkv6;
using namespace lt::rwkv6::test;

namespace {

lt::alloc::Buffer dev_alloc(size_t bytes) {
  auto& A = lt::alloc::cuda_allocator(0);
  return lt::alloc::Buffer(&A, A.allocate(bytes), bytes);
}

// Device copy of a double vector in `dtype` (f32 or bf16 bits).
lt::alloc::Buffer upload(const std::vector<double>& x, lt::DType dtype) {
  const size_t es = dtype == lt::DType::bf16 ? 2 : 4;
  lt::alloc::Buffer b = dev_alloc(x.size() * es);
  if (dtype == lt::DType::bf16) {
    std::vector<lt::bfloat16> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = lt::bfloat16(static_cast<float>(x[i]));
    LT_CUDA_CHECK(cudaMemcpy(b.data(), h.data(), x.size() * es, cudaMemcpyHostToDevice));
  } else {
    std::vector<float> h(x.begin(), x.end());
    LT_CUDA_CHECK(cudaMemcpy(b.data(), h.data(), x.size() * es, cudaMemcpyHostToDevice));
  }
  return b;
}
std::vector<double> download(const lt::alloc::Buffer& b, size_t n, lt::DType dtype) {
  std::vector<double> out(n);
  if (dtype == lt::DType::bf16) {
    std::vector<lt::bfloat16> h(n);
    LT_CUDA_CHECK(cudaMemcpy(h.data(), b.data(), n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(h[i]);
  } else {
    std::vector<float> h(n);
    LT_CUDA_CHECK(cudaMemcpy(h.data(), b.data(), n * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) out[i] = h[i];
  }
  return out;
}
lt::alloc::Buffer poisoned(size_t bytes) {
  lt::alloc::Buffer b = dev_alloc(bytes);
  LT_CUDA_CHECK(cudaMemset(b.data(), 0xFF, bytes));  // NaN in f32 and bf16
  return b;
}

struct Case {
  Dims d;
  lt::DType dtype;
  GateKind gate;
  bool h0, dht;
};

double worst_seen[2][8] = {};  // [dtype f32/bf16][o, ht, dr, dk, dv, dw, du, dh0]

void run_case(const Case& c, uint64_t seed) {
  const Dims& d = c.d;
  const bool bf = c.dtype == lt::DType::bf16;
  const double tol = bf ? 1e-2 : 1e-5;
  Problem p(d, seed, c.gate, c.h0, c.dht);
  if (bf) p.round_to_bf16();
  Grads ref = naive_reference(p);

  const size_t ntok = d.token_numel(), es = bf ? 2 : 4;
  auto r = upload(p.r, c.dtype), k = upload(p.k, c.dtype), v = upload(p.v, c.dtype), w = upload(p.w, c.dtype);
  auto dO = upload(p.dO, c.dtype);
  auto u = upload(p.u, lt::DType::f32);
  lt::alloc::Buffer h0, dht;
  if (c.h0) h0 = upload(p.h0, lt::DType::f32);
  if (c.dht) dht = upload(p.dht, lt::DType::f32);

  FusedArgs a;
  a.dims = d;
  a.dtype = c.dtype;
  a.scale = static_cast<float>(p.scale);
  a.r = r.data(), a.k = k.data(), a.v = v.data(), a.w = w.data(), a.u = u.as<float>();
  a.h0 = c.h0 ? h0.as<float>() : nullptr;
  a.dO = dO.data();
  a.dht = c.dht ? dht.as<float>() : nullptr;
  auto hbuf = poisoned(d.trajectory_numel() * 4);
  a.h = hbuf.as<float>();

  auto o = poisoned(ntok * es), ht = poisoned(d.state_numel() * 4);
  a.o = o.data(), a.ht = ht.as<float>();
  lt::reset_launch_atlas();
  cuda_forward(a, nullptr);
  LT_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(lt::total_launches() == 2);
  const double eo = rel_err_l2(download(o, ntok, c.dtype), ref.o);
  const double eht = rel_err_l2(download(ht, d.state_numel(), lt::DType::f32), ref.ht);
  std::printf("rwkv6 cuda %s %s B%lld T%lld H%lld D%lld C%lld %s h0 %d dht %d | fwd o %.2e ht %.2e\n",
              bf ? "bf16" : "fp32", cuda_uses_tensor_cores(d, c.dtype) ? "tc  " : "simt", (long long)d.B,
              (long long)d.T, (long long)d.H, (long long)d.D, (long long)d.C, gate_name(c.gate), c.h0, c.dht, eo, eht);
  CHECK(eo < tol);
  CHECK(eht < tol);
  worst_seen[bf][0] = std::max(worst_seen[bf][0], eo);
  worst_seen[bf][1] = std::max(worst_seen[bf][1], eht);

  for (int variant = 0; variant < 3; ++variant) {
    const BwdImpl impl = variant == 1 ? BwdImpl::fallback : BwdImpl::fused;
    const bool h_valid = variant == 2;  // reuse the forward's h (still in hbuf)
    auto dr = poisoned(ntok * es), dk = poisoned(ntok * es), dv = poisoned(ntok * es), dw = poisoned(ntok * es);
    auto du = poisoned(d.H * d.D * 4), dh0 = poisoned(d.state_numel() * 4);
    auto dh = poisoned(d.trajectory_numel() * 4), dup = poisoned(du_part_numel(d) * 4);
    lt::alloc::Buffer dqt, dkt;
    if (impl == BwdImpl::fallback) dqt = poisoned(ntok * 4), dkt = poisoned(ntok * 4);
    FusedArgs b = a;
    if (!h_valid) LT_CUDA_CHECK(cudaMemset(hbuf.data(), 0xFF, d.trajectory_numel() * 4));
    b.dr = dr.data(), b.dk = dk.data(), b.dv = dv.data(), b.dw = dw.data();
    b.du = du.as<float>(), b.dh0 = dh0.as<float>(), b.dh = dh.as<float>(), b.du_part = dup.as<float>();
    b.dq_tmp = impl == BwdImpl::fallback ? dqt.as<float>() : nullptr;
    b.dk_tmp = impl == BwdImpl::fallback ? dkt.as<float>() : nullptr;
    lt::reset_launch_atlas();
    cuda_backward(b, impl, h_valid, nullptr);
    LT_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(lt::total_launches() == (impl == BwdImpl::fused ? 3 : 4));
    const double e[6] = {rel_err_l2(download(dr, ntok, c.dtype), ref.dr),
                         rel_err_l2(download(dk, ntok, c.dtype), ref.dk),
                         rel_err_l2(download(dv, ntok, c.dtype), ref.dv),
                         rel_err_l2(download(dw, ntok, c.dtype), ref.dw),
                         rel_err_l2(download(du, d.H * d.D, lt::DType::f32), ref.du),
                         rel_err_l2(download(dh0, d.state_numel(), lt::DType::f32), ref.dh0)};
    std::printf("    %-14s dr %.2e dk %.2e dv %.2e dw %.2e du %.2e dh0 %.2e\n",
                variant == 0   ? "fused"
                : variant == 1 ? "fallback"
                               : "fused(h kept)",
                e[0], e[1], e[2], e[3], e[4], e[5]);
    for (int i = 0; i < 6; ++i) {
      CHECK(e[i] < tol);
      worst_seen[bf][2 + i] = std::max(worst_seen[bf][2 + i], e[i]);
    }
  }
}

}  // namespace

TEST_CASE("rwkv6 CUDA fused and fallback match the f64 naive recurrence", "[rwkv6][cuda]") {
  const Case cases[] = {
      {{2, 100, 2, 64, 64}, lt::DType::f32, GateKind::kLogSigmoid, true, true},  // partial last chunk
      {{2, 64, 3, 64, 16}, lt::DType::f32, GateKind::kNegExp, false, false},     // exact chunks, no states
      {{1, 130, 2, 128, 32}, lt::DType::f32, GateKind::kNegExp, false, true},
      {{1, 80, 1, 256, 16}, lt::DType::f32, GateKind::kLogSigmoid, true, true},
      {{1, 90, 1, 256, 64}, lt::DType::f32, GateKind::kNegExp, true, false},
      {{2, 100, 2, 64, 64}, lt::DType::bf16, GateKind::kLogSigmoid, true, true},
      {{1, 70, 2, 128, 64}, lt::DType::bf16, GateKind::kLogSigmoid, true, true},
      {{1, 50, 1, 256, 32}, lt::DType::bf16, GateKind::kNegExp, false, true},
      {{1, 33, 2, 64, 16}, lt::DType::bf16, GateKind::kNegExp, true, true},  // SIMT (chunk 16)
      // tensor-core kernels: strong decays (most diagonal-block columns unsafe), exact chunks,
      // chunk 32 at D128, no initial state
      {{1, 90, 2, 64, 64}, lt::DType::bf16, GateKind::kStrong, true, true},
      {{1, 130, 1, 128, 32}, lt::DType::bf16, GateKind::kStrong, true, false},
      {{2, 128, 1, 256, 64}, lt::DType::bf16, GateKind::kNegExp, false, true},
      {{2, 75, 2, 64, 32}, lt::DType::bf16, GateKind::kLogSigmoid, false, false},
  };
  uint64_t seed = 2024;
  for (const auto& c : cases) run_case(c, seed++);
  const char* names[8] = {"o", "ht", "dr", "dk", "dv", "dw", "du", "dh0"};
  for (int bf = 0; bf < 2; ++bf) {
    std::printf("rwkv6 cuda worst rel err %s:", bf ? "bf16" : "fp32");
    for (int i = 0; i < 8; ++i) std::printf(" %s %.2e", names[i], worst_seen[bf][i]);
    std::printf("\n");
  }
}
