// Recurrent decoding: the model advanced one token at a time from a fixed-size state, O(1)
// work and kernel launches per token whatever the position (the forward over a prefix of
// length T costs O(T) per new token).
//
//   lt::model::DecodeState st(m, /*batch=*/1);
//   Tensor logits = lt::model::prefill(m, st, prompt);          // prompt [B, T] -> [B, V]
//   for (...) logits = lt::model::decode_step(m, st, next);      // next [B] -> [B, V]
//
// Per layer the state holds what the forward carries from one token to the next:
//   KDA    S [B, H, K, V] (the delta-rule state) and the last W - 1 = 3 inputs of each short
//          conv (the q, k, v projections before the conv) [B, W - 1, H*K];
//   RWKV6  S [B, H, K, V] (the wkv state) and the token-shift inputs: the previous token's
//          attn_norm output and ffn_norm output, [B, 1, d] each.
// A fresh state is the forward's start: S = 0, zero conv history, zero shifted tokens.
// decode_step computes each layer with the forward's formulas (engine/model/kda_block.cpp,
// rwkv6_block.cpp) on one token, the mixer by its recurrence (docs/MATH.md):
//   KDA    S <- diag(e^g) S;  S <- S + beta k^ (v - S^T k^)^T;  o = D^-1/2 S^T q^
//   RWKV6  o = r^T (S + diag(u) k v^T);  S <- diag(e^w) S + k v^T
// composed from engine ops (CPU and CUDA). Compute dtype: the parameters' (f64 for an f64
// CPU model, else f32): in the bf16 mode decoding reads the f32 master weights, not the
// bf16 shadow, so its logits are the fp32 model's; in the tf32 mode the GEMMs use TF32 as
// the forward's do. Logits are [B, V] f32 (f64 for an f64 model), the forward's
// next_token_logits at the same position up to the chunked mixer's rounding.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/blocks.h"
#include "engine/model/model.h"
#include "engine/tensor.h"

namespace lt::model {

struct LayerDecodeState {
  Tensor S;                       // [B, H, K, V] mixer state (both families)
  Tensor conv_q, conv_k, conv_v;  // KDA: [B, W - 1, H*K] last inputs of the short convs
  Tensor shift_attn, shift_ffn;   // RWKV6: [B, 1, d] previous attn_norm / ffn_norm outputs
};

class DecodeState {
 public:
  // A fresh state for `batch` sequences of model m (on its device); keeps views of m's
  // parameters, so m must outlive it.
  DecodeState(const Model& m, int64_t batch);
  // Back to the fresh state (position 0).
  void reset();

  int64_t batch() const { return batch_; }
  int64_t position() const { return position_; }  // tokens consumed so far

  std::vector<LayerDecodeState> layers;

 private:
  friend Tensor decode_step(Model& m, DecodeState& st, const Tensor& tokens);
  friend Tensor prefill(Model& m, DecodeState& st, const Tensor& tokens);
  static Tensor advance(Model& m, DecodeState& st, const Tensor& tokens, const char* op);
  const Model* model_;
  int64_t batch_;
  int64_t position_ = 0;
  DType dtype_;                    // compute dtype: the parameters' (f32 or f64)
  std::vector<ParamMap> weights_;  // per layer, names relative to "model.layers.{i}."
  Tensor emb_w, head_w, norm_w, norm_b;
};

// The architectures' decode entries (their ArchSpec rows, arch.h): the sizes decoding needs,
// a layer's fresh state for `batch` sequences, one block over x [B, T, d] from the state.
void kda_decode_check(const ModelConfig& cfg);
void rwkv6_decode_check(const ModelConfig& cfg);
void kda_decode_init(const ModelConfig& cfg, int64_t batch, DType dtype, Device device, LayerDecodeState& l);
void rwkv6_decode_init(const ModelConfig& cfg, int64_t batch, DType dtype, Device device, LayerDecodeState& l);
Tensor kda_decode_block(const ModelConfig& cfg, int layer, const ParamMap& w, LayerDecodeState& st, const Tensor& x);
Tensor rwkv6_decode_block(const ModelConfig& cfg, int layer, const ParamMap& w, LayerDecodeState& st, const Tensor& x);

// Advances every sequence by one token. tokens: [B] i32 / i64 on the model's device.
// Returns the next-token logits [B, V].
Tensor decode_step(Model& m, DecodeState& st, const Tensor& tokens);
// Advances every sequence by T tokens at once, tokens [B, T] (T >= 1): the blocks over all
// T positions with the chunked mixers (the forward's "auto" path) started from the state
// and returning their final states; the logits after the last position [B, V]. The same
// logits and state as T decode_steps, up to the chunked form's rounding; O(T) work in
// O(T / chunk) mixer launches. Works from any state (a prompt in pieces).
Tensor prefill(Model& m, DecodeState& st, const Tensor& tokens);

}  // namespace lt::model
