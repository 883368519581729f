#include "engine/model/arch.h"

#include <stdexcept>
#include <string>

#include "engine/model/decode.h"

namespace lt::model {
namespace {

// fla's GatedMLP (KDA, hidden_ratio 4): int(d * 4 * 2 / 3) rounded up to a multiple of 256.
// fla's RWKV6 FeedForward (hidden_ratio 3.5): int(3.5 d) rounded up to a multiple of 32.
// Python's int() truncates the float product; for integer d the products are exact in
// integer arithmetic: d * 8 / 3 and d * 7 / 2.
int64_t kda_intermediate(int64_t d) { return 256 * ((d * 8 / 3 + 255) / 256); }
int64_t rwkv6_intermediate(int64_t d) { return 32 * ((d * 7 / 2 + 31) / 32); }

void kda_check_sizes(const ModelConfig&) {}
void rwkv6_check_sizes(const ModelConfig& c) {
  if (c.head_dim * c.num_heads > c.hidden_size * 4)
    throw std::invalid_argument("config keys 'model.head_dim' x 'model.num_heads' (" + std::to_string(c.head_dim) +
                                " x " + std::to_string(c.num_heads) +
                                ") exceed what RWKV6 allows for model.hidden_size " + std::to_string(c.hidden_size));
}

int kda_chunk(const ModelConfig& c, Device device, int64_t batch, int64_t seq_len, DType act) {
  return mixers::kda_chunk(kda_mixer_config(c, device), {batch, seq_len, c.num_heads, c.head_dim}, act);
}
int rwkv6_chunk(const ModelConfig& c, Device device, int64_t, int64_t, DType) {
  return rwkv6_mixer_config(c, device).chunk;
}

// KDA forward 2 (5 C D + 3 D^2): the two C x C score rows (A_qk, A_kk), W and U rows, A_qk Delta,
// and W S, Kbar^T Delta, Q~ S. RWKV6 forward 2 (2 C D + 2 D^2): the score row, A v, r S and the
// state update.
double kda_mixer_flops(double C, double D) { return 2.0 * (5.0 * C * D + 3.0 * D * D); }
double rwkv6_mixer_flops(double C, double D) { return 2.0 * (2.0 * C * D + 2.0 * D * D); }

void kda_fla_config(const ModelConfig& c, nlohmann::json& j) {
  j["model_type"] = "kda";
  j["head_dim"] = c.head_dim;
  j["num_v_heads"] = c.num_heads;
  j["expand_v"] = 1.0;
  j["use_short_conv"] = true;
  j["allow_neg_eigval"] = false;
  j["conv_size"] = 4;
  j["hidden_ratio"] = 4;
  j["hidden_act"] = "swish";
  j["fuse_swiglu"] = true;
}
void rwkv6_fla_config(const ModelConfig& c, nlohmann::json& j) {
  j["model_type"] = "rwkv6";
  j["expand_k"] = static_cast<double>(c.num_heads * c.head_dim) / static_cast<double>(c.hidden_size);
  j["expand_v"] = 1.0;
  j["hidden_ratio"] = 3.5;
  j["proj_low_rank_dim"] = c.rwkv6_proj_low_rank_dim;
  j["gate_low_rank_dim"] = c.rwkv6_gate_low_rank_dim;
  j["hidden_act"] = "sqrelu";
  j["norm_first"] = true;
  j["norm_bias"] = true;
  j["fuse_linear_cross_entropy"] = false;
}

const ArchSpec kKda{Arch::kda,         "kda",
                    "KDAForCausalLM",  1e-6,
                    FinalNorm::rms,    kda_intermediate,
                    kda_check_sizes,   kda_block_specs,
                    kda_block_forward, kda_block_backward,
                    kda_chunk,         kda_mixer_flops,
                    kda_fla_config,    kda_decode_check,
                    kda_decode_init,   kda_decode_block};
const ArchSpec kRwkv6{Arch::rwkv6,         "rwkv6",
                      "RWKV6ForCausalLM",  1e-5,
                      FinalNorm::layer,    rwkv6_intermediate,
                      rwkv6_check_sizes,   rwkv6_block_specs,
                      rwkv6_block_forward, rwkv6_block_backward,
                      rwkv6_chunk,         rwkv6_mixer_flops,
                      rwkv6_fla_config,    rwkv6_decode_check,
                      rwkv6_decode_init,   rwkv6_decode_block};

}  // namespace

const std::vector<const ArchSpec*>& arch_specs() {
  static const std::vector<const ArchSpec*> all = {&kKda, &kRwkv6};
  return all;
}

const ArchSpec& arch_spec(Arch a) {
  for (const ArchSpec* s : arch_specs())
    if (s->arch == a) return *s;
  throw std::invalid_argument("model: unknown arch " + std::to_string(static_cast<int>(a)));
}

}  // namespace lt::model
