// The bf16 and tf32 modes on the CPU against the fp32 mode: same weights, same batch.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/model/model.h"
#include "engine/ops.h"
#include "tests/support/model_testing.h"

using lt::Device;
using lt::DType;
using lt::Tensor;
using namespace lt::model;
using lt::test::random_ids;

TEST_CASE("model: the bf16 mode's step stays within bf16 rounding of the fp32 step", "[model]") {
  // bf16 rounds activations and GEMM operands to 8 significant bits (relative 2^-9), and the
  // roundings accumulate through two blocks and the backward: at fla's initialisation the
  // worst gradient tensor of this model is 2.1e-2 of its largest element away from fp32
  // (A_log); the loss, near ln V with the small logits of a fresh model, 1e-7 relative.
  // Gates: loss 1e-2 relative, every gradient 5e-2 of its largest element.
  ModelConfig c = lt::test::small_model_config(Arch::kda);
  const int64_t B = 2, T = 20;
  const Tensor tokens = random_ids(B, T, c.vocab_size, 21);
  const Tensor targets = random_ids(B, T, c.vocab_size, 22, 2);
  Model m32(c, Device::cpu());
  m32.init_weights(5);
  c.precision = Precision::bf16;
  Model m16(c, Device::cpu());
  CHECK(m16.activation_dtype() == DType::bf16);
  m16.arenas().params.copy_(m32.arenas().params);
  m16.refresh_shadow();
  CHECK(m16.arenas().params_bf16.dtype() == DType::bf16);
  Tensor l32 = Tensor::zeros({}), l16 = Tensor::zeros({});
  m32.zero_grad();
  m16.zero_grad();
  m32.forward_backward(tokens, targets, 1.0 / (B * T - 2), l32);
  m16.forward_backward(tokens, targets, 1.0 / (B * T - 2), l16);
  CHECK(std::fabs(l16.item() - l32.item()) < 1e-2 * std::fabs(l32.item()));
  for (const ParamSpec& s : m32.specs()) {
    INFO(s.name);
    const std::vector<double> a = m16.grad(s.name).to_vector(), b = m32.grad(s.name).to_vector();
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::fabs(a[i] - b[i]));
      scale = std::max(scale, std::fabs(b[i]));
    }
    CHECK(scale > 0);
    CHECK(diff <= 5e-2 * scale);
  }
}

TEST_CASE("model: the tf32 mode rounds GEMM operands to TF32 and restores the switch", "[model]") {
  // TF32 keeps 10 mantissa bits (relative 2^-11 per operand); the CPU emulates it.
  ModelConfig c = lt::test::small_model_config(Arch::kda);
  const int64_t B = 2, T = 20;
  const Tensor tokens = random_ids(B, T, c.vocab_size, 23);
  const Tensor targets = random_ids(B, T, c.vocab_size, 24, 1);
  Model m32(c, Device::cpu());
  m32.init_weights(6);
  c.precision = Precision::tf32;
  Model mtf(c, Device::cpu());
  mtf.arenas().params.copy_(m32.arenas().params);
  Tensor l32 = Tensor::zeros({}), ltf = Tensor::zeros({});
  m32.zero_grad();
  mtf.zero_grad();
  lt::ops::set_matmul_tf32(true);  // the fp32 mode turns it off for its own step
  m32.forward_backward(tokens, targets, 1.0 / (B * T - 1), l32);
  CHECK(lt::ops::matmul_tf32());
  lt::ops::set_matmul_tf32(false);
  mtf.forward_backward(tokens, targets, 1.0 / (B * T - 1), ltf);
  CHECK_FALSE(lt::ops::matmul_tf32());
  const std::vector<double> g32 = m32.arenas().grads.to_vector(), gtf = mtf.arenas().grads.to_vector();
  CHECK(g32 != gtf);  // TF32 products differ from fp32 ones
  double diff = 0, scale = 0;
  for (size_t i = 0; i < g32.size(); ++i) {
    diff = std::max(diff, std::fabs(g32[i] - gtf[i]));
    scale = std::max(scale, std::fabs(g32[i]));
  }
  CHECK(diff <= 1e-2 * scale);
  CHECK(std::fabs(ltf.item() - l32.item()) < 1e-3 * std::fabs(l32.item()));
  // The fp32 step under the TF32 switch equals the fp32 step without it (the mode decides).
  Model again(lt::test::small_model_config(Arch::kda), Device::cpu());
  again.arenas().params.copy_(m32.arenas().params);
  again.zero_grad();
  Tensor la = Tensor::zeros({});
  again.forward_backward(tokens, targets, 1.0 / (B * T - 1), la);
  CHECK(again.arenas().grads.to_vector() == g32);
}
