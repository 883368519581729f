// What differs between the architectures, one row each (arch.cpp): the block, the final norm,
// the MLP width rule and norm epsilon of fla's config, the mixer's chunk and FLOPs, fla's
// config keys and the decode step. Model, decode and config code ask the row, never the enum,
// so adding an architecture is a row, its block file (kda_block.cpp, rwkv6_block.cpp) and tests.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/model/blocks.h"
#include "engine/model/config.h"

namespace lt::model {

struct LayerDecodeState;  // engine/model/decode.h

// The norm after the last block: RMSNorm (weight) or LayerNorm (weight and bias).
enum class FinalNorm : uint8_t { rms, layer };

struct ArchSpec {
  Arch arch;
  const char* name;         // the config value and fla's model_type
  const char* fla_class;    // fla's CausalLM class, config.json "architectures"
  double default_norm_eps;  // fla's norm_eps default
  FinalNorm final_norm;
  // fla's MLP width for hidden size d when intermediate_size is 0.
  int64_t (*intermediate_rule)(int64_t d);
  // Sizes the architecture cannot run (std::invalid_argument naming the config keys).
  void (*check_sizes)(const ModelConfig& cfg);
  // The block (blocks.h): parameter specs (names relative to "model.layers.{i}."), forward, backward.
  std::vector<ParamSpec> (*block_specs)(const ModelConfig& cfg, int layer);
  Tensor (*block_forward)(const BlockContext& ctx, const ParamMap& w, const Tensor& x,
                          std::unique_ptr<BlockSaved>& saved);
  Tensor (*block_backward)(const BlockContext& ctx, const ParamMap& w, ParamMap& g, std::unique_ptr<BlockSaved> saved,
                           const Tensor& dy);
  // The chunk length the mixer runs at on micro-batches [batch, seq_len] in activation dtype act.
  int (*mixer_chunk)(const ModelConfig& cfg, Device device, int64_t batch, int64_t seq_len, DType act);
  // Forward FLOPs of the mixer per token and head at chunk C and head width D (dense estimate;
  // Model::flops_per_token states the products).
  double (*mixer_forward_flops)(double C, double D);
  // fla's config keys of this architecture (model_type, its layer options), added to j.
  void (*fla_config)(const ModelConfig& cfg, nlohmann::json& j);
  // Decoding (decode.h): what the architecture needs of the sizes, a layer's fresh state for
  // `batch` sequences, and one block over x [B, T, d] from that state (updated).
  void (*decode_check)(const ModelConfig& cfg);
  void (*decode_init)(const ModelConfig& cfg, int64_t batch, DType dtype, Device device, LayerDecodeState& state);
  Tensor (*decode_block)(const ModelConfig& cfg, int layer, const ParamMap& w, LayerDecodeState& state,
                         const Tensor& x);
};

const ArchSpec& arch_spec(Arch a);
// Every architecture, in enum order.
const std::vector<const ArchSpec*>& arch_specs();

}  // namespace lt::model
