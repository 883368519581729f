// The process-wide TF32 switch of the GEMMs (engine/ops.h: set_matmul_tf32) set for a model's
// precision while one of its entry points runs (on in the tf32 mode, off otherwise) and
// restored on exit, so a caller's own setting survives a forward, backward or decode step.
// Used by the model's entry points (model.cpp) and by decoding (decode.cpp).
#pragma once

#include "engine/model/config.h"
#include "engine/ops.h"

namespace lt::model {

class MatmulPrecisionScope {
 public:
  explicit MatmulPrecisionScope(Precision p) : previous_(ops::matmul_tf32()) {
    ops::set_matmul_tf32(p == Precision::tf32);
  }
  ~MatmulPrecisionScope() { ops::set_matmul_tf32(previous_); }
  MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
  MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

 private:
  bool previous_;  // the switch as the caller left it
};

}  // namespace lt::model
