// The two block families of the depth-2 models, as forward / backward pairs (llm.c shape):
// the model (engine/model/model.h) owns the parameters and calls a block's forward per
// layer, then the backwards in exact reverse.
//
//   x [B, T, d] in the activation dtype (f32; bf16 in the bf16 mode; f64 on the CPU for
//   the gradient checks) -> y [B, T, d]; the block's residuals are inside it.
//
// Parameters are named relative to "model.layers.{layer}." exactly as fla names them
// (attn.q_proj.weight, ...; docs/MATH.md, "Layers and parameter names").
// `w` holds the tensors to compute with: in the fp32 / tf32 modes the f32 parameters; in
// the bf16 mode the 2-D matmul weights are bf16 views of the shadow arena and every other
// parameter (norm weights and biases, conv, A_log, dt_bias, mu, x_bias, bonus, LoRA
// biases) is f32. `g` holds the f32 (f64) gradient views; a backward accumulates (+=)
// into them and returns dx (=).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/mixers/kda.h"
#include "engine/mixers/rwkv6.h"
#include "engine/mixers/segments.h"
#include "engine/model/config.h"
#include "engine/model/params.h"
#include "engine/tensor.h"

namespace lt::model {

using ParamMap = std::map<std::string, Tensor>;

// What a block keeps between its forward and its backward (one subclass per family).
struct BlockSaved {
  virtual ~BlockSaved() = default;
};

struct BlockContext {
  const ModelConfig& cfg;
  int layer = 0;
  bool training = true;  // false: keep nothing for a backward
  // Packed documents of the batch (engine/mixers/segments.h), or null: one document a row.
  // Must outlive the block's saved state.
  const mixers::Segments* segments = nullptr;
};

// The mixer configuration of the model's blocks (and of the decoder's chunked prefill) on
// `device`. mixer_path "auto": the fused kernels on CUDA when they take the head dim (KDA 64
// or 128, RWKV6 a multiple of 64), else the ops path (the CPU, small models on CUDA). chunk 0
// (auto): KDA takes the mixer's auto choice (mixers::kda_chunk), RWKV6 64.
mixers::KdaConfig kda_mixer_config(const ModelConfig& cfg, Device device);
mixers::Rwkv6Config rwkv6_mixer_config(const ModelConfig& cfg, Device device);

// KDA block (fla KDABlock): h = x + attn(attn_norm x); y = h + mlp(mlp_norm h).
std::vector<ParamSpec> kda_block_specs(const ModelConfig& cfg, int layer);
Tensor kda_block_forward(const BlockContext& ctx, const ParamMap& w, const Tensor& x,
                         std::unique_ptr<BlockSaved>& saved);
Tensor kda_block_backward(const BlockContext& ctx, const ParamMap& w, ParamMap& g, std::unique_ptr<BlockSaved> saved,
                          const Tensor& dy);

// RWKV6 block (fla RWKV6Block): r = pre_norm(x) in layer 0, else x;
// h = r + attn(attn_norm r); y = h + ffn(ffn_norm h).
std::vector<ParamSpec> rwkv6_block_specs(const ModelConfig& cfg, int layer);
Tensor rwkv6_block_forward(const BlockContext& ctx, const ParamMap& w, const Tensor& x,
                           std::unique_ptr<BlockSaved>& saved);
Tensor rwkv6_block_backward(const BlockContext& ctx, const ParamMap& w, ParamMap& g, std::unique_ptr<BlockSaved> saved,
                            const Tensor& dy);

}  // namespace lt::model
