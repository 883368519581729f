// Recurrent decoding (engine/model/decode.h): the blocks continued from a per-layer state,
// one token per decode_step (the mixers by their recurrences) or T tokens per prefill (the
// chunked mixers from h0). A decode step runs the same fixed list of ops whatever the
// position, so its launches per token are a constant.
#include "engine/model/decode.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/mixers/kda.h"
#include "engine/mixers/rwkv6.h"
#include "engine/model/arch.h"
#include "engine/model/blocks.h"
#include "engine/model/precision_scope.h"
#include "engine/nn/activation.h"
#include "engine/nn/cross_entropy.h"
#include "engine/nn/embedding.h"
#include "engine/nn/linear.h"
#include "engine/nn/norm.h"
#include "engine/nn/short_conv.h"
#include "engine/ops.h"
#include "kernels/launch.h"

namespace lt::model {

namespace {

constexpr int64_t kConvSize = 4;  // fla's conv_size (kda_block.cpp)
constexpr int kLerps = 5;         // RWKV6's m_r, m_w, m_k, m_v, m_g

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }
// "L0", "L1", ...: the layer's stage name in the launch atlas (as the forward's).
std::string layer_stage(int layer) {
  std::string s = std::to_string(layer);
  s.insert(s.begin(), 'L');
  return s;
}

const Tensor& at(const ParamMap& m, const std::string& name) {
  auto it = m.find(name);
  if (it == m.end()) throw std::invalid_argument("decode_step: parameter \"" + name + "\" missing");
  return it->second;
}

// The causal short conv over the window [B, W - 1 + T, C] = (history [B, W - 1, C], x [B, T, C]):
// silu(conv) at the window's last T rows [B, T, C] (the forward's rows for these positions);
// the history moves on to the window's last W - 1 rows.
Tensor conv_step(const Tensor& x, const Tensor& conv_weight, Tensor& history) {
  const int64_t T = x.size(1);
  const Tensor window = ops::cat({history, x}, 1);
  const Tensor w = conv_weight.view({conv_weight.size(0), conv_weight.size(2)});
  const Tensor y = nn::short_conv_forward(window, w).narrow(1, kConvSize - 1, T);
  history = window.narrow(1, T, kConvSize - 1).contiguous();
  return y;
}

// The forward's mixer configurations (blocks.h), keeping the final state: the chunked prefill.
mixers::KdaConfig kda_prefill_config(const ModelConfig& cfg, Device device) {
  mixers::KdaConfig k = kda_mixer_config(cfg, device);
  k.output_final_state = true;
  return k;
}
mixers::Rwkv6Config rwkv6_prefill_config(const ModelConfig& cfg, Device device) {
  mixers::Rwkv6Config c = rwkv6_mixer_config(cfg, device);
  c.output_final_state = true;
  return c;
}

// KDA block on T tokens after the state: x [B, T, d] -> y [B, T, d] (kda_block_forward
// continued from the state). One token: the mixer by the delta-rule recurrence; more: the
// chunked mixer from h0 = S, its final state the new S.
Tensor kda_block_step(const ModelConfig& cfg, const ParamMap& w, LayerDecodeState& st, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), H = cfg.num_heads, K = cfg.head_dim;
  const double eps = cfg.eps();
  Tensor h;
  {
    StageScope stage("attn");
    const Tensor xn = nn::rms_norm_forward(x, at(w, "attn_norm.weight"), eps).y;  // [B, T, d]
    Tensor q, k, v, f, b;                                                         // [B, T, H*K] (b: [B, T, H])
    {
      StageScope proj("proj");
      q = conv_step(nn::linear_forward(xn, at(w, "attn.q_proj.weight")), at(w, "attn.q_conv1d.weight"), st.conv_q);
      k = conv_step(nn::linear_forward(xn, at(w, "attn.k_proj.weight")), at(w, "attn.k_conv1d.weight"), st.conv_k);
      v = conv_step(nn::linear_forward(xn, at(w, "attn.v_proj.weight")), at(w, "attn.v_conv1d.weight"), st.conv_v);
      f = nn::linear_forward(nn::linear_forward(xn, at(w, "attn.f_proj.0.weight")), at(w, "attn.f_proj.1.weight"));
      b = nn::linear_forward(xn, at(w, "attn.b_proj.weight"));
    }
    Tensor o;  // [B, T, H, K]
    if (T > 1) {
      StageScope mixer("kda");
      mixers::KdaInputs in;
      in.q = q.reshape({B, T, H, K});
      in.k = k.reshape({B, T, H, K});
      in.v = v.reshape({B, T, H, K});
      in.f = f.view({B, T, H, K});
      in.b = b;
      in.A_log = at(w, "attn.A_log");
      in.dt_bias = at(w, "attn.dt_bias");
      in.h0 = st.S;
      mixers::KdaOutput out = mixers::kda_forward(in, kda_prefill_config(cfg, x.device()));
      o = out.o.contiguous();
      st.S = out.ht.to(st.S.dtype());
    } else {
      StageScope mixer("kda");
      // With one token [B, 1, H, K] is laid out as [B, H, 1, K] (a row) and [B, H, K, 1] (a column).
      const Tensor qh = ops::l2norm(q.reshape({B, H, 1, K}), 1e-6).first;
      const Tensor kh = ops::l2norm(k.reshape({B, H, 1, K}), 1e-6).first;
      const Tensor gx = f.reshape({B, H, 1, K}) + at(w, "attn.dt_bias").view({H, 1, K});
      const Tensor g = ops::neg(ops::exp(at(w, "attn.A_log").view({H, 1, 1})) * ops::softplus(gx));  // [B, H, 1, K]
      const Tensor beta = ops::sigmoid(b.reshape({B, H, 1, 1}));
      // S <- diag(e^g) S;  delta = beta (v - k^T S);  S <- S + k delta;  o = scale S^T q
      Tensor S = st.S * ops::exp(g).view({B, H, K, 1});
      const Tensor delta = (v.reshape({B, H, 1, K}) - ops::matmul(kh, S)) * beta;  // [B, H, 1, V]
      S = S + ops::matmul(kh.view({B, H, K, 1}), delta);
      o = ops::mul_scalar(ops::matmul(qh, S), 1.0 / std::sqrt(static_cast<double>(K))).view({B, 1, H, K});
      st.S = S;
    }
    StageScope post("out");
    const Tensor g1 = nn::linear_forward(xn, at(w, "attn.g_proj.0.weight"));
    const Tensor gg =
        nn::linear_forward(g1, at(w, "attn.g_proj.1.weight"), at(w, "attn.g_proj.1.bias")).view({B, T, H, K});
    const Tensor on = nn::gated_rms_norm_forward(o, gg, at(w, "attn.o_norm.weight"), eps).y.view({B, T, H * K});
    h = ops::add(x, nn::linear_forward(on, at(w, "attn.o_proj.weight")));
  }
  StageScope stage("mlp");
  const Tensor hn = nn::rms_norm_forward(h, at(w, "mlp_norm.weight"), eps).y;
  const Tensor act = nn::swiglu_forward(nn::linear_forward(hn, at(w, "mlp.gate_proj.weight")),
                                        nn::linear_forward(hn, at(w, "mlp.up_proj.weight")));
  return ops::add(h, nn::linear_forward(act, at(w, "mlp.down_proj.weight")));
}

// Token shift continued from the state: delta_t = x_{t-1} - x_t with x_{-1} = prev [B, 1, d];
// prev becomes x's last row.
Tensor shift_step(const Tensor& x, Tensor& prev) {
  const int64_t T = x.size(1);
  const Tensor before = T == 1 ? prev : ops::cat({prev, x.narrow(1, 0, T - 1)}, 1);  // [B, T, d]
  const Tensor delta = before - x;
  prev = T == 1 ? x : x.narrow(1, T - 1, 1).contiguous();
  return delta;
}

// RWKV6 block on T tokens after the state: x [B, T, d] -> y [B, T, d] (rwkv6_block_forward
// continued from the state: the token shifts start from the previous token's norm outputs).
// One token: the mixer by the wkv recurrence (scale 1); more: the chunked mixer from h0 = S.
Tensor rwkv6_block_step(const ModelConfig& cfg, int layer, const ParamMap& w, LayerDecodeState& st, const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), d = cfg.hidden_size, H = cfg.num_heads, K = cfg.head_dim;
  const int64_t R = cfg.rwkv6_proj_low_rank_dim;
  const double eps = cfg.eps();
  Tensor h;
  {
    StageScope stage("attn");
    const Tensor r =
        layer == 0 ? nn::layer_norm_forward(x, at(w, "pre_norm.weight"), at(w, "pre_norm.bias"), eps).y : x;
    const Tensor a = nn::layer_norm_forward(r, at(w, "attn_norm.weight"), at(w, "attn_norm.bias"), eps).y;
    const Tensor delta = shift_step(a, st.shift_attn);  // [B, T, d]
    Tensor rr, kk, vv, logw, gg;                        // [B, T, H*K] (gg: [B, T, d])
    {
      StageScope proj("proj");
      const Tensor xx = a + delta * at(w, "attn.x_proj.0.mu");
      const Tensor z = ops::tanh(nn::linear_forward(xx, at(w, "attn.x_proj.0.linear.weight")));  // [B, T, 5R]
      const Tensor z5 = z.reshape({B * T, kLerps, R}).permute({1, 0, 2});
      const Tensor W5 = at(w, "attn.x_proj.2.weight").view({d, kLerps, R}).permute({1, 0, 2});
      const Tensor m =
          ops::matmul(z5, W5, false, true).permute({1, 0, 2}).reshape({B, T, kLerps, d}) + at(w, "attn.x_bias");
      Tensor xl[kLerps];
      for (int i = 0; i < kLerps; ++i) xl[i] = a + delta * m.select(2, i);
      rr = nn::linear_forward(xl[0], at(w, "attn.r_proj.linear.weight"));  // [B, T, H*K]
      const Tensor lw = ops::tanh(nn::linear_forward(xl[1], at(w, "attn.w_proj.linear.lora.0.weight")));
      logw = ops::neg(ops::exp(
          nn::linear_forward(lw, at(w, "attn.w_proj.linear.lora.2.weight"), at(w, "attn.w_proj.linear.lora.2.bias"))));
      kk = nn::linear_forward(xl[2], at(w, "attn.k_proj.linear.weight"));
      vv = nn::linear_forward(xl[3], at(w, "attn.v_proj.linear.weight"));
      gg = nn::linear_forward(xl[4], at(w, "attn.g_proj.linear.weight"));  // [B, T, d]
    }
    Tensor o;  // [B, T, H, K]
    if (T > 1) {
      StageScope mixer("rwkv6");
      mixers::Rwkv6Inputs in;
      in.r = rr.view({B, T, H, K});
      in.k = kk.view({B, T, H, K});
      in.v = vv.view({B, T, H, K});
      in.w = logw.view({B, T, H, K});
      in.u = at(w, "attn.bonus");
      in.h0 = st.S;
      mixers::Rwkv6Output out = mixers::rwkv6_forward(in, rwkv6_prefill_config(cfg, x.device()));
      o = out.o.contiguous();
      st.S = out.ht.to(st.S.dtype());
    } else {
      StageScope mixer("rwkv6");
      // o = r^T (S + diag(u) k v^T);  S <- diag(e^w) S + k v^T   (scale 1: fla's layer)
      const Tensor kv = ops::matmul(kk.view({B, H, K, 1}), vv.view({B, H, 1, K}));  // [B, H, K, V]
      o = ops::matmul(rr.view({B, H, 1, K}), st.S + at(w, "attn.bonus").view({H, K, 1}) * kv).view({B, 1, H, K});
      st.S = st.S * ops::exp(logw).view({B, H, K, 1}) + kv;
    }
    StageScope post("out");
    const Tensor gnw = at(w, "attn.g_norm.weight").view({H, K}), gnb = at(w, "attn.g_norm.bias").view({H, K});
    const Tensor on = nn::group_norm_forward(o, gnw, gnb, eps).y.view({B, T, d});
    h = r + nn::linear_forward(nn::silu_mul_forward(on, gg), at(w, "attn.o_proj.weight"));
  }
  StageScope stage("ffn");
  const Tensor f = nn::layer_norm_forward(h, at(w, "ffn_norm.weight"), at(w, "ffn_norm.bias"), eps).y;
  const Tensor fd = shift_step(f, st.shift_ffn);
  const Tensor fk = f + fd * at(w, "ffn.key.mu");
  const Tensor fr = f + fd * at(w, "ffn.receptance.mu");
  const Tensor val = nn::linear_forward(nn::sqrelu_forward(nn::linear_forward(fk, at(w, "ffn.key.linear.weight"))),
                                        at(w, "ffn.value.weight"));
  const Tensor rec = nn::linear_forward(fr, at(w, "ffn.receptance.linear.weight"));
  return h + nn::sigmoid_mul_forward(rec, val);
}

}  // namespace

void kda_decode_check(const ModelConfig&) {}
void rwkv6_decode_check(const ModelConfig& cfg) {
  if (cfg.num_heads * cfg.head_dim != cfg.hidden_size)
    throw std::invalid_argument("DecodeState: the RWKV6 mixer needs num_heads * head_dim (" +
                                std::to_string(cfg.num_heads * cfg.head_dim) + ") == hidden_size (" +
                                std::to_string(cfg.hidden_size) + ")");
}

void kda_decode_init(const ModelConfig& cfg, int64_t batch, DType dtype, Device device, LayerDecodeState& l) {
  const int64_t H = cfg.num_heads, K = cfg.head_dim;
  l = LayerDecodeState();
  l.S = Tensor::zeros({batch, H, K, K}, dtype, device);
  l.conv_q = Tensor::zeros({batch, kConvSize - 1, H * K}, dtype, device);
  l.conv_k = Tensor::zeros({batch, kConvSize - 1, H * K}, dtype, device);
  l.conv_v = Tensor::zeros({batch, kConvSize - 1, H * K}, dtype, device);
}
void rwkv6_decode_init(const ModelConfig& cfg, int64_t batch, DType dtype, Device device, LayerDecodeState& l) {
  const int64_t H = cfg.num_heads, K = cfg.head_dim, d = cfg.hidden_size;
  l = LayerDecodeState();
  l.S = Tensor::zeros({batch, H, K, K}, dtype, device);
  l.shift_attn = Tensor::zeros({batch, 1, d}, dtype, device);
  l.shift_ffn = Tensor::zeros({batch, 1, d}, dtype, device);
}

Tensor kda_decode_block(const ModelConfig& cfg, int, const ParamMap& w, LayerDecodeState& st, const Tensor& x) {
  return kda_block_step(cfg, w, st, x);
}
Tensor rwkv6_decode_block(const ModelConfig& cfg, int layer, const ParamMap& w, LayerDecodeState& st, const Tensor& x) {
  return rwkv6_block_step(cfg, layer, w, st, x);
}

DecodeState::DecodeState(const Model& m, int64_t batch) : model_(&m), batch_(batch) {
  const ModelConfig& cfg = m.config();
  if (batch < 1) throw std::invalid_argument("DecodeState: batch must be >= 1, got " + std::to_string(batch));
  arch_spec(cfg.arch).decode_check(cfg);
  emb_w = m.param("model.embeddings.weight");
  dtype_ = emb_w.dtype();
  head_w = cfg.tie_embeddings ? emb_w : m.param("lm_head.weight");
  norm_w = m.param("model.norm.weight");
  if (arch_spec(cfg.arch).final_norm == FinalNorm::layer) norm_b = m.param("model.norm.bias");
  weights_.resize(static_cast<size_t>(cfg.num_layers));
  for (int i = 0; i < cfg.num_layers; ++i) {
    const std::string prefix = layer_prefix(i);
    for (const ParamSpec& s : m.specs())
      if (s.name.compare(0, prefix.size(), prefix) == 0)
        weights_[static_cast<size_t>(i)][s.name.substr(prefix.size())] = m.param(s.name);
  }
  layers.resize(static_cast<size_t>(cfg.num_layers));
  reset();
}

void DecodeState::reset() {
  const ModelConfig& cfg = model_->config();
  for (LayerDecodeState& l : layers) arch_spec(cfg.arch).decode_init(cfg, batch_, dtype_, model_->device(), l);
  position_ = 0;
}

// tokens [B, T] on the model's device -> the logits after the last position [B, V].
Tensor DecodeState::advance(Model& m, DecodeState& st, const Tensor& tokens, const char* op) {
  if (st.model_ != &m) throw std::invalid_argument(std::string(op) + ": the state belongs to another model");
  const ModelConfig& cfg = m.config();
  const ArchSpec& spec = arch_spec(cfg.arch);
  const int64_t B = st.batch_, T = tokens.size(1), d = cfg.hidden_size;
  if (tokens.device() != m.device())
    throw std::invalid_argument(std::string(op) + ": tokens on " + tokens.device().str() + ", model on " +
                                m.device().str());
  MatmulPrecisionScope precision(cfg.precision);
  StageScope stage(T == 1 ? "decode" : "prefill");
  Tensor x;
  {
    StageScope s("embed");
    x = nn::embedding_forward(tokens.contiguous(), st.emb_w, st.dtype_);  // [B, T, d]
  }
  for (int i = 0; i < cfg.num_layers; ++i) {
    StageScope s(layer_stage(i));
    const ParamMap& w = st.weights_[static_cast<size_t>(i)];
    LayerDecodeState& ls = st.layers[static_cast<size_t>(i)];
    x = spec.decode_block(cfg, i, w, ls, x);
  }
  st.position_ += T;
  Tensor y;  // [B, 1, d] the final norm of the last position
  {
    StageScope s("norm");
    const Tensor last = T == 1 ? x : x.narrow(1, T - 1, 1).contiguous();
    y = spec.final_norm == FinalNorm::rms ? nn::rms_norm_forward(last, st.norm_w, cfg.eps()).y
                                          : nn::layer_norm_forward(last, st.norm_w, st.norm_b, cfg.eps()).y;
  }
  StageScope s("logits");
  return nn::lm_head_logits(y.view({B, d}), st.head_w);
}

Tensor decode_step(Model& m, DecodeState& st, const Tensor& tokens) {
  const int64_t B = st.batch();
  if (tokens.dim() != 1 || tokens.size(0) != B || (tokens.dtype() != DType::i32 && tokens.dtype() != DType::i64))
    throw std::invalid_argument("decode_step: tokens must be [" + std::to_string(B) + "] i32/i64, got " +
                                shape_str(tokens.shape()) + " " + dtype_name(tokens.dtype()));
  return DecodeState::advance(m, st, tokens.contiguous().view({B, 1}), "decode_step");
}

Tensor prefill(Model& m, DecodeState& st, const Tensor& tokens) {
  if (tokens.dim() != 2 || tokens.size(0) != st.batch() || tokens.size(1) < 1 ||
      (tokens.dtype() != DType::i32 && tokens.dtype() != DType::i64))
    throw std::invalid_argument("prefill: tokens must be [" + std::to_string(st.batch()) + ", T >= 1] i32/i64, got " +
                                shape_str(tokens.shape()) + " " + dtype_name(tokens.dtype()));
  return DecodeState::advance(m, st, tokens, "prefill");
}

}  // namespace lt::model
