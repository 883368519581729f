// engine/model/params.h helpers.
#include "engine/model/params.h"

namespace lt::model {

bool is_gemm_weight(const ParamSpec& spec) {
  const std::string suffix = ".weight";
  return spec.shape.size() == 2 && spec.name.size() >= suffix.size() &&
         spec.name.compare(spec.name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace lt::model
