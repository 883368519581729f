// The depth-2 models (KDA, RWKV6) on CUDA against the CPU: one training step (forward, loss,
// backward) on the same weights and batch. fp32: the CUDA step (fused mixer kernels, cuBLAS
// fp32 GEMMs) against the CPU step (the mixers' ops paths, f64-accumulating GEMMs); bf16 mode
// against the CUDA fp32 step. Allocator poison on, so an unwritten element shows up as a NaN.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "engine/model/model.h"
#include "engine/ops.h"
#include "tests/support/compare.h"
#include "tests/support/model_testing.h"

using lt::Device;
using lt::DType;
using lt::Tensor;
using namespace lt::model;

namespace {

ModelConfig cuda_config(Arch arch, Precision p) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 512;
  c.hidden_size = 128;
  c.num_layers = 2;
  c.num_heads = 2;
  c.head_dim = 64;  // the fused kernels' head size (RWKV6: expand_k = 1)
  c.chunk = 64;
  c.precision = p;
  return c;
}

// max |a - b| / max |ref| over the tensor (inf on a NaN).
// Largest-element and 2-norm errors (tests/support/compare.h).
double rel(const Tensor& a, const Tensor& ref) { return lt::test::rel_err(a.to_vector(), ref.to_vector()); }
double rel_l2(const Tensor& a, const Tensor& ref) { return lt::test::rel_err_l2(a.to_vector(), ref.to_vector()); }

struct StepResult {
  double loss = 0;
  std::vector<lt::io::NamedTensor> grads;  // on the CPU
  int64_t mallocs_after_first = 0;
};

// Loads `weights` (a CPU f32 parameter arena), runs `steps` steps on `device`.
StepResult step(const ModelConfig& c, Device device, const Tensor& weights, const Tensor& tokens, const Tensor& targets,
                double inv_count, int steps) {
  Model m(c, device);
  m.arenas().params.copy_(weights);
  m.refresh_shadow();
  Tensor loss = Tensor::zeros({}, DType::f32, device);
  const Tensor tok = tokens.to(device), tgt = targets.to(device);
  StepResult r;
  int64_t after_first = 0;
  for (int s = 0; s < steps; ++s) {
    m.zero_grad();
    loss.zero_();
    m.forward_backward(tok, tgt, inv_count, loss);
    if (s == 0 && device.is_cuda()) {
      lt::synchronize(device);
      after_first = lt::alloc::cuda_allocator(device.index).stats().num_device_alloc;
    }
  }
  lt::synchronize(device);
  if (device.is_cuda())
    r.mallocs_after_first = lt::alloc::cuda_allocator(device.index).stats().num_device_alloc - after_first;
  r.loss = loss.item();
  for (const lt::io::NamedTensor& g : m.named_grads()) r.grads.push_back({g.name, g.tensor.to(Device::cpu()).clone()});
  return r;
}

void check_cuda_steps(Arch arch) {
  lt::alloc::CachingAllocator& gpu_alloc = lt::alloc::cuda_allocator(0);
  const bool poison = gpu_alloc.poison();
  gpu_alloc.set_poison(true);
  const ModelConfig c32 = cuda_config(arch, Precision::fp32);
  Tensor weights;
  {
    Model init(c32, Device::cpu());
    init.init_weights(2024);
    weights = init.arenas().params.clone();
  }
  const int64_t B = 2, T = 100;  // two chunks, the second partial
  const Tensor tokens = lt::test::random_ids(B, T, c32.vocab_size, 1, 0);
  const Tensor targets = lt::test::random_ids(B, T, c32.vocab_size, 2, 5);
  const double inv_count = 1.0 / static_cast<double>(B * T - 5);

  const StepResult cpu = step(c32, Device::cpu(), weights, tokens, targets, inv_count, 1);
  const StepResult gpu = step(c32, Device::cuda(0), weights, tokens, targets, inv_count, 3);
  const StepResult bf16 =
      step(cuda_config(arch, Precision::bf16), Device::cuda(0), weights, tokens, targets, inv_count, 2);
  gpu_alloc.set_poison(poison);

  // fp32: loss to 1e-5 relative, every gradient tensor to 1e-4 of its largest element.
  // bf16 (activations, the residual stream included, and GEMM operands rounded to bf16,
  // fp32 accumulation), against the CUDA fp32 step: loss to 1e-2 relative; each gradient
  // tensor within 6e-2 in relative L2 norm, and no element further than 0.25 of the tensor's
  // largest element from fp32 (a localised error such as a wrong row shows up there). The
  // bound is measured, not derived: on the H200 (2026-12-01, this test's shapes) the worst
  // tensors are layer 0's (their gradients cross both blocks' bf16 backward): L2 4.1e-2
  // (KDA) and 4.2e-2 (RWKV6), largest element 4.8e-2 and 7.9e-2
  // (docs/history/benchmarks-2026-12.md, "One training step of the depth-2 model").
  std::printf("model CUDA step (%s): loss cpu %.8f  cuda fp32 %.8f  cuda bf16 %.8f\n", arch_name(arch), cpu.loss,
              gpu.loss, bf16.loss);
  CHECK(std::fabs(gpu.loss - cpu.loss) < 1e-5 * std::fabs(cpu.loss));
  CHECK(std::fabs(bf16.loss - gpu.loss) < 1e-2 * std::fabs(gpu.loss));
  REQUIRE(gpu.grads.size() == cpu.grads.size());
  REQUIRE(bf16.grads.size() == cpu.grads.size());
  double worst32 = 0, worst16 = 0, worst16_l2 = 0;
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    INFO(cpu.grads[i].name);
    const double e32 = rel(gpu.grads[i].tensor, cpu.grads[i].tensor);
    const double e16 = rel(bf16.grads[i].tensor, gpu.grads[i].tensor);
    const double l16 = rel_l2(bf16.grads[i].tensor, gpu.grads[i].tensor);
    worst32 = std::max(worst32, e32);
    worst16 = std::max(worst16, e16);
    worst16_l2 = std::max(worst16_l2, l16);
    std::printf("  %-48s fp32 %.2e  bf16 %.2e (L2 %.2e)\n", cpu.grads[i].name.c_str(), e32, e16, l16);
    CHECK(e32 < 1e-4);
    CHECK(l16 < 6e-2);
    CHECK(e16 < 0.25);
  }
  std::printf("  worst: fp32 %.2e  bf16 %.2e (L2 %.2e)\n", worst32, worst16, worst16_l2);
  // Steps after the first are served by the caching allocator.
  CHECK(gpu.mallocs_after_first == 0);
  CHECK(bf16.mallocs_after_first == 0);
}

}  // namespace

TEST_CASE("model CUDA: KDA fp32 and bf16 training steps against the CPU step", "[model][cuda]") {
  check_cuda_steps(Arch::kda);
}

TEST_CASE("model CUDA: RWKV6 fp32 and bf16 training steps against the CPU step", "[model][cuda]") {
  check_cuda_steps(Arch::rwkv6);
}
