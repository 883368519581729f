// ModelConfig: names of the enums and fla's size / epsilon rules (engine/model/config.h).
#include "engine/model/config.h"

#include <stdexcept>

namespace lt::model {

Arch parse_arch(const std::string& name) {
  if (name == "kda") return Arch::kda;
  if (name == "rwkv6") return Arch::rwkv6;
  throw std::invalid_argument("unknown architecture \"" + name + "\" (expected kda | rwkv6)");
}

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kda: return "kda";
    case Arch::rwkv6: return "rwkv6";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "tf32") return Precision::tf32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp64") return Precision::fp64;
  throw std::invalid_argument("unknown precision \"" + name + "\" (expected fp32 | tf32 | bf16 | fp64)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::fp64: return "fp64";
  }
  return "?";
}

// fla's GatedMLP (KDA, hidden_ratio 4): int(d * 4 * 2 / 3) rounded up to a multiple of 256.
// fla's RWKV6 FeedForward (hidden_ratio 3.5): int(3.5 d) rounded up to a multiple of 32.
// Python's int() truncates the float product; for the integer d here the products are
// exact in integer arithmetic: d * 8 / 3 and d * 7 / 2.
int64_t ModelConfig::intermediate() const {
  if (intermediate_size > 0) return intermediate_size;
  if (arch == Arch::kda) {
    const int64_t raw = hidden_size * 8 / 3;
    return 256 * ((raw + 255) / 256);
  }
  const int64_t raw = hidden_size * 7 / 2;
  return 32 * ((raw + 31) / 32);
}

double ModelConfig::eps() const {
  if (norm_eps > 0.0) return norm_eps;
  return arch == Arch::kda ? 1e-6 : 1e-5;
}

}  // namespace lt::model
