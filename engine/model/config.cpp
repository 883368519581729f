// ModelConfig: names of the enums and fla's size / epsilon rules (engine/model/config.h).
#include "engine/model/config.h"

#include <stdexcept>

#include "engine/model/arch.h"

namespace lt::model {

Arch parse_arch(const std::string& name) {
  std::string names;
  for (const ArchSpec* s : arch_specs()) {
    if (name == s->name) return s->arch;
    names += (names.empty() ? "" : " | ") + std::string(s->name);
  }
  throw std::invalid_argument("unknown architecture \"" + name + "\" (expected " + names + ")");
}

const char* arch_name(Arch a) { return arch_spec(a).name; }

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

// intermediate_size, or the architecture's rule from hidden_size (ArchSpec::intermediate_rule).
int64_t ModelConfig::intermediate() const {
  return intermediate_size > 0 ? intermediate_size : arch_spec(arch).intermediate_rule(hidden_size);
}

double ModelConfig::eps() const { return norm_eps > 0.0 ? norm_eps : arch_spec(arch).default_norm_eps; }

}  // namespace lt::model
