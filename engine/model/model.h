// The depth-2 language model: token embedding -> num_layers blocks (KDA or RWKV6,
// engine/model/blocks.h) -> final norm -> LM head fused with cross-entropy
// (engine/nn/cross_entropy.h). It owns the arenas carved from the spec list: parameters,
// gradients and both AdamW moments (f32, one allocation each; decayed parameters first),
// and in the bf16 mode the bf16 shadow of the parameters that the GEMMs read.
//
//   lt::model::Model m(cfg, lt::default_device());
//   m.init_weights(seed);                                  // fla's initialisation
//   m.zero_grad();
//   m.forward_backward(tokens, targets, 1.0 / n_valid, loss);   // grads +=, loss += (device)
//   lt::optim::adamw_step(m.arenas(), ...);                 // engine/optim/adamw.h
//
// tokens, targets: [B, T] i32 on the model's device; targets == -100 are ignored. Every
// step after the first makes no device malloc (the caching allocator serves it) and no
// host synchronisation.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "engine/io/safetensors.h"
#include "engine/model/blocks.h"
#include "engine/model/config.h"
#include "engine/model/params.h"
#include "engine/optim/adamw.h"
#include "engine/tensor.h"

namespace lt::model {

// Elements [offset, offset + count) of the flat arenas (one parameter, without its alignment
// padding).
struct ParamRange {
  int64_t offset = 0, count = 0;
};

// Called by forward_backward (when given) each time the gradients of a group of parameters
// are final for the micro-batch: their last contribution has been enqueued on the current
// stream. The groups come in the order the backward finishes them: the LM head with the final
// norm, layer L-1, ..., layer 0, the embedding (with the head when it is tied); together they
// cover every parameter once. Runs on the calling thread, inside the backward's stages.
using GradsReadyHook = std::function<void(const std::vector<ParamRange>& ready)>;

class Model {
 public:
  // Allocates the arenas (uninitialised parameters: call init_weights or load_params).
  // param_dtype: f32 (f64 for the CPU gradient checks); always f64 in the fp64 precision mode.
  Model(const ModelConfig& cfg, Device device, DType param_dtype = DType::f32);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  Device device() const;
  DType activation_dtype() const;  // bf16 in the bf16 mode, else the parameter dtype

  // The spec list with full fla names, in arena order.
  const std::vector<ParamSpec>& specs() const;
  int64_t num_params() const;
  Tensor param(const std::string& fla_name) const;            // view into the parameter arena
  Tensor grad(const std::string& fla_name) const;             // view into the gradient arena
  optim::AdamWArenas& arenas();                               // params, grads, m, v, decay_end, bf16 shadow
  ParamRange param_range(const std::string& fla_name) const;  // its place in the arenas

  // fla's initialisation, deterministic by seed (same on every device).
  void init_weights(uint64_t seed);
  // Every gradient to zero. The linear weights' (and an untied LM head's) are not filled: the
  // next forward_backward writes them whole; a read of the gradients before it sees zeros.
  void zero_grad();
  // Rewrites the bf16 shadow from the f32 parameters (after a load; adamw_step keeps it
  // current otherwise). No-op outside the bf16 mode.
  void refresh_shadow();

  // One micro-batch of training: forward, loss, backward. Gradients are accumulated (+=);
  // loss_accum (f32 scalar {}, on the device) += sum of token losses * inv_count.
  // on_ready: see GradsReadyHook (data-parallel training starts each gradient bucket's
  // all-reduce from it, on the micro-batch that completes the step's gradients).
  // segments (optional): the batch's packed documents (engine/mixers/segments.h); the state
  // of every mixer and token shift restarts at each document start.
  // inv_count_at (optional, [] f64 on the model's device): the scale read on the device
  // instead of inv_count, so a CUDA graph of the step takes each step's count.
  void forward_backward(const Tensor& tokens, const Tensor& targets, double inv_count, Tensor& loss_accum,
                        const GradsReadyHook* on_ready = nullptr, const mixers::Segments* segments = nullptr,
                        const Tensor& inv_count_at = Tensor());
  // Evaluation: loss_accum += sum of token losses * inv_count; correct ([B*T] i32, may be
  // undefined) gets 1 where the argmax prediction equals the target, 0 where not, -1 ignored.
  void evaluate(const Tensor& tokens, const Tensor& targets, double inv_count, Tensor& loss_accum,
                Tensor correct = Tensor(), const mixers::Segments* segments = nullptr);
  // Next-token logits after the last position of each row: tokens [B, T] -> [B, V] f32.
  Tensor next_token_logits(const Tensor& tokens);

  // Model FLOPs per token of a training step (forward + backward) on micro-batches of
  // `batch` rows, for MFU (the batch matters only where the mixer chunk is auto).
  double flops_per_token(int64_t seq_len, int64_t batch = 1) const;
  // The chunk length the mixers run at on micro-batches [batch, seq_len] (config chunk, or
  // its auto choice: blocks.h).
  int mixer_chunk(int64_t batch, int64_t seq_len) const;

  // fla interop: config.json for fla's KDAConfig / RWKV6Config (every default written
  // explicitly), and the parameters / gradients under fla's names.
  nlohmann::json fla_config() const;
  std::vector<io::NamedTensor> named_params() const;
  std::vector<io::NamedTensor> named_grads() const;
  // Loads parameters by fla name; every spec must be present with its exact shape (the
  // error names the tensor and both shapes); converted to the parameter dtype.
  void load_params(const io::SafetensorsFile& file);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lt::model
