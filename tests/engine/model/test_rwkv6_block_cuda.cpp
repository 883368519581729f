// The RWKV6 block (engine/model/rwkv6_block.cpp) on CUDA against the same block on the CPU
// in float64 (ops-path mixer): y, dx and every parameter gradient, with every parameter
// random and non-zero, for layer 0 (pre_norm) and layer 1. On CUDA the mixer runs the
// fused kernels ("auto", head_dim 64): fp32 activations (SIMT kernels, fp32 GEMMs; expected
// relative norm errors ~1e-6, gate 1e-4) and the bf16 mode (bf16 activations and matmul
// weights, f32 for every other parameter and for all gradients; tensor-core mixer kernels
// at chunk 32; expected ~1e-2 from bf16 rounding through the block, gate 5e-2).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/model/blocks.h"
#include "engine/model/params.h"
#include "engine/ops.h"
#include "tests/support/compare.h"
#include "tests/support/model_testing.h"

using lt::Device;
using lt::DType;
using lt::Tensor;
using namespace lt::model;

namespace {

double rel_err(const Tensor& x, const Tensor& ref) { return lt::test::rel_err_l2(x.to_vector(), ref.to_vector()); }

ModelConfig cuda_block_config() {
  ModelConfig c;
  c.arch = Arch::rwkv6;
  c.hidden_size = 128;
  c.num_heads = 2;
  c.head_dim = 64;
  c.intermediate_size = 96;
  c.rwkv6_proj_low_rank_dim = 8;
  c.rwkv6_gate_low_rank_dim = 16;
  c.chunk = 32;
  return c;
}

struct Run {
  Tensor y, dx;
  ParamMap g;
};

// One forward + backward of the block with parameters `host` (f64 CPU values) placed on
// `dev`: matmul weights in `wdt`, every other parameter in `pdt`; gradients in `gdt`.
Run run_block(const ModelConfig& cfg, int layer, const ParamMap& host, const Tensor& x64, const Tensor& dy64,
              Device dev, DType act, DType wdt, DType pdt, DType gdt) {
  ParamMap w, g;
  for (const ParamSpec& s : rwkv6_block_specs(cfg, layer)) {
    w[s.name] = host.at(s.name).to(is_gemm_weight(s) ? wdt : pdt).to(dev).contiguous();
    g[s.name] = Tensor::zeros(s.shape, gdt, dev);
  }
  const Tensor x = x64.to(act).to(dev), dy = dy64.to(act).to(dev);
  const BlockContext ctx{cfg, layer, true};
  std::unique_ptr<BlockSaved> saved;
  Run r;
  r.y = rwkv6_block_forward(ctx, w, x, saved);
  r.dx = rwkv6_block_backward(ctx, w, g, std::move(saved), dy);
  lt::synchronize(dev);
  r.y = r.y.to(Device::cpu());
  r.dx = r.dx.to(Device::cpu());
  for (auto& [name, t] : g) r.g[name] = t.to(Device::cpu());
  return r;
}

}  // namespace

TEST_CASE("rwkv6 block on CUDA (fused mixer, fp32 and bf16) matches the CPU block in float64", "[model][rwkv6][cuda]") {
  ModelConfig cfg = cuda_block_config();
  const int64_t B = 2, T = 50, d = cfg.hidden_size;
  for (int layer = 0; layer < 2; ++layer) {
    // Random non-zero parameters (matmul weights ~ 0.7 fan_in^-1/2, norm weights ~ 1).
    const ParamMap host = lt::test::random_block_params(rwkv6_block_specs(cfg, layer), 4000 + layer);
    const Tensor x = lt::ops::randn({B, T, d}, 5000 + layer, 0, DType::f64);
    const Tensor dy = lt::ops::randn({B, T, d}, 6000 + layer, 0, DType::f64);
    ModelConfig cpu_cfg = cfg;
    cpu_cfg.mixer_path = "ops";
    const Run ref =
        run_block(cpu_cfg, layer, host, x, dy, Device::cpu(), DType::f64, DType::f64, DType::f64, DType::f64);
    struct Mode {
      const char* name;
      DType act, wdt;
      double gate;
    };
    for (const Mode& m : {Mode{"fp32", DType::f32, DType::f32, 1e-4}, Mode{"bf16", DType::bf16, DType::bf16, 5e-2}}) {
      const Run r = run_block(cfg, layer, host, x, dy, Device::cuda(0), m.act, m.wdt, DType::f32, DType::f32);
      double worst = std::max(rel_err(r.y, ref.y), rel_err(r.dx, ref.dx));
      std::printf("rwkv6 block cuda %s layer %d: y %.2e dx %.2e\n", m.name, layer, rel_err(r.y, ref.y),
                  rel_err(r.dx, ref.dx));
      CHECK(rel_err(r.y, ref.y) < m.gate);
      CHECK(rel_err(r.dx, ref.dx) < m.gate);
      for (const auto& [name, gr] : ref.g) {
        const double e = rel_err(r.g.at(name), gr);
        INFO(m.name << " layer " << layer << " " << name);
        CHECK(e < m.gate);
        worst = std::max(worst, e);
      }
      std::printf("rwkv6 block cuda %s layer %d: worst over y, dx and all gradients %.2e\n", m.name, layer, worst);
    }
  }
}
