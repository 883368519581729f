// The model's configuration: the architecture and its sizes, in fla's terms (KDAConfig /
// RWKV6Config), plus how lintrain runs it (precision, mixer path, chunk).
#pragma once
#include <cstdint>
#include <string>

namespace lt::model {

enum class Arch : uint8_t { kda, rwkv6 };
Arch parse_arch(const std::string& name);  // "kda" | "rwkv6"; throws naming it
const char* arch_name(Arch a);

// fp32: the reference (pure fp32 GEMMs); tf32: fp32 storage, TF32 GEMMs; bf16: bf16
// activations and GEMM operands, fp32 accumulation, fp32 master weights, gradients and
// optimizer state, loss in fp32; fp64: every tensor in float64 on the CPU, the reference that
// training trajectories are checked against (scripts/fla_trajectory.py).
enum class Precision : uint8_t { fp32, tf32, bf16, fp64 };
Precision parse_precision(const std::string& name);  // "fp32" | "tf32" | "bf16" | "fp64"
const char* precision_name(Precision p);

struct ModelConfig {
  Arch arch = Arch::kda;
  int64_t vocab_size = 32000;
  int64_t hidden_size = 768;
  int64_t num_layers = 2;
  int64_t num_heads = 12;
  int64_t head_dim = 64;          // KDA: head_dim; RWKV6: hidden_size * expand_k / num_heads
  int64_t intermediate_size = 0;  // 0: fla's rule (KDA: 256 * ceil(floor(d * 4 * 2/3) / 256);
                                  //    RWKV6: 32 * ceil(floor(3.5 d) / 32))
  double norm_eps = 0.0;          // 0: fla's default (KDA 1e-6, RWKV6 1e-5)
  bool tie_embeddings = false;
  int64_t rwkv6_proj_low_rank_dim = 32;  // fla RWKV6Config.proj_low_rank_dim (lerp LoRA)
  int64_t rwkv6_gate_low_rank_dim = 64;  // fla RWKV6Config.gate_low_rank_dim (decay LoRA)
  // How lintrain runs it.
  Precision precision = Precision::fp32;
  std::string mixer_path = "auto";  // auto: fused on CUDA, ops on the CPU; or naive | ops | fused
  int chunk = 0;                    // mixer chunk length: 16, 32 or 64; 0: auto (blocks.h)

  int64_t intermediate() const;  // intermediate_size, or fla's rule when 0
  double eps() const;            // norm_eps, or fla's default when 0
};

}  // namespace lt::model
