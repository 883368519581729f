// The RWKV6 block (fla's RWKV6Block with RWKV6Attention and RWKV6FeedForward), forward
// beside backward (engine/model/blocks.h). LayerNorms carry biases; eps = cfg.eps().
//
//   x [B, T, d];  R = rwkv6_proj_low_rank_dim, Lg = rwkv6_gate_low_rank_dim,
//   key_dim = H * head_dim (K = head_dim per head), value_dim = d (fla's expand_v = 1).
//   r   = LayerNorm(x) (pre_norm, layer 0 only) or x                          [B, T, d]
//   a   = LayerNorm(r) (attn_norm);  delta = shift(a) - a  (shift: a_{t-1}, a_{-1} = 0)
//   z   = tanh((a + delta * mu_x) W_x1^T)                                    [B, T, 5R]
//   m_i = z_i W_x2[:, iR:(i+1)R]^T + x_bias[i],  i = r, w, k, v, g  (z_i = z[..., iR:(i+1)R])
//   rr  = (a + delta m_r) W_r^T;  kk = (a + delta m_k) W_k^T                 [B, T, key_dim]
//   vv  = (a + delta m_v) W_v^T;  gg = (a + delta m_g) W_g^T                 [B, T, value_dim]
//   w   = -exp(tanh((a + delta m_w) L0^T) L2^T + b2)                          [B, T, key_dim]
//   o   = RWKV6(rr, kk, vv, w; u = bonus, scale 1)                           [B, T, H, K]
//         (engine/mixers/rwkv6.h; cfg.mixer_path "auto": fused on CUDA when head_dim % 64 == 0,
//         else ops)
//   h   = r + (GroupNorm_H(o) * silu(gg)) W_o^T                              [B, T, d]
//   f   = LayerNorm(h) (ffn_norm);  fd = shift(f) - f
//   y   = h + sigmoid((f + fd mu_r) W_rec^T) * (relu((f + fd mu_k) W_key^T)^2 W_val^T)
// The mixer needs K == V per head (fla's expand_k = expand_v = 1, the configs lintrain
// trains); the spec list also describes fla's other shapes (e.g. the tiny listing's
// expand_k = 1/2). The backward runs the same steps in exact reverse; parameter gradients
// accumulate (+=) into g, dx is returned (=). Parameters that are not 2-D matmul weights
// (mu, x_bias, bonus, LayerNorm / GroupNorm weights and biases, the LoRA bias) are f32
// (f64) and enter the activation-dtype arithmetic through a conversion.
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/mixers/rwkv6.h"
#include "engine/model/blocks.h"
#include "engine/nn/activation.h"
#include "engine/nn/lerp.h"
#include "engine/nn/linear.h"
#include "engine/nn/norm.h"
#include "engine/ops.h"
#include "kernels/launch.h"

namespace lt::model {

namespace {

constexpr int kLerps = 5;  // m_r, m_w, m_k, m_v, m_g, in fla's order

struct Rwkv6BlockSaved final : BlockSaved {
  Tensor x;                // [B, T, d] block input
  nn::NormStats pre_norm;  // layer 0
  Tensor r;                // [B, T, d] residual stream entering attn (pre_norm(x) or x)
  Tensor a;                // [B, T, d] attn_norm(r)
  nn::NormStats attn_norm;
  Tensor delta;       // [B, T, d] shift(a) - a
  Tensor xx;          // [B, T, d] a + delta * mu_x
  Tensor z;           // [B, T, 5R] tanh(xx W_x1^T)
  Tensor m;           // [5, B*T, d] the five data-dependent lerp weights
  Tensor xl[kLerps];  // [B, T, d] a + delta * m_i (slices of one [5, B*T, d] tensor)
  Tensor lw;          // [B, T, Lg] tanh(xl_w L0^T)
  Tensor w;           // [B, T, key_dim] -exp(...) (its own derivative)
  std::shared_ptr<mixers::Rwkv6Saved> mix;
  // Packed documents: the token shifts' document positions ([B*T] i32) and the mixer's layout
  // (engine/mixers/segments.h); undefined / null: one document a row.
  Tensor positions;
  const mixers::SegmentLayout* layout = nullptr;
  Tensor o;  // [B, T, H, K] mixer output
  nn::NormStats g_norm;
  Tensor on;  // [B, T, value_dim] GroupNorm(o)
  Tensor gg;  // [B, T, value_dim] gate pre-activation
  Tensor og;  // [B, T, value_dim] on * silu(gg) (o_proj input)
  Tensor h;   // [B, T, d] after the attention residual
  Tensor f;   // [B, T, d] ffn_norm(h)
  nn::NormStats ffn_norm;
  Tensor fd;      // [B, T, d] shift(f) - f
  Tensor fk, fr;  // [B, T, d] f + fd * mu_k, f + fd * mu_r
  Tensor kpre;    // [B, T, I] key pre-activation
  Tensor kact;    // [B, T, I] relu(kpre)^2
  Tensor val;     // [B, T, d] value(kact)
  Tensor rec;     // [B, T, d] receptance pre-activation
};

const Tensor& at(const ParamMap& m, const std::string& name) {
  auto it = m.find(name);
  if (it == m.end()) throw std::invalid_argument("rwkv6_block: parameter \"" + name + "\" missing");
  return it->second;
}
Tensor& at(ParamMap& m, const std::string& name) {
  auto it = m.find(name);
  if (it == m.end()) throw std::invalid_argument("rwkv6_block: gradient \"" + name + "\" missing");
  return it->second;
}

// A non-matmul parameter (f32 / f64) in the activation dtype.
Tensor as(const Tensor& p, DType dt) { return p.dtype() == dt ? p : p.to(dt); }

// g += d, d reshaped to g's shape and converted to g's dtype.
void accumulate(Tensor& g, const Tensor& d) {
  const Tensor dd = d.dtype() == g.dtype() ? d : d.to(g.dtype());
  ops::add_(g, dd.reshape(g.shape()));
}

const char* const kLerpNames[kLerps] = {"r", "w", "k", "v", "g"};

}  // namespace

mixers::Rwkv6Config rwkv6_mixer_config(const ModelConfig& cfg, Device device) {
  mixers::Rwkv6Config c;
  c.chunk = cfg.chunk == 0 ? 64 : cfg.chunk;
  c.scale = 1.0;  // fla's RWKV6Attention
  if (cfg.mixer_path == "auto")
    c.path = device.is_cuda() && cfg.head_dim % 64 == 0 ? mixers::Rwkv6Path::fused : mixers::Rwkv6Path::ops;
  else c.path = mixers::parse_rwkv6_path(cfg.mixer_path);
  return c;
}

std::vector<ParamSpec> rwkv6_block_specs(const ModelConfig& cfg, int layer) {
  const int64_t d = cfg.hidden_size, H = cfg.num_heads, K = cfg.head_dim;
  const int64_t key_dim = H * K, value_dim = d, I = cfg.intermediate();
  const int64_t R = cfg.rwkv6_proj_low_rank_dim, Lg = cfg.rwkv6_gate_low_rank_dim;
  const double std = 0.02;                  // fla's initializer_range (FFN)
  const double gain = 0.17677669529663687;  // 2^-2.5: RWKV6Attention's xavier_uniform gain
  std::vector<ParamSpec> s;
  // fla's state_dict order (a module's own parameters before its submodules').
  if (layer == 0) {
    s.push_back({"pre_norm.weight", {d}, Init::ones, 1.0, false});
    s.push_back({"pre_norm.bias", {d}, Init::zeros, 1.0, false});
  }
  const std::vector<ParamSpec> rest = {
      {"attn_norm.weight", {d}, Init::ones, 1.0, false},
      {"attn_norm.bias", {d}, Init::zeros, 1.0, false},
      {"attn.x_bias", {kLerps, d}, Init::zeros, 1.0, false},
      {"attn.bonus", {H, K}, Init::zeros, 1.0, false},
      {"attn.x_proj.0.mu", {d}, Init::zeros, 1.0, false},
      {"attn.x_proj.0.linear.weight", {kLerps * R, d}, Init::xavier_uniform, gain, true},
      {"attn.x_proj.2.weight", {d, kLerps * R}, Init::xavier_uniform, gain, true},
      {"attn.r_proj.linear.weight", {key_dim, d}, Init::xavier_uniform, gain, true},
      {"attn.w_proj.linear.lora.0.weight", {Lg, d}, Init::zeros, 1.0, true},
      {"attn.w_proj.linear.lora.2.weight", {key_dim, Lg}, Init::orthogonal, 0.1, true},
      {"attn.w_proj.linear.lora.2.bias", {key_dim}, Init::zeros, 1.0, false},
      {"attn.k_proj.linear.weight", {key_dim, d}, Init::xavier_uniform, gain, true},
      {"attn.v_proj.linear.weight", {value_dim, d}, Init::xavier_uniform, gain, true},
      {"attn.g_proj.linear.weight", {value_dim, d}, Init::xavier_uniform, gain, true},
      {"attn.g_norm.weight", {value_dim}, Init::ones, 1.0, false},
      {"attn.g_norm.bias", {value_dim}, Init::zeros, 1.0, false},
      {"attn.o_proj.weight", {d, value_dim}, Init::xavier_uniform, gain, true},
      {"ffn_norm.weight", {d}, Init::ones, 1.0, false},
      {"ffn_norm.bias", {d}, Init::zeros, 1.0, false},
      {"ffn.key.mu", {d}, Init::zeros, 1.0, false},
      {"ffn.key.linear.weight", {I, d}, Init::normal, std, true},
      {"ffn.value.weight", {d, I}, Init::normal, std, true},
      {"ffn.receptance.mu", {d}, Init::zeros, 1.0, false},
      {"ffn.receptance.linear.weight", {d, d}, Init::normal, std, true},
  };
  s.insert(s.end(), rest.begin(), rest.end());
  return s;
}

Tensor rwkv6_block_forward(const BlockContext& ctx, const ParamMap& w, const Tensor& x,
                           std::unique_ptr<BlockSaved>& saved) {
  const ModelConfig& cfg = ctx.cfg;
  if (x.dim() != 3 || x.size(2) != cfg.hidden_size)
    throw std::invalid_argument("rwkv6_block_forward: x must be [B, T, " + std::to_string(cfg.hidden_size) + "], got " +
                                shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), d = cfg.hidden_size, H = cfg.num_heads, K = cfg.head_dim;
  const int64_t R = cfg.rwkv6_proj_low_rank_dim;
  if (H * K != d)
    throw std::invalid_argument("rwkv6_block_forward: the RWKV6 mixer needs the key head dim (head_dim " +
                                std::to_string(K) + ") equal to the value head dim (hidden_size / num_heads = " +
                                std::to_string(d / H) + "): fla's expand_k = expand_v = 1");
  const DType dt = x.dtype();
  const double eps = cfg.eps();
  auto s = std::make_unique<Rwkv6BlockSaved>();
  s->x = x;
  Tensor y;
  {
    StageScope stage("attn");
    if (ctx.layer == 0) {
      nn::NormOut pn = nn::layer_norm_forward(x, at(w, "pre_norm.weight"), at(w, "pre_norm.bias"), eps);
      s->r = pn.y;
      s->pre_norm = pn.stats;
    } else {
      s->r = x;
    }
    nn::NormOut an = nn::layer_norm_forward(s->r, at(w, "attn_norm.weight"), at(w, "attn_norm.bias"), eps);
    s->a = an.y;
    s->attn_norm = an.stats;
    mixers::Rwkv6Inputs in;
    mixers::Rwkv6Config mcfg = rwkv6_mixer_config(cfg, x.device());
    if (ctx.segments != nullptr && ctx.segments->any()) {
      s->positions = ctx.segments->positions();
      s->layout = &ctx.segments->layout(mcfg.chunk);
    }
    {
      StageScope proj("proj");
      // delta = shift(a) - a, xx = a + delta mu_x (one fused pass).
      nn::ShiftMixOut sm = nn::shift_mix_forward(s->a, {at(w, "attn.x_proj.0.mu")}, s->positions);
      s->delta = std::move(sm.delta);
      s->xx = std::move(sm.out[0]);
      // Data-dependent lerp: z = tanh(x_proj.0(xx)), m_i = x_proj.2 slice i (z_i) + x_bias[i].
      s->z = nn::tanh_forward(nn::linear_forward(s->xx, at(w, "attn.x_proj.0.linear.weight")));
      // The five slice products as one batched GEMM: z [B*T, 5, R] -> [5, B*T, R] against
      // x_proj.2.weight [d, 5R] viewed [5, d, R] (a strided view used in place).
      const Tensor z5 = s->z.reshape({B * T, kLerps, R}).permute({1, 0, 2});
      const Tensor W5 = at(w, "attn.x_proj.2.weight").view({d, kLerps, R}).permute({1, 0, 2});
      // m = (z5 W5^T) + x_bias over the product in place, xl_i = a + delta m_i (one fused pass).
      nn::Lerp5Out l5 = nn::lerp5_forward(s->a, s->delta, ops::matmul(z5, W5, false, true), at(w, "attn.x_bias"), true);
      s->m = std::move(l5.m);
      for (int i = 0; i < kLerps; ++i) s->xl[i] = l5.xl.select(0, i).view({B, T, d});
      in.r = nn::linear_forward(s->xl[0], at(w, "attn.r_proj.linear.weight")).view({B, T, H, K});
      s->lw = nn::tanh_forward(nn::linear_forward(s->xl[1], at(w, "attn.w_proj.linear.lora.0.weight")));
      s->w = nn::neg_exp_forward(nn::linear_forward(s->lw, at(w, "attn.w_proj.linear.lora.2.weight"),
                                                    as(at(w, "attn.w_proj.linear.lora.2.bias"), dt)));
      in.w = s->w.view({B, T, H, K});
      in.k = nn::linear_forward(s->xl[2], at(w, "attn.k_proj.linear.weight")).view({B, T, H, K});
      in.v = nn::linear_forward(s->xl[3], at(w, "attn.v_proj.linear.weight")).view({B, T, H, K});
      s->gg = nn::linear_forward(s->xl[4], at(w, "attn.g_proj.linear.weight"));
    }
    in.u = at(w, "attn.bonus");
    {
      StageScope mixer("rwkv6");
      if (s->layout != nullptr) {  // padding rows: zero r, k, v and log decay (no change to the state)
        for (Tensor* t : {&in.r, &in.k, &in.v, &in.w}) *t = mixers::to_layout(*t, *s->layout, 0.0);
        in.chunk_reset = s->layout->chunk_reset;
      }
      mixers::Rwkv6Output out = mixers::rwkv6_forward(in, mcfg);
      s->o = s->layout != nullptr ? mixers::from_layout(out.o, *s->layout) : out.o.contiguous();
      if (ctx.training) s->mix = std::move(out.saved);
    }
    StageScope post("out");
    Tensor gnw = at(w, "attn.g_norm.weight").view({H, K}), gnb = at(w, "attn.g_norm.bias").view({H, K});
    nn::NormOut on = nn::group_norm_forward(s->o, gnw, gnb, eps);
    s->on = on.y.view({B, T, d});
    s->g_norm = on.stats;
    s->og = nn::silu_mul_forward(s->on, s->gg);
    s->h = s->r + nn::linear_forward(s->og, at(w, "attn.o_proj.weight"));
  }
  {
    StageScope stage("ffn");
    nn::NormOut fn = nn::layer_norm_forward(s->h, at(w, "ffn_norm.weight"), at(w, "ffn_norm.bias"), eps);
    s->f = fn.y;
    s->ffn_norm = fn.stats;
    // fd = shift(f) - f, f{k,r} = f + fd mu_{k,r} (one fused pass)
    nn::ShiftMixOut fm = nn::shift_mix_forward(s->f, {at(w, "ffn.key.mu"), at(w, "ffn.receptance.mu")}, s->positions);
    s->fd = std::move(fm.delta);
    s->fk = std::move(fm.out[0]);
    s->fr = std::move(fm.out[1]);
    s->kpre = nn::linear_forward(s->fk, at(w, "ffn.key.linear.weight"));
    s->kact = nn::sqrelu_forward(s->kpre);
    s->val = nn::linear_forward(s->kact, at(w, "ffn.value.weight"));
    s->rec = nn::linear_forward(s->fr, at(w, "ffn.receptance.linear.weight"));
    y = s->h + nn::sigmoid_mul_forward(s->rec, s->val);
  }
  if (ctx.training) saved = std::move(s);
  else saved.reset();
  return y;
}

Tensor rwkv6_block_backward(const BlockContext& ctx, const ParamMap& w, ParamMap& g, std::unique_ptr<BlockSaved> saved,
                            const Tensor& dy) {
  auto* s = dynamic_cast<Rwkv6BlockSaved*>(saved.get());
  if (s == nullptr || !s->mix)
    throw std::invalid_argument("rwkv6_block_backward: no saved state from a training forward of an RWKV6 block");
  const ModelConfig& cfg = ctx.cfg;
  const int64_t B = s->x.size(0), T = s->x.size(1), d = cfg.hidden_size, H = cfg.num_heads, K = cfg.head_dim;
  const int64_t R = cfg.rwkv6_proj_low_rank_dim;
  if (dy.shape() != s->x.shape())
    throw std::invalid_argument("rwkv6_block_backward: dy " + shape_str(dy.shape()) + " != x " +
                                shape_str(s->x.shape()));
  // Activations are released as soon as their last use has run.
  Tensor dh;  // [B, T, d]
  {
    StageScope stage("ffn");
    // y = h + sigmoid(rec) * val
    nn::SigmoidMulGrads sm = nn::sigmoid_mul_backward(dy, s->rec, s->val);
    s->rec = s->val = Tensor();
    Tensor dkact = nn::linear_backward(sm.dv, s->kact, at(w, "ffn.value.weight"), at(g, "ffn.value.weight"));
    s->kact = Tensor();
    Tensor dkpre = nn::sqrelu_backward(dkact, s->kpre);
    dkact = s->kpre = Tensor();
    Tensor dfk = nn::linear_backward(dkpre, s->fk, at(w, "ffn.key.linear.weight"), at(g, "ffn.key.linear.weight"));
    dkpre = s->fk = Tensor();
    Tensor dfr =
        nn::linear_backward(sm.dr, s->fr, at(w, "ffn.receptance.linear.weight"), at(g, "ffn.receptance.linear.weight"));
    sm = {};
    s->fr = Tensor();
    // fd = shift(f) - f, f{k,r} = f + fd mu_{k,r}
    Tensor df = nn::shift_mix_backward({dfk, dfr}, s->fd, {at(w, "ffn.key.mu"), at(w, "ffn.receptance.mu")}, Tensor(),
                                       Tensor(), {&at(g, "ffn.key.mu"), &at(g, "ffn.receptance.mu")}, s->positions);
    dfk = dfr = s->fd = Tensor();
    s->f = Tensor();
    dh = nn::layer_norm_backward(df, s->h, at(w, "ffn_norm.weight"), s->ffn_norm, at(g, "ffn_norm.weight"),
                                 at(g, "ffn_norm.bias"), dy);
    s->h = Tensor();
  }
  StageScope stage("attn");
  Tensor da;  // [B, T, d] gradient of attn_norm's output
  mixers::Rwkv6Grads dm;
  Tensor dgg;  // [B, T, value_dim]
  {
    StageScope post("out");
    // h = r + o_proj(on * silu(gg))
    Tensor dog = nn::linear_backward(dh, s->og, at(w, "attn.o_proj.weight"), at(g, "attn.o_proj.weight"));
    s->og = Tensor();
    nn::SiluMulGrads sg = nn::silu_mul_backward(dog, s->on, s->gg);
    dog = s->on = s->gg = Tensor();
    dgg = sg.dg;
    Tensor dgnw = at(g, "attn.g_norm.weight").view({H, K}), dgnb = at(g, "attn.g_norm.bias").view({H, K});
    Tensor d_o = nn::group_norm_backward(sg.do_.view({B, T, H, K}), s->o, at(w, "attn.g_norm.weight").view({H, K}),
                                         s->g_norm, dgnw, dgnb);
    sg = {};
    s->o = Tensor();
    {
      StageScope mixer("rwkv6");
      if (s->layout != nullptr) d_o = mixers::to_layout(d_o, *s->layout, 0.0);
      dm = mixers::rwkv6_backward(std::move(s->mix), d_o);
      if (s->layout != nullptr)
        for (Tensor* t : {&dm.dr, &dm.dk, &dm.dv, &dm.dw}) *t = mixers::from_layout(*t, *s->layout);
    }
  }
  StageScope proj("proj");
  accumulate(at(g, "attn.bonus"), dm.du);
  dm.du = Tensor();
  // The five lerp inputs xl_i = a + delta m_i: gradients dxl_i from their projections.
  Tensor dxl[kLerps];
  dxl[0] = nn::linear_backward(dm.dr.reshape({B, T, H * K}), s->xl[0], at(w, "attn.r_proj.linear.weight"),
                               at(g, "attn.r_proj.linear.weight"));
  dm.dr = Tensor();
  {
    // w = -exp(p): dp = dw * w
    Tensor dp = nn::neg_exp_backward(dm.dw.reshape({B, T, H * K}), s->w);
    dm.dw = s->w = Tensor();
    Tensor dlw =
        nn::linear_backward(dp, s->lw, at(w, "attn.w_proj.linear.lora.2.weight"),
                            at(g, "attn.w_proj.linear.lora.2.weight"), &at(g, "attn.w_proj.linear.lora.2.bias"));
    dp = Tensor();
    dxl[1] = nn::linear_backward(nn::tanh_backward(dlw, s->lw), s->xl[1], at(w, "attn.w_proj.linear.lora.0.weight"),
                                 at(g, "attn.w_proj.linear.lora.0.weight"));
    s->lw = Tensor();
  }
  dxl[2] = nn::linear_backward(dm.dk.reshape({B, T, H * K}), s->xl[2], at(w, "attn.k_proj.linear.weight"),
                               at(g, "attn.k_proj.linear.weight"));
  dm.dk = Tensor();
  dxl[3] = nn::linear_backward(dm.dv.reshape({B, T, H * K}), s->xl[3], at(w, "attn.v_proj.linear.weight"),
                               at(g, "attn.v_proj.linear.weight"));
  dm.dv = Tensor();
  dxl[4] = nn::linear_backward(dgg, s->xl[4], at(w, "attn.g_proj.linear.weight"), at(g, "attn.g_proj.linear.weight"));
  dgg = Tensor();
  for (Tensor& t : s->xl) t = Tensor();
  // xl_i = a + delta m_i: da5 = sum dxl_i, ddelta5 = sum dxl_i m_i, dm_i = dxl_i delta.
  nn::Lerp5Grads lg = nn::lerp5_backward(std::vector<Tensor>(dxl, dxl + kLerps), s->delta, s->m);
  for (Tensor& t : dxl) t = Tensor();
  s->m = Tensor();
  {
    // x_bias [5, d] += sum over tokens of dm, a set per slice: dm read once in the
    // activation dtype, summed in f32.
    std::vector<Tensor> gb, dms;
    for (int i = 0; i < kLerps; ++i) {
      gb.push_back(at(g, "attn.x_bias").select(0, i));
      dms.push_back(lg.dm.select(0, i));
    }
    std::vector<Tensor*> acc;
    for (Tensor& t : gb) acc.push_back(&t);
    ops::column_sums_into(acc, dms);
  }
  Tensor dxx;
  {
    // m5 = z5 W5^T per slice: dz5 = dm5 W5, dW5 += dm5^T z5 (in the gradient dtype).
    const Tensor& dm5 = lg.dm;                                              // [5, B*T, d]
    const Tensor z5 = s->z.reshape({B * T, kLerps, R}).permute({1, 0, 2});  // [5, B*T, R]
    const Tensor W2 = at(w, "attn.x_proj.2.weight");
    const Tensor W5 = W2.view({d, kLerps, R}).permute({1, 0, 2});  // [5, d, R]
    // dz [B*T, 5R] written through its [5, B*T, R] view; dW5 accumulated (f32; beta 1, or 0 in
    // the first backward after zero_grad: nn::weight_grad_beta) straight into the column
    // blocks of x_proj.2's gradient.
    Tensor dz = Tensor::empty({B, T, kLerps * R}, dm5.dtype(), dm5.device());
    Tensor dz5 = dz.view({B * T, kLerps, R}).permute({1, 0, 2});
    ops::matmul_out(dz5, dm5, W5);
    Tensor gW5 = at(g, "attn.x_proj.2.weight").view({d, kLerps, R}).permute({1, 0, 2});
    ops::matmul_out(gW5, dm5, z5, true, false, 1.0, nn::weight_grad_beta());
    lg.dm = Tensor();
    dxx = nn::linear_backward(nn::tanh_backward(dz, s->z), s->xx, at(w, "attn.x_proj.0.linear.weight"),
                              at(g, "attn.x_proj.0.linear.weight"));
    s->z = s->xx = Tensor();
  }
  // delta = shift(a) - a, xx = a + delta mu_x, with the lerps' da5 and ddelta5
  da = nn::shift_mix_backward({dxx}, s->delta, {at(w, "attn.x_proj.0.mu")}, lg.ddelta, lg.da,
                              {&at(g, "attn.x_proj.0.mu")}, s->positions);
  dxx = lg.da = lg.ddelta = s->delta = Tensor();
  s->a = Tensor();
  Tensor dr = nn::layer_norm_backward(da, s->r, at(w, "attn_norm.weight"), s->attn_norm, at(g, "attn_norm.weight"),
                                      at(g, "attn_norm.bias"), dh);
  da = Tensor();
  if (ctx.layer != 0) return dr;
  return nn::layer_norm_backward(dr, s->x, at(w, "pre_norm.weight"), s->pre_norm, at(g, "pre_norm.weight"),
                                 at(g, "pre_norm.bias"));
}

}  // namespace lt::model
