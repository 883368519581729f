// The parameter spec list: one row per parameter (fla's name, shape, initialisation, and
// whether AdamW decays it). The model carves its arenas (parameters, gradients, both
// AdamW moments, the bf16 shadow) from this list: one allocation each.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace lt::model {

// fla's initialisations (docs/MATH.md, "Initial values").
enum class Init : uint8_t {
  zeros,
  ones,
  normal,          // N(0, scale)                      (fla: std 0.02)
  xavier_uniform,  // U(-a, a), a = scale * sqrt(6 / (fan_in + fan_out))   (scale = gain)
  orthogonal,      // scale * an orthogonal matrix (rows or columns orthonormal)
  kda_a_log,       // log U(1, 16)
  kda_dt_bias,     // softplus^-1(exp(U(ln 1e-3, ln 0.1)) clamped >= 1e-4)
};

struct ParamSpec {
  std::string name;  // fla's state_dict name (relative to the block inside blocks.h)
  Shape shape;       // fla's shape
  Init init = Init::normal;
  double scale = 0.02;  // std (normal), gain (xavier_uniform, orthogonal)
  bool decay = true;    // AdamW weight decay (false: norms, biases, A_log, dt_bias, bonus, mu, ...)
};

// A weight that a GEMM reads (a linear layer's [out, in] weight): 2-D and named "*.weight".
// In the bf16 mode the blocks get these as bf16 views of the shadow arena, every other
// parameter (norm weights, conv weights [C, 1, W], biases, A_log, dt_bias, x_bias, bonus,
// mu) as f32. The embedding is not a block parameter; the model decides for it.
bool is_gemm_weight(const ParamSpec& spec);

}  // namespace lt::model
