// fla's parameter initialisations (engine/model/params.h, Init), deterministic by
// (seed, parameter index): parameter i draws from the Philox stream of `seed` at offset
// i * 2^36 (engine/ops.h random), so a parameter's values do not depend on the other
// parameters, and CPU and CUDA give the same values.
//   normal          N(0, scale)                         drawn on the parameter's device
//   xavier_uniform  U(-a, a), a = scale sqrt(6 / (fan_in + fan_out)), fan_in = shape[1] *
//                   (receptive field), fan_out = shape[0] * (receptive field) (torch's rule)
//   orthogonal      scale * Q: the [rows, prod(rest)] matrix drawn N(0, 1), its QR by
//                   modified Gram-Schmidt in f64 on the host (over the columns of the taller
//                   orientation, as torch.nn.init.orthogonal_), signs of diag(R) folded in
//   kda_a_log       log U(1, 16)                        (host f64, then copied)
//   kda_dt_bias     softplus^-1(clamp(exp(U(ln 1e-3, ln 0.1)), 1e-4))   (host f64)
//   zeros, ones     constants
#pragma once
#include <cstdint>

#include "engine/model/params.h"
#include "engine/tensor.h"

namespace lt::model {

// Offset between two parameters' Philox streams (elements).
inline constexpr uint64_t kInitStreamStride = uint64_t{1} << 36;

// Writes fla's initial values for `spec` into p (p.shape() == spec.shape; any float dtype,
// any device; p may be a view into an arena).
void init_param(Tensor& p, const ParamSpec& spec, uint64_t seed, uint64_t index);

}  // namespace lt::model
