// Recurrent decoding (engine/model/decode.h) on CUDA: a chunked prefill and decode steps
// against the same on the CPU, for both families, the fp32 and bf16 modes (the bf16 mode
// decodes from the fp32 master weights); allocator poison on, so an element no kernel wrote
// shows up as a NaN. And the cost of a step: the same kernel launches, live bytes and no new
// device malloc at position 1 and at position 50.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/model/decode.h"
#include "engine/model/model.h"
#include "engine/ops.h"
#include "kernels/launch.h"
#include "tests/support/compare.h"

using lt::Device;
using lt::DType;
using lt::Tensor;
using namespace lt::model;

namespace {

ModelConfig cuda_decode_config(Arch arch, Precision p) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 512;
  c.hidden_size = 128;
  c.num_layers = 2;
  c.num_heads = 2;
  c.head_dim = 64;  // the fused kernels' head size: the prefill's mixers run fused on CUDA
  c.chunk = 64;
  c.precision = p;
  return c;
}

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  const std::vector<double> u = lt::ops::rand({B * T}, seed, 0, DType::f64).to_vector();
  std::vector<int64_t> ids(u.size());
  for (size_t i = 0; i < u.size(); ++i)
    ids[i] = std::min<int64_t>(V - 1, static_cast<int64_t>(u[i] * static_cast<double>(V)));
  return Tensor::from_vector(ids, {B, T}, DType::i32);
}

// fla's initialisation with the N(0, 0.02) weights scaled up and the constant
// initialisations (norm weights and biases, RWKV6's mu, x_bias, bonus, decay LoRA) moved off
// their constants, so that every path carries signal. A CPU f32 parameter arena.
Tensor perturbed_weights(const ModelConfig& c, uint64_t seed) {
  Model m(c, Device::cpu());
  m.init_weights(seed);
  uint64_t offset = 0;
  for (const ParamSpec& s : m.specs()) {
    Tensor p = m.param(s.name);
    if (s.init == Init::normal) p.copy_(lt::ops::mul_scalar(p, 4.0));
    if (s.init == Init::ones || s.init == Init::zeros)
      p.copy_(lt::ops::add(p, lt::ops::mul_scalar(lt::ops::randn(s.shape, seed + 1, offset), 0.3)));
    offset += static_cast<uint64_t>(p.numel());
  }
  return m.arenas().params.clone();
}

double rel(const Tensor& a, const Tensor& ref) { return lt::test::rel_err(a.to_vector(), ref.to_vector()); }

// Prefill of 70 tokens (a full chunk of 64 and a partial one), then 10 decode steps, on
// CUDA in precision p and on the CPU in fp32: the logits after the prefill and after each
// step, to 1e-4 of the largest logit.
void check_against_cpu(Arch arch, Precision p) {
  const ModelConfig c32 = cuda_decode_config(arch, Precision::fp32);
  const Tensor weights = perturbed_weights(c32, 77);
  Model cpu(c32, Device::cpu());
  cpu.arenas().params.copy_(weights);
  Model gpu(cuda_decode_config(arch, p), Device::cuda(0));
  gpu.arenas().params.copy_(weights);
  gpu.refresh_shadow();
  const int64_t B = 2, T0 = 70, steps = 10;
  const Tensor tokens = random_ids(B, T0 + steps, c32.vocab_size, 3);
  const Tensor tokens_gpu = tokens.to(Device::cuda(0));
  DecodeState st_cpu(cpu, B), st_gpu(gpu, B);
  double worst = rel(prefill(gpu, st_gpu, tokens_gpu.narrow(1, 0, T0)), prefill(cpu, st_cpu, tokens.narrow(1, 0, T0)));
  std::printf("decode CUDA %s %s: prefill %.2e", arch_name(arch), precision_name(p), worst);
  CHECK(worst < 1e-4);
  for (int64_t t = T0; t < T0 + steps; ++t) {
    const double e = rel(decode_step(gpu, st_gpu, tokens_gpu.select(1, t).contiguous()),
                         decode_step(cpu, st_cpu, tokens.select(1, t).contiguous()));
    worst = std::max(worst, e);
    CHECK(e < 1e-4);
  }
  std::printf("  worst step %.2e\n", worst);
  for (size_t l = 0; l < st_cpu.layers.size(); ++l) CHECK(rel(st_gpu.layers[l].S, st_cpu.layers[l].S) < 1e-4);
}

}  // namespace

TEST_CASE("decode CUDA: prefill and decode_step match the CPU (KDA, RWKV6; fp32 and bf16 modes)",
          "[model][decode][cuda]") {
  lt::alloc::CachingAllocator& gpu_alloc = lt::alloc::cuda_allocator(0);
  const bool poison = gpu_alloc.poison();
  gpu_alloc.set_poison(true);
  for (Arch arch : {Arch::kda, Arch::rwkv6})
    for (Precision p : {Precision::fp32, Precision::bf16}) check_against_cpu(arch, p);
  gpu_alloc.set_poison(poison);
}

TEST_CASE("decode CUDA: a step costs the same launches and memory at position 1 and at position 50",
          "[model][decode][cuda]") {
  lt::alloc::CachingAllocator& gpu_alloc = lt::alloc::cuda_allocator(0);
  for (Arch arch : {Arch::kda, Arch::rwkv6}) {
    INFO(arch_name(arch));
    const ModelConfig c = cuda_decode_config(arch, Precision::fp32);
    Model m(c, Device::cuda(0));
    m.arenas().params.copy_(perturbed_weights(c, 5));
    const int64_t B = 1, T = 51;
    const Tensor tokens = random_ids(B, T, c.vocab_size, 8).to(Device::cuda(0));
    DecodeState st(m, B);
    struct Cost {
      int64_t launches = 0, live_bytes = 0, device_allocs = 0;  // live_bytes: requested, unrounded
    };
    auto step_cost = [&](int64_t t) {
      lt::synchronize(Device::cuda(0));
      lt::reset_launch_atlas();
      Tensor logits = decode_step(m, st, tokens.select(1, t).contiguous());
      lt::synchronize(Device::cuda(0));
      const lt::alloc::Stats s = gpu_alloc.stats();
      return Cost{lt::total_launches(), s.requested_bytes.current, s.num_device_alloc};
    };
    step_cost(0);
    const Cost at1 = step_cost(1);
    CHECK(st.position() == 2);
    for (int64_t t = 2; t < 50; ++t) decode_step(m, st, tokens.select(1, t).contiguous());
    const Cost at50 = step_cost(50);
    CHECK(st.position() == 51);
    std::printf("decode CUDA %s: launches per step %lld (position 1) %lld (position 50)\n", arch_name(arch),
                static_cast<long long>(at1.launches), static_cast<long long>(at50.launches));
    CHECK(at1.launches > 0);
    CHECK(at1.launches == at50.launches);
    CHECK(at1.live_bytes == at50.live_bytes);
    CHECK(at1.device_allocs == at50.device_allocs);  // steps after the first are served from the cache
  }
  lt::reset_launch_atlas();
}
