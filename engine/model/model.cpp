// The depth-2 language model (engine/model/model.h): the spec list, the arenas carved
// from it, and the step: embedding -> blocks -> final norm -> LM head + cross-entropy ->
// the same in exact reverse.
#include "engine/model/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "engine/model/arch.h"
#include "engine/model/init.h"
#include "engine/model/precision_scope.h"
#include "engine/nn/cross_entropy.h"
#include "engine/nn/embedding.h"
#include "engine/nn/linear.h"
#include "engine/nn/norm.h"
#include "engine/ops.h"
#include "kernels/launch.h"

namespace lt::model {

namespace {

// Each parameter starts at a multiple of this many elements inside the arenas (256 bytes
// of f32): vector loads of any width are aligned. The padding stays 0 in every arena.
constexpr int64_t kArenaAlign = 64;

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }
// "L0", "L1", ...: the layer's stage name in the launch atlas.
std::string layer_stage(int layer) {
  std::string s = std::to_string(layer);
  s.insert(s.begin(), 'L');
  return s;
}

void validate(const ModelConfig& c) {
  auto positive = [](int64_t v, const char* key) {
    if (v <= 0)
      throw std::invalid_argument(std::string("model config: ") + key + " must be > 0, got " + std::to_string(v));
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.num_layers, "num_layers");
  positive(c.num_heads, "num_heads");
  positive(c.head_dim, "head_dim");
  if (c.intermediate_size < 0) throw std::invalid_argument("model config: intermediate_size must be >= 0");
  if (c.norm_eps < 0) throw std::invalid_argument("model config: norm_eps must be >= 0");
  if (c.chunk < 0)
    throw std::invalid_argument("model config: chunk must be >= 1 (or 0: auto), got " + std::to_string(c.chunk));
  if (c.mixer_path != "auto" && c.mixer_path != "naive" && c.mixer_path != "ops" && c.mixer_path != "fused")
    throw std::invalid_argument("model config: mixer_path \"" + c.mixer_path +
                                "\" (expected auto | naive | ops | fused)");
}

}  // namespace

struct Model::Impl {
  ModelConfig cfg;
  Device device;
  DType param_dtype;
  DType act_dtype;
  const ArchSpec* spec = nullptr;    // the architecture's row (arch.h)
  std::vector<ParamSpec> specs;      // arena order (decayed first), full names
  std::vector<int64_t> offsets;      // element offset of specs[i] in the arenas
  std::vector<uint64_t> init_index;  // specs[i]'s position in fla's order (init streams)
  std::vector<size_t> fla_order;     // arena indices in fla's state_dict order
  std::unordered_map<std::string, size_t> by_name;
  int64_t num_params = 0;
  optim::AdamWArenas arenas;
  // What the step computes with (views into the arenas, made once).
  std::vector<ParamMap> w, g;  // per layer, names relative to the layer prefix
  Tensor emb_w, emb_g;         // [V, d] f32 master (the embedding gathers from it) and grad
  Tensor head_w, head_g;       // [V, d] the LM head's GEMM weight (bf16 shadow in bf16) and grad
  // zero_grad fills only fill_ranges ([begin, end) of the gradient arena) and sets grads_stale:
  // the linear weights' gradients and an untied LM head's keep their old values until the next
  // backward, whose GEMMs overwrite them (beta 0: no fill, no read of the old values). A read
  // before that zeroes the whole arena first (settle_grads).
  std::vector<std::pair<int64_t, int64_t>> fill_ranges;
  bool grads_stale = false;
  void settle_grads() {
    if (!grads_stale) return;
    arenas.grads.zero_();
    grads_stale = false;
  }
  Tensor norm_w, norm_b, norm_gw, norm_gb;  // [d] final norm (bias: RWKV6 only)

  Tensor view_of(const Tensor& arena, size_t i) const {
    return arena.narrow(0, offsets[i], shape_numel(specs[i].shape)).view(specs[i].shape);
  }
  size_t index_of(const std::string& name) const {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw std::invalid_argument("model: no parameter named \"" + name + "\"");
    return it->second;
  }
  Tensor param(const std::string& name) const { return view_of(arenas.params, index_of(name)); }
  Tensor grad(const std::string& name) const { return view_of(arenas.grads, index_of(name)); }
  // The tensor a GEMM reads: the bf16 shadow's view in the bf16 mode, else the parameter.
  Tensor compute_weight(size_t i) const {
    if (arenas.params_bf16.defined() && is_gemm_weight(specs[i])) return view_of(arenas.params_bf16, i);
    return view_of(arenas.params, i);
  }

  void check_batch(const Tensor& tokens, const Tensor& targets, const char* op) const {
    if (tokens.dim() != 2 || (tokens.dtype() != DType::i32 && tokens.dtype() != DType::i64))
      throw std::invalid_argument(std::string(op) + ": tokens must be [B, T] i32/i64, got " +
                                  shape_str(tokens.shape()) + " " + dtype_name(tokens.dtype()));
    if (tokens.device() != device)
      throw std::invalid_argument(std::string(op) + ": tokens on " + tokens.device().str() + ", model on " +
                                  device.str());
    if (targets.defined()) {
      if (targets.shape() != tokens.shape())
        throw std::invalid_argument(std::string(op) + ": targets " + shape_str(targets.shape()) + " != tokens " +
                                    shape_str(tokens.shape()));
      if (targets.device() != device)
        throw std::invalid_argument(std::string(op) + ": targets on " + targets.device().str() + ", model on " +
                                    device.str());
    }
  }

  // embedding -> blocks -> final norm. Returns the final norm's output [B, T, d]; with
  // `saved` non-null keeps what the backward needs (blocks' saved state, x before the norm).
  struct Trunk {
    std::vector<std::unique_ptr<BlockSaved>> blocks;
    Tensor x_last;  // [B, T, d] input of the final norm
    nn::NormStats norm;
  };
  // segments: null, or the packed documents of exactly this batch.
  void check_segments(const mixers::Segments* seg, const Tensor& tokens, const char* op) const {
    if (seg != nullptr && (seg->B() != tokens.size(0) || seg->T() != tokens.size(1)))
      throw std::invalid_argument(std::string(op) + ": segments of [" + std::to_string(seg->B()) + ", " +
                                  std::to_string(seg->T()) + "] for tokens " + shape_str(tokens.shape()));
  }

  Tensor forward_trunk(const Tensor& tokens, bool training, Trunk& t, const mixers::Segments* segments = nullptr) {
    StageScope fwd("fwd");
    Tensor x;
    {
      StageScope s("embed");
      x = nn::embedding_forward(tokens, emb_w, act_dtype);
    }
    t.blocks.resize(static_cast<size_t>(cfg.num_layers));
    for (int i = 0; i < cfg.num_layers; ++i) {
      StageScope s(layer_stage(i));
      BlockContext ctx{cfg, i, training, segments};
      x = spec->block_forward(ctx, w[static_cast<size_t>(i)], x, t.blocks[static_cast<size_t>(i)]);
    }
    StageScope s("norm");
    nn::NormOut y = spec->final_norm == FinalNorm::rms ? nn::rms_norm_forward(x, norm_w, cfg.eps())
                                                       : nn::layer_norm_forward(x, norm_w, norm_b, cfg.eps());
    if (training) {
      t.x_last = x;
      t.norm = y.stats;
    }
    return y.y;
  }
};

Model::Model(const ModelConfig& cfg, Device device, DType param_dtype) : impl_(std::make_unique<Impl>()) {
  validate(cfg);
  if (param_dtype != DType::f32 && param_dtype != DType::f64)
    throw std::invalid_argument(std::string("model: param_dtype must be f32 or f64, got ") + dtype_name(param_dtype));
  if (cfg.precision == Precision::bf16 && param_dtype != DType::f32)
    throw std::invalid_argument("model: the bf16 precision mode needs f32 parameters");
  if (cfg.precision == Precision::tf32 && param_dtype != DType::f32)
    throw std::invalid_argument("model: the tf32 precision mode needs f32 parameters");
  if (cfg.precision == Precision::fp64) {
    if (device.is_cuda())
      throw std::invalid_argument("model: the fp64 precision mode runs on the CPU only, not on " + device.str());
    param_dtype = DType::f64;  // every tensor of the fp64 mode is f64
  }
  Impl& m = *impl_;
  m.cfg = cfg;
  m.device = device;
  m.param_dtype = param_dtype;
  m.act_dtype = cfg.precision == Precision::bf16 ? DType::bf16 : param_dtype;
  m.spec = &arch_spec(cfg.arch);

  // fla's state_dict order: embeddings, layers, final norm, lm_head.
  const int64_t V = cfg.vocab_size, d = cfg.hidden_size;
  std::vector<ParamSpec> fla;
  fla.push_back({"model.embeddings.weight", {V, d}, Init::normal, 0.02, true});
  for (int i = 0; i < cfg.num_layers; ++i)
    for (ParamSpec s : m.spec->block_specs(cfg, i)) {
      s.name = layer_prefix(i) + s.name;
      fla.push_back(std::move(s));
    }
  fla.push_back({"model.norm.weight", {d}, Init::ones, 1.0, false});
  if (m.spec->final_norm == FinalNorm::layer) fla.push_back({"model.norm.bias", {d}, Init::zeros, 1.0, false});
  if (!cfg.tie_embeddings) fla.push_back({"lm_head.weight", {V, d}, Init::normal, 0.02, true});

  // Arena order: decayed parameters first (AdamW decays [0, decay_end)), fla's order within.
  std::vector<size_t> order(fla.size());
  for (size_t i = 0; i < fla.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return fla[i].decay; });
  int64_t offset = 0;
  m.fla_order.assign(fla.size(), 0);
  for (size_t a = 0; a < order.size(); ++a) {
    const ParamSpec& s = fla[order[a]];
    if (m.by_name.count(s.name)) throw std::logic_error("model: duplicate parameter name " + s.name);
    if (a > 0 && !s.decay && fla[order[a - 1]].decay) m.arenas.decay_end = offset;
    m.by_name[s.name] = a;
    m.specs.push_back(s);
    m.offsets.push_back(offset);
    m.init_index.push_back(order[a]);
    m.fla_order[order[a]] = a;
    m.num_params += shape_numel(s.shape);
    offset += (shape_numel(s.shape) + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  }
  if (!m.specs.empty() && m.specs.back().decay) m.arenas.decay_end = offset;
  const int64_t P = offset;

  // One allocation per arena; parameters start at 0 too, so the alignment padding is 0.
  m.arenas.params = Tensor::zeros({P}, param_dtype, device);
  m.arenas.grads = Tensor::zeros({P}, param_dtype, device);
  m.arenas.m = Tensor::zeros({P}, param_dtype, device);
  m.arenas.v = Tensor::zeros({P}, param_dtype, device);
  if (cfg.precision == Precision::bf16) m.arenas.params_bf16 = Tensor::zeros({P}, DType::bf16, device);

  m.w.resize(static_cast<size_t>(cfg.num_layers));
  m.g.resize(static_cast<size_t>(cfg.num_layers));
  for (int i = 0; i < cfg.num_layers; ++i) {
    const std::string prefix = layer_prefix(i);
    for (size_t a = 0; a < m.specs.size(); ++a) {
      const std::string& name = m.specs[a].name;
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string rel = name.substr(prefix.size());
      m.w[static_cast<size_t>(i)][rel] = m.compute_weight(a);
      m.g[static_cast<size_t>(i)][rel] = m.view_of(m.arenas.grads, a);
    }
  }
  const size_t emb = m.index_of("model.embeddings.weight");
  m.emb_w = m.view_of(m.arenas.params, emb);
  m.emb_g = m.view_of(m.arenas.grads, emb);
  const size_t head = cfg.tie_embeddings ? emb : m.index_of("lm_head.weight");
  m.head_w = m.compute_weight(head);
  m.head_g = m.view_of(m.arenas.grads, head);
  // zero_grad's ranges: all but the gradients a backward's GEMMs write whole (the linear
  // weights, an untied LM head); with tied embeddings the head GEMM and the embedding both add
  // into one gradient, so everything.
  int64_t fill_from = 0;
  for (size_t a = 0; a < m.specs.size() && !cfg.tie_embeddings; ++a) {
    if (m.specs[a].name == "model.embeddings.weight" || !is_gemm_weight(m.specs[a])) continue;
    if (m.offsets[a] > fill_from) m.fill_ranges.emplace_back(fill_from, m.offsets[a]);
    fill_from = m.offsets[a] + shape_numel(m.specs[a].shape);
  }
  if (fill_from < P) m.fill_ranges.emplace_back(fill_from, P);
  const size_t nw = m.index_of("model.norm.weight");
  m.norm_w = m.view_of(m.arenas.params, nw);
  m.norm_gw = m.view_of(m.arenas.grads, nw);
  if (m.spec->final_norm == FinalNorm::layer) {
    const size_t nb = m.index_of("model.norm.bias");
    m.norm_b = m.view_of(m.arenas.params, nb);
    m.norm_gb = m.view_of(m.arenas.grads, nb);
  }
}

Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->cfg; }
Device Model::device() const { return impl_->device; }
DType Model::activation_dtype() const { return impl_->act_dtype; }
const std::vector<ParamSpec>& Model::specs() const { return impl_->specs; }
int64_t Model::num_params() const { return impl_->num_params; }
Tensor Model::param(const std::string& fla_name) const { return impl_->param(fla_name); }
Tensor Model::grad(const std::string& fla_name) const {
  impl_->settle_grads();
  return impl_->grad(fla_name);
}
optim::AdamWArenas& Model::arenas() {
  impl_->settle_grads();
  return impl_->arenas;
}
ParamRange Model::param_range(const std::string& fla_name) const {
  const size_t i = impl_->index_of(fla_name);
  return {impl_->offsets[i], shape_numel(impl_->specs[i].shape)};
}

void Model::init_weights(uint64_t seed) {
  Impl& m = *impl_;
  for (size_t a = 0; a < m.specs.size(); ++a) {
    Tensor p = m.view_of(m.arenas.params, a);
    init_param(p, m.specs[a], seed, m.init_index[a]);
  }
  refresh_shadow();
}

void Model::zero_grad() {
  Impl& m = *impl_;
  for (const auto& [begin, end] : m.fill_ranges) m.arenas.grads.narrow(0, begin, end - begin).zero_();
  m.grads_stale = !m.cfg.tie_embeddings;
}

void Model::refresh_shadow() {
  if (impl_->arenas.params_bf16.defined()) impl_->arenas.params_bf16.copy_(impl_->arenas.params);
}

void Model::forward_backward(const Tensor& tokens, const Tensor& targets, double inv_count, Tensor& loss_accum,
                             const GradsReadyHook* on_ready, const mixers::Segments* segments,
                             const Tensor& inv_count_at) {
  Impl& m = *impl_;
  // The parameters whose gradients the backward has just finished, handed to on_ready.
  auto ready = [&](std::initializer_list<std::string> prefixes_or_names) {
    if (!on_ready) return;
    std::vector<ParamRange> r;
    for (size_t a = 0; a < m.specs.size(); ++a)
      for (const std::string& p : prefixes_or_names)
        if (m.specs[a].name.compare(0, p.size(), p) == 0 && (p.back() == '.' || m.specs[a].name == p))
          r.push_back({m.offsets[a], shape_numel(m.specs[a].shape)});
    (*on_ready)(r);
  };
  if (!targets.defined()) throw std::invalid_argument("forward_backward: targets are required");
  m.check_batch(tokens, targets, "forward_backward");
  MatmulPrecisionScope precision(m.cfg.precision);
  const int64_t B = tokens.size(0), T = tokens.size(1), d = m.cfg.hidden_size, N = B * T;
  Impl::Trunk trunk;
  m.check_segments(segments, tokens, "forward_backward");
  Tensor y = m.forward_trunk(tokens, /*training=*/true, trunk, segments);  // [B, T, d]
  Tensor dy = Tensor::empty({N, d}, m.act_dtype, m.device);                // [N, d]
  // The first backward after zero_grad writes the gradients zero_grad skipped (the head's and
  // the linear weights'). Cleared before any of them is written, so that a read from on_ready
  // during this backward does not zero the arena (settle_grads).
  const bool overwrite = m.grads_stale;
  m.grads_stale = false;
  {
    StageScope s("loss");
    nn::LmHeadLossArgs args;
    args.inv_count = inv_count;
    args.inv_count_at = inv_count_at;
    args.overwrite_dW = overwrite;
    nn::lm_head_cross_entropy_backward(y.view({N, d}), m.head_w, targets.reshape({N}), args, loss_accum, dy, m.head_g);
  }
  y = Tensor();
  StageScope bwd("bwd");
  Tensor dx;
  {
    StageScope s("norm");
    dx = m.spec->final_norm == FinalNorm::rms
             ? nn::rms_norm_backward(dy.view({B, T, d}), trunk.x_last, m.norm_w, trunk.norm, m.norm_gw)
             : nn::layer_norm_backward(dy.view({B, T, d}), trunk.x_last, m.norm_w, trunk.norm, m.norm_gw, m.norm_gb);
    dy = Tensor();
    trunk.x_last = Tensor();
  }
  if (m.cfg.tie_embeddings) ready({"model.norm.weight", "model.norm.bias"});
  else ready({"lm_head.weight", "model.norm.weight", "model.norm.bias"});
  {
    nn::WeightGradOverwriteScope scope(overwrite);
    for (int i = static_cast<int>(m.cfg.num_layers) - 1; i >= 0; --i) {
      StageScope s(layer_stage(i));
      BlockContext ctx{m.cfg, i, true, segments};
      dx = m.spec->block_backward(ctx, m.w[static_cast<size_t>(i)], m.g[static_cast<size_t>(i)],
                                  std::move(trunk.blocks[static_cast<size_t>(i)]), dx);
      ready({layer_prefix(i)});
    }
  }
  StageScope s("embed");
  nn::embedding_backward(dx, tokens, m.emb_g);
  ready({"model.embeddings.weight"});
}

void Model::evaluate(const Tensor& tokens, const Tensor& targets, double inv_count, Tensor& loss_accum, Tensor correct,
                     const mixers::Segments* segments) {
  Impl& m = *impl_;
  if (!targets.defined()) throw std::invalid_argument("evaluate: targets are required");
  m.check_batch(tokens, targets, "evaluate");
  MatmulPrecisionScope precision(m.cfg.precision);
  const int64_t N = tokens.numel(), d = m.cfg.hidden_size;
  if (correct.defined() && (correct.numel() != N || correct.dtype() != DType::i32))
    throw std::invalid_argument("evaluate: correct must be [" + std::to_string(N) + "] i32, got " +
                                shape_str(correct.shape()) + " " + dtype_name(correct.dtype()));
  m.check_segments(segments, tokens, "evaluate");
  Impl::Trunk trunk;
  Tensor y = m.forward_trunk(tokens, /*training=*/false, trunk, segments);
  StageScope s("loss");
  nn::LmHeadLossArgs args;
  args.inv_count = inv_count;
  nn::lm_head_cross_entropy_forward(y.view({N, d}), m.head_w, targets.reshape({N}), args, loss_accum,
                                    correct.defined() ? correct.reshape({N}) : correct);
}

Tensor Model::next_token_logits(const Tensor& tokens) {
  Impl& m = *impl_;
  m.check_batch(tokens, Tensor(), "next_token_logits");
  MatmulPrecisionScope precision(m.cfg.precision);
  Impl::Trunk trunk;
  Tensor y = m.forward_trunk(tokens, /*training=*/false, trunk);  // [B, T, d]
  Tensor last = y.select(1, y.size(1) - 1).contiguous();          // [B, d]
  StageScope s("logits");
  return nn::lm_head_logits(last, m.head_w);
}

// Training FLOPs per token (forward + backward = 3 x forward): 6 per GEMM weight element
// (block projections, MLP and the LM head; not the embedding gather), plus the mixer's
// chunk products per head (dense estimates, masks not discounted) at C = min(chunk, seq_len):
// ArchSpec::mixer_forward_flops, whose rows (arch.cpp) name each architecture's products.
int Model::mixer_chunk(int64_t batch, int64_t seq_len) const {
  const ModelConfig& c = impl_->cfg;
  return impl_->spec->mixer_chunk(c, device(), batch, seq_len, impl_->act_dtype);
}

double Model::flops_per_token(int64_t seq_len, int64_t batch) const {
  const Impl& m = *impl_;
  double gemm = 0.0;
  for (size_t a = 0; a < m.specs.size(); ++a)
    if (m.specs[a].name != "model.embeddings.weight" && is_gemm_weight(m.specs[a]))
      gemm += static_cast<double>(shape_numel(m.specs[a].shape));
  if (m.cfg.tie_embeddings) gemm += static_cast<double>(m.cfg.vocab_size * m.cfg.hidden_size);
  const double C = static_cast<double>(std::min<int64_t>(mixer_chunk(batch, seq_len), std::max<int64_t>(seq_len, 1)));
  const double D = static_cast<double>(m.cfg.head_dim), H = static_cast<double>(m.cfg.num_heads);
  const double mixer_fwd = m.spec->mixer_forward_flops(C, D);
  return 6.0 * gemm + 3.0 * mixer_fwd * H * static_cast<double>(m.cfg.num_layers);
}

nlohmann::json Model::fla_config() const {
  const ModelConfig& c = impl_->cfg;
  nlohmann::json j;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_heads"] = c.num_heads;
  j["intermediate_size"] = c.intermediate();
  j["norm_eps"] = c.eps();
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["attn_mode"] = "chunk";
  j["attn"] = nullptr;
  j["max_position_embeddings"] = 2048;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["pad_token_id"] = nullptr;
  j["bos_token_id"] = 1;
  j["eos_token_id"] = 2;
  j["fuse_norm"] = true;
  j["fuse_cross_entropy"] = true;
  j["use_l2warp"] = false;
  j["torch_dtype"] = "float32";
  j["architectures"] = {impl_->spec->fla_class};
  impl_->spec->fla_config(c, j);
  return j;
}

std::vector<io::NamedTensor> Model::named_params() const {
  std::vector<io::NamedTensor> out;
  for (size_t a : impl_->fla_order) out.push_back({impl_->specs[a].name, impl_->view_of(impl_->arenas.params, a)});
  return out;
}

std::vector<io::NamedTensor> Model::named_grads() const {
  impl_->settle_grads();
  std::vector<io::NamedTensor> out;
  for (size_t a : impl_->fla_order) out.push_back({impl_->specs[a].name, impl_->view_of(impl_->arenas.grads, a)});
  return out;
}

void Model::load_params(const io::SafetensorsFile& file) {
  Impl& m = *impl_;
  for (size_t a = 0; a < m.specs.size(); ++a) {
    const ParamSpec& s = m.specs[a];
    if (!file.has(s.name))
      throw std::invalid_argument("load_params: " + file.path + " has no tensor \"" + s.name + "\"");
    const Tensor t = file.get(s.name);
    if (t.shape() != s.shape)
      throw std::invalid_argument("load_params: " + file.path + ": tensor \"" + s.name + "\" has shape " +
                                  shape_str(t.shape()) + ", the model needs " + shape_str(s.shape));
    if (!is_floating(t.dtype()))
      throw std::invalid_argument("load_params: " + file.path + ": tensor \"" + s.name + "\" has dtype " +
                                  dtype_name(t.dtype()) + ", not a float type");
    m.view_of(m.arenas.params, a).copy_(t);
  }
  refresh_shadow();
}

}  // namespace lt::model
