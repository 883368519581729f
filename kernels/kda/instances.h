// The KDA fused path's compiled configurations (kernels/kda/instances.def) as a table and a
// runtime dispatch. The CUDA entry points (kernels/cuda/kda.cu) and the CPU twins
// (kernels/cpu/kda/twin.cpp) call f.template operator()<D, C, T, kTC>() for the one line that
// matches the arguments; each such call is instantiated in its own generated translation unit.
#pragma once
#include <cstddef>
#include <type_traits>

#include "kernels/dtype.h"
#include "kernels/half.h"

#ifndef LINTRAIN_KDA_SIMT
#define LINTRAIN_KDA_SIMT 0
#endif

namespace lt::kda {

// One line of instances.def. tensor_cores: variant tc (else simt); compiled: built into this
// binary (simt lines only with -DLINTRAIN_KDA_SIMT=ON).
struct Instance {
  int D;
  int C;
  DType dtype;
  bool tensor_cores;
  bool compiled;
};

namespace instances_detail {
template <class T>
inline constexpr DType dtype_of = std::is_same_v<T, float> ? DType::f32 : DType::bf16;
}  // namespace instances_detail

#define LT_KDA_TYPE_f32 float
#define LT_KDA_TYPE_bf16 bfloat16
#define LT_KDA_TC_tc true
#define LT_KDA_TC_simt false
#define LT_KDA_COMPILED_tc true
#define LT_KDA_COMPILED_simt (LINTRAIN_KDA_SIMT != 0)

// Every line of instances.def, in its order.
inline constexpr Instance kInstances[] = {
#define LT_KDA_INSTANCE(D, C, dt, var) \
  Instance{D, C, instances_detail::dtype_of<LT_KDA_TYPE_##dt>, LT_KDA_TC_##var, LT_KDA_COMPILED_##var},
#include "kernels/kda/instances.def"
#undef LT_KDA_INSTANCE
};
inline constexpr size_t kNumInstances = sizeof(kInstances) / sizeof(kInstances[0]);

// True when (D, C, dtype, tensor_cores) is a compiled line.
constexpr bool instance_compiled(int D, int C, DType dtype, bool tensor_cores) {
  for (const Instance& i : kInstances)
    if (i.D == D && i.C == C && i.dtype == dtype && i.tensor_cores == tensor_cores) return i.compiled;
  return false;
}

// Calls f.template operator()<D, C, T, kTC>() for the compiled line matching the runtime
// arguments; returns false (calling nothing) when none does. Lines not compiled are never
// instantiated (the discarded branch of a template), so they leave no undefined symbol.
template <class F>
bool dispatch_instance(int D, int C, DType dtype, bool tensor_cores, F&& f) {
  bool found = false;
  auto visit = [&]<int D_, int C_, class T, bool kTC, bool kCompiled>() {
    if constexpr (kCompiled) {
      if (!found && D == D_ && C == C_ && dtype == instances_detail::dtype_of<T> && tensor_cores == kTC) {
        found = true;
        f.template operator()<D_, C_, T, kTC>();
      }
    }
  };
#define LT_KDA_INSTANCE(D, C, dt, var) \
  visit.template operator()<D, C, LT_KDA_TYPE_##dt, LT_KDA_TC_##var, LT_KDA_COMPILED_##var>();
#include "kernels/kda/instances.def"
#undef LT_KDA_INSTANCE
  return found;
}

}  // namespace lt::kda
