// The KDA block (fla's KDABlock with KimiDeltaAttention and GatedMLP), forward beside
// backward (engine/model/blocks.h).
//
//   x [B, T, d]
//   xn  = RMSNorm(x) * attn_norm                                  [B, T, d]
//   q   = silu(conv4(xn Wq^T)),  k, v likewise                    [B, T, H*K]
//   f   = (xn Wf0^T) Wf1^T                                         [B, T, H*K]  (rank K)
//   b   = xn Wb^T                                                  [B, T, H]
//   o   = KDA(q, k, v, f, b; A_log, dt_bias)                       [B, T, H, K]  (engine/mixers/kda.h:
//         l2norm q, k; g = -exp(A_log) softplus(f + dt_bias); beta = sigmoid(b); scale K^-1/2)
//   gg  = (xn Wg0^T) Wg1^T + bg1                                   [B, T, H*K]  (rank K)
//   on  = RMSNorm_head(o) * o_norm * sigmoid(gg)                   [B, T, H, K]
//   h   = x + on Wo^T                                              [B, T, d]
//   hn  = RMSNorm(h) * mlp_norm
//   y   = h + (silu(hn Wgate^T) * hn Wup^T) Wdown^T                [B, T, d]   (I = cfg.intermediate())
// K = V = head_dim (fla's expand_v = 1), HV = H (no grouped values). The backward runs the
// same steps in exact reverse; parameter gradients accumulate (+=) into g.
#include <memory>
#include <stdexcept>
#include <string>

#include "engine/mixers/kda.h"
#include "engine/model/blocks.h"
#include "engine/nn/activation.h"
#include "engine/nn/linear.h"
#include "engine/nn/norm.h"
#include "engine/nn/short_conv.h"
#include "engine/ops.h"
#include "kernels/launch.h"

namespace lt::model {

namespace {

constexpr int64_t kConvSize = 4;  // fla's conv_size

struct KdaBlockSaved final : BlockSaved {
  Tensor x;   // [B, T, d] block input
  Tensor xn;  // [B, T, d] attn_norm(x)
  nn::NormStats attn_norm;
  Tensor q_lin, k_lin, v_lin;  // [B, T, H*K] projections before the short convs
  Tensor f1;                   // [B, T, K] f_proj.0 output
  std::shared_ptr<mixers::KdaSaved> kda;
  Tensor positions;  // packed documents: [B*T] i32 positions in the documents (convs), or undefined
  Tensor o;          // [B, T, H, K] KDA output
  Tensor g1;         // [B, T, K] g_proj.0 output
  Tensor gg;         // [B, T, H, K] gate of the output norm
  nn::NormStats o_norm;
  Tensor on;  // [B, T, H*K] gated-norm output (o_proj input)
  Tensor h;   // [B, T, d] after the attention residual
  Tensor hn;  // [B, T, d] mlp_norm(h)
  nn::NormStats mlp_norm;
  Tensor gate, up;  // [B, T, I]
  Tensor act;       // [B, T, I] silu(gate) * up
};

const Tensor& at(const ParamMap& m, const std::string& name) {
  auto it = m.find(name);
  if (it == m.end()) throw std::invalid_argument("kda_block: parameter \"" + name + "\" missing");
  return it->second;
}
Tensor& at(ParamMap& m, const std::string& name) {
  auto it = m.find(name);
  if (it == m.end()) throw std::invalid_argument("kda_block: gradient \"" + name + "\" missing");
  return it->second;
}

// [C, 1, W] conv weight (fla's layout) as the [C, W] the short conv takes.
Tensor conv_view(const Tensor& w) { return w.view({w.size(0), w.size(2)}); }

}  // namespace

mixers::KdaConfig kda_mixer_config(const ModelConfig& cfg, Device device) {
  mixers::KdaConfig k;
  k.chunk = cfg.chunk;
  const bool fused_dim = cfg.head_dim == 64 || cfg.head_dim == 128;
  if (cfg.mixer_path == "auto") k.path = device.is_cuda() && fused_dim ? mixers::KdaPath::fused : mixers::KdaPath::ops;
  else k.path = mixers::parse_kda_path(cfg.mixer_path);
  return k;
}

std::vector<ParamSpec> kda_block_specs(const ModelConfig& cfg, int /*layer*/) {
  const int64_t d = cfg.hidden_size, H = cfg.num_heads, K = cfg.head_dim;
  const int64_t key_dim = H * K, value_dim = H * K, I = cfg.intermediate();
  const double std = 0.02;  // fla's initializer_range
  // fla's state_dict order (a module's own parameters before its submodules').
  return {
      {"attn_norm.weight", {d}, Init::ones, 1.0, false},
      {"attn.A_log", {H}, Init::kda_a_log, 1.0, false},
      {"attn.dt_bias", {key_dim}, Init::kda_dt_bias, 1.0, false},
      {"attn.q_proj.weight", {key_dim, d}, Init::normal, std, true},
      {"attn.k_proj.weight", {key_dim, d}, Init::normal, std, true},
      {"attn.v_proj.weight", {value_dim, d}, Init::normal, std, true},
      {"attn.q_conv1d.weight", {key_dim, 1, kConvSize}, Init::normal, std, true},
      {"attn.k_conv1d.weight", {key_dim, 1, kConvSize}, Init::normal, std, true},
      {"attn.v_conv1d.weight", {value_dim, 1, kConvSize}, Init::normal, std, true},
      {"attn.f_proj.0.weight", {K, d}, Init::normal, std, true},
      {"attn.f_proj.1.weight", {key_dim, K}, Init::normal, std, true},
      {"attn.b_proj.weight", {H, d}, Init::normal, std, true},
      {"attn.g_proj.0.weight", {K, d}, Init::normal, std, true},
      {"attn.g_proj.1.weight", {value_dim, K}, Init::normal, std, true},
      {"attn.g_proj.1.bias", {value_dim}, Init::zeros, 1.0, false},
      {"attn.o_norm.weight", {K}, Init::ones, 1.0, false},
      {"attn.o_proj.weight", {d, value_dim}, Init::normal, std, true},
      {"mlp_norm.weight", {d}, Init::ones, 1.0, false},
      {"mlp.gate_proj.weight", {I, d}, Init::normal, std, true},
      {"mlp.up_proj.weight", {I, d}, Init::normal, std, true},
      {"mlp.down_proj.weight", {d, I}, Init::normal, std, true},
  };
}

Tensor kda_block_forward(const BlockContext& ctx, const ParamMap& w, const Tensor& x,
                         std::unique_ptr<BlockSaved>& saved) {
  const ModelConfig& cfg = ctx.cfg;
  if (x.dim() != 3 || x.size(2) != cfg.hidden_size)
    throw std::invalid_argument("kda_block_forward: x must be [B, T, " + std::to_string(cfg.hidden_size) + "], got " +
                                shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), H = cfg.num_heads, K = cfg.head_dim;
  const double eps = cfg.eps();
  auto s = std::make_unique<KdaBlockSaved>();
  s->x = x;
  Tensor y;
  {
    StageScope stage("attn");
    nn::NormOut xn = nn::rms_norm_forward(x, at(w, "attn_norm.weight"), eps);
    s->xn = xn.y;
    s->attn_norm = xn.stats;
    mixers::KdaInputs in;
    // Packed documents: the convs' taps and the mixer's state restart at each document start.
    if (ctx.segments != nullptr && ctx.segments->any()) {
      s->positions = ctx.segments->positions();
      in.seg_start = ctx.segments->start_flags().view({B, T});
    }
    {
      StageScope proj("proj");
      s->q_lin = nn::linear_forward(s->xn, at(w, "attn.q_proj.weight"));
      s->k_lin = nn::linear_forward(s->xn, at(w, "attn.k_proj.weight"));
      s->v_lin = nn::linear_forward(s->xn, at(w, "attn.v_proj.weight"));
      in.q = nn::short_conv_forward(s->q_lin, conv_view(at(w, "attn.q_conv1d.weight")), true, s->positions)
                 .view({B, T, H, K});
      in.k = nn::short_conv_forward(s->k_lin, conv_view(at(w, "attn.k_conv1d.weight")), true, s->positions)
                 .view({B, T, H, K});
      in.v = nn::short_conv_forward(s->v_lin, conv_view(at(w, "attn.v_conv1d.weight")), true, s->positions)
                 .view({B, T, H, K});
      s->f1 = nn::linear_forward(s->xn, at(w, "attn.f_proj.0.weight"));
      in.f = nn::linear_forward(s->f1, at(w, "attn.f_proj.1.weight")).view({B, T, H, K});
      in.b = nn::linear_forward(s->xn, at(w, "attn.b_proj.weight"));
    }
    in.A_log = at(w, "attn.A_log");
    in.dt_bias = at(w, "attn.dt_bias");
    {
      StageScope mixer("kda");
      mixers::KdaOutput out = mixers::kda_forward(in, kda_mixer_config(cfg, x.device()));
      s->o = out.o.contiguous();
      if (ctx.training) s->kda = std::move(out.saved);
    }
    StageScope post("out");
    s->g1 = nn::linear_forward(s->xn, at(w, "attn.g_proj.0.weight"));
    // The bias is f32 in every mode; the linear layer adds it in the activation dtype.
    const Tensor g_bias = at(w, "attn.g_proj.1.bias").to(s->g1.dtype());
    s->gg = nn::linear_forward(s->g1, at(w, "attn.g_proj.1.weight"), g_bias).view({B, T, H, K});
    nn::NormOut on = nn::gated_rms_norm_forward(s->o, s->gg, at(w, "attn.o_norm.weight"), eps);
    s->on = on.y.view({B, T, H * K});
    s->o_norm = on.stats;
    s->h = ops::add(x, nn::linear_forward(s->on, at(w, "attn.o_proj.weight")));
  }
  {
    StageScope stage("mlp");
    nn::NormOut hn = nn::rms_norm_forward(s->h, at(w, "mlp_norm.weight"), eps);
    s->hn = hn.y;
    s->mlp_norm = hn.stats;
    s->gate = nn::linear_forward(s->hn, at(w, "mlp.gate_proj.weight"));
    s->up = nn::linear_forward(s->hn, at(w, "mlp.up_proj.weight"));
    s->act = nn::swiglu_forward(s->gate, s->up);
    y = ops::add(s->h, nn::linear_forward(s->act, at(w, "mlp.down_proj.weight")));
  }
  if (ctx.training) saved = std::move(s);
  else saved.reset();
  return y;
}

Tensor kda_block_backward(const BlockContext& ctx, const ParamMap& w, ParamMap& g, std::unique_ptr<BlockSaved> saved,
                          const Tensor& dy) {
  auto* s = dynamic_cast<KdaBlockSaved*>(saved.get());
  if (s == nullptr || !s->kda)
    throw std::invalid_argument("kda_block_backward: no saved state from a training forward of a KDA block");
  const ModelConfig& cfg = ctx.cfg;
  const int64_t B = s->x.size(0), T = s->x.size(1), H = cfg.num_heads, K = cfg.head_dim;
  if (dy.shape() != s->x.shape())
    throw std::invalid_argument("kda_block_backward: dy " + shape_str(dy.shape()) + " != x " + shape_str(s->x.shape()));
  // Activations are released as soon as their last use has run (the caching allocator
  // serves the later steps' gradients from them).
  Tensor dh;  // [B, T, d]
  {
    StageScope stage("mlp");
    // y = h + down(act): dh = dy + mlp_norm^T (gate^T dgate + up^T dup)
    Tensor dact = nn::linear_backward(dy, s->act, at(w, "mlp.down_proj.weight"), at(g, "mlp.down_proj.weight"));
    s->act = Tensor();
    nn::SwigluGrads da = nn::swiglu_backward(dact, s->gate, s->up);
    dact = Tensor();
    s->gate = s->up = Tensor();
    Tensor dhn = nn::linear_backward(da.db, s->hn, at(w, "mlp.up_proj.weight"), at(g, "mlp.up_proj.weight"));
    nn::linear_backward_add(da.da, s->hn, at(w, "mlp.gate_proj.weight"), at(g, "mlp.gate_proj.weight"), dhn);
    da = {};
    s->hn = Tensor();
    dh = nn::rms_norm_backward(dhn, s->h, at(w, "mlp_norm.weight"), s->mlp_norm, at(g, "mlp_norm.weight"), dy);
    s->h = Tensor();
  }
  StageScope stage("attn");
  Tensor dxn;  // [B, T, d] gradient of attn_norm's output
  Tensor do_;  // [B, T, H, K] gradient of the KDA output
  {
    StageScope post("out");
    // h = x + o_proj(on)
    Tensor don = nn::linear_backward(dh, s->on, at(w, "attn.o_proj.weight"), at(g, "attn.o_proj.weight"));
    s->on = Tensor();
    nn::GatedNormGrads dn = nn::gated_rms_norm_backward(
        don.reshape({B, T, H, K}), s->o, s->gg, at(w, "attn.o_norm.weight"), s->o_norm, at(g, "attn.o_norm.weight"));
    don = Tensor();
    s->gg = Tensor();
    Tensor dg1 = nn::linear_backward(dn.dg.reshape({B, T, H * K}), s->g1, at(w, "attn.g_proj.1.weight"),
                                     at(g, "attn.g_proj.1.weight"), &at(g, "attn.g_proj.1.bias"));
    dn.dg = Tensor();
    s->g1 = Tensor();
    dxn = nn::linear_backward(dg1, s->xn, at(w, "attn.g_proj.0.weight"), at(g, "attn.g_proj.0.weight"));
    do_ = dn.dx;
    s->o = Tensor();
  }
  mixers::KdaGrads dk;
  {
    StageScope mixer("kda");
    dk = mixers::kda_backward(std::move(s->kda), do_);
    do_ = Tensor();
  }
  StageScope proj("proj");
  ops::add_(at(g, "attn.A_log"), dk.dA_log.reshape(at(g, "attn.A_log").shape()));
  ops::add_(at(g, "attn.dt_bias"), dk.ddt_bias.reshape(at(g, "attn.dt_bias").shape()));
  nn::linear_backward_add(dk.db, s->xn, at(w, "attn.b_proj.weight"), at(g, "attn.b_proj.weight"), dxn);
  dk.db = Tensor();
  Tensor df1 = nn::linear_backward(dk.df.reshape({B, T, H * K}), s->f1, at(w, "attn.f_proj.1.weight"),
                                   at(g, "attn.f_proj.1.weight"));
  dk.df = Tensor();
  s->f1 = Tensor();
  nn::linear_backward_add(df1, s->xn, at(w, "attn.f_proj.0.weight"), at(g, "attn.f_proj.0.weight"), dxn);
  df1 = Tensor();
  // q, k, v = silu(conv(xn W^T)): the convs' backwards recompute the pre-activations.
  struct Branch {
    const char* proj;
    const char* conv;
    Tensor* grad;
    Tensor* lin;
  };
  const Branch branches[] = {{"attn.v_proj.weight", "attn.v_conv1d.weight", &dk.dv, &s->v_lin},
                             {"attn.k_proj.weight", "attn.k_conv1d.weight", &dk.dk, &s->k_lin},
                             {"attn.q_proj.weight", "attn.q_conv1d.weight", &dk.dq, &s->q_lin}};
  for (const Branch& br : branches) {
    Tensor dconv_w = conv_view(at(g, br.conv));
    Tensor dlin = nn::short_conv_backward(br.grad->reshape({B, T, H * K}), *br.lin, conv_view(at(w, br.conv)), dconv_w,
                                          true, s->positions);
    *br.grad = Tensor();
    nn::linear_backward_add(dlin, s->xn, at(w, br.proj), at(g, br.proj), dxn);
    *br.lin = Tensor();
  }
  s->xn = Tensor();
  return nn::rms_norm_backward(dxn, s->x, at(w, "attn_norm.weight"), s->attn_norm, at(g, "attn_norm.weight"), dh);
}

}  // namespace lt::model
