#!/usr/bin/env python3
"""lintrain vs fla: loss and every parameter gradient of one training step, same weights, same batch.

    kbench model-dump --arch kda --out dump/           # lintrain: config.json, model.safetensors,
                                                       # batch.safetensors, grads.safetensors
    python scripts/fla_equivalence.py dump/ [--device cpu|cuda]

model-dump runs lintrain's step on the default device in fp32 (the fused kernels on a GPU), or
with --dtype f64 in float64 on the CPU; the model defaults to the TARGETS one (d 768, 2 blocks,
12 x 64, vocab 32000) at B 2, T 128, --arch rwkv6 for RWKV6.

Loads model.safetensors into fla's KDAForCausalLM / RWKV6ForCausalLM (built from config.json),
runs it in float64 with every Triton piece replaced by its pure-torch definition
(docs/PEER.md: fla's "fp32" kernels run TF32 products and are not an exact
reference), computes the loss as mean cross-entropy over the non-ignored targets (-100), backward,
and prints the relative error of the loss and of every gradient against lintrain's:
    rel = max |ours - fla| / max |fla|     (per tensor)
Gates: loss 1e-5, gradients 1e-4. Exit status 0 when every gate holds, 1 otherwise, 2 on bad input.
Packed documents (`kbench model-dump --docs N`: batch.safetensors has "starts"): the B rows are
flattened into one sequence and fla runs with cu_seqlens (every row start and document start a
boundary), fla's own varlen path through its layers; the references below then restart the
state, the short convolutions and the token shifts at each boundary.
The float64 model runs on the CPU by default: a Triton kernel that was not replaced cannot run
there, so the replacement is complete by construction.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

LOSS_GATE = 1e-5
GRAD_GATE = 1e-4


# ---- pure-torch definitions of fla's Triton pieces (float64-safe: no casts) -------------------

def rms_norm_forward(self, x, residual=None, prenorm=False, residual_in_fp32=False, **kwargs):
    if residual is not None:
        x = x + residual
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
    if self.weight is not None:
        y = y * self.weight
    if getattr(self, "bias", None) is not None:
        y = y + self.bias
    return (y, x) if prenorm else y


def layer_norm_forward(self, x, residual=None, prenorm=False, residual_in_fp32=False, **kwargs):
    if residual is not None:
        x = x + residual
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + self.eps)
    if self.weight is not None:
        y = y * self.weight
    if getattr(self, "bias", None) is not None:
        y = y + self.bias
    return (y, x) if prenorm else y


def group_norm_forward(self, x, residual=None, prenorm=False, residual_in_fp32=False, **kwargs):
    if residual is not None:
        x = x + residual
    shape = x.shape
    xg = x.reshape(*shape[:-1], self.num_groups, shape[-1] // self.num_groups)
    if getattr(self, "is_rms_norm", False):
        yg = xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + self.eps)
    else:
        mean = xg.mean(-1, keepdim=True)
        yg = (xg - mean) * torch.rsqrt((xg - mean).pow(2).mean(-1, keepdim=True) + self.eps)
    y = yg.reshape(shape)
    if self.weight is not None:
        y = y * self.weight
    if getattr(self, "bias", None) is not None:
        y = y + self.bias
    return (y, x) if prenorm else y


def gated_rms_norm_forward(self, x, g, residual=None, prenorm=False, residual_in_fp32=False, **kwargs):
    if residual is not None:
        x = x + residual
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
    if self.weight is not None:
        y = y * self.weight
    if getattr(self, "bias", None) is not None:
        y = y + self.bias
    act = getattr(self, "activation", "swish")
    y = y * (torch.sigmoid(g) if act == "sigmoid" else F.silu(g))
    return (y, x) if prenorm else y


def segments(T, cu_seqlens):
    """[(start, end)] of the sequences of a varlen batch (one sequence of T without cu_seqlens)."""
    if cu_seqlens is None:
        return [(0, T)]
    b = [int(x) for x in cu_seqlens.tolist()]
    return list(zip(b[:-1], b[1:]))


def short_conv_forward(self, x, *args, **kwargs):
    # x [B, T, C]; causal depthwise conv: y_t = sum_i w[:, 0, i] x_{t - W + 1 + i}, per sequence
    W = self.weight.shape[-1]
    parts = []
    for s, e in segments(x.shape[1], kwargs.get("cu_seqlens")):
        xs = x[:, s:e]
        y = F.conv1d(F.pad(xs.transpose(1, 2), (W - 1, 0)), self.weight, self.bias, groups=self.weight.shape[0])
        parts.append(y.transpose(1, 2))
    y = torch.cat(parts, 1)
    if getattr(self, "activation", None) in ("silu", "swish"):
        y = F.silu(y)
    return y, None


def gated_mlp_forward(self, x, **kwargs):
    return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def token_shift(x, cu_seqlens=None, *args, **kwargs):
    return torch.cat([F.pad(x[:, s:e], (0, 0, 1, -1)) - x[:, s:e] for s, e in segments(x.shape[1], cu_seqlens)], 1)


def kda_reference(q, k, v, g, beta, A_log=None, dt_bias=None, scale=None, initial_state=None,
                  output_final_state=False, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                  use_beta_sigmoid_in_kernel=False, lower_bound=None, cu_seqlens=None, **kwargs):
    """KDA recurrence (docs/MATH.md) in the inputs' dtype; the state restarts at zero at each
    sequence of cu_seqlens (then no initial or final state)."""
    B, T, H, K = q.shape
    starts = {s for s, _ in segments(T, cu_seqlens)} if cu_seqlens is not None else set()
    V = v.shape[-1]
    if use_qk_l2norm_in_kernel:
        q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6)
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
    if use_gate_in_kernel:
        x = g + dt_bias.reshape(H, K)
        a = A_log.exp().reshape(H, 1)
        g = -a * F.softplus(x) if lower_bound is None else lower_bound * torch.sigmoid(a * x)
    if use_beta_sigmoid_in_kernel:
        beta = beta.sigmoid()
    if kwargs.get("allow_neg_eigval", False):
        beta = beta * 2.0
    if scale is None:
        scale = K ** -0.5
    S = q.new_zeros(B, H, K, V) if initial_state is None else initial_state.to(q.dtype)
    outs = []
    for t in range(T):
        if t in starts:
            S = q.new_zeros(B, H, K, V)
        S = S * g[:, t].exp().unsqueeze(-1)
        kt, vt = k[:, t], v[:, t]
        pred = torch.einsum("bhk,bhkv->bhv", kt, S)
        S = S + beta[:, t].unsqueeze(-1).unsqueeze(-1) * kt.unsqueeze(-1) * (vt - pred).unsqueeze(-2)
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(outs, 1), (S if output_final_state else None)


def rwkv6_reference(r, k, v, w, u, scale=1.0, initial_state=None, output_final_state=False, cu_seqlens=None,
                    **kwargs):
    """RWKV6 recurrence: o_t = scale r_t^T (S + diag(u) k_t v_t^T); S <- diag(exp(w_t)) S + k_t v_t^T;
    the state restarts at zero at each sequence of cu_seqlens."""
    B, T, H, K = r.shape
    starts = {s for s, _ in segments(T, cu_seqlens)} if cu_seqlens is not None else set()
    V = v.shape[-1]
    if scale is None:
        scale = K ** -0.5
    S = r.new_zeros(B, H, K, V) if initial_state is None else initial_state.to(r.dtype)
    outs = []
    for t in range(T):
        if t in starts:
            S = r.new_zeros(B, H, K, V)
        kv = k[:, t].unsqueeze(-1) * v[:, t].unsqueeze(-2)
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", r[:, t], S + u.unsqueeze(0).unsqueeze(-1) * kv))
        S = S * w[:, t].exp().unsqueeze(-1) + kv
    return torch.stack(outs, 1), (S if output_final_state else None)


def patch_fla():
    import fla  # noqa: F401  (registers the models with transformers)
    import fla.modules as fm
    fm.RMSNorm.forward = rms_norm_forward
    fm.LayerNorm.forward = layer_norm_forward
    fm.GroupNorm.forward = group_norm_forward
    fm.FusedRMSNormGated.forward = gated_rms_norm_forward
    fm.ShortConvolution.forward = short_conv_forward
    fm.GatedMLP.forward = gated_mlp_forward
    import fla.layers.kda as lkda
    lkda.chunk_kda = kda_reference
    lkda.fused_recurrent_kda = kda_reference
    import fla.layers.rwkv6 as lrwkv6
    lrwkv6.chunk_rwkv6 = rwkv6_reference
    lrwkv6.fused_recurrent_rwkv6 = rwkv6_reference
    lrwkv6.token_shift = token_shift
    import fla.models.rwkv6.modeling_rwkv6 as mrwkv6
    mrwkv6.token_shift = token_shift


def patch_instances(model):
    """Activations that fla's modules keep as attributes (Triton / torch.compile versions)."""
    from fla.layers.rwkv6 import RWKV6Attention
    from fla.models.rwkv6.modeling_rwkv6 import RWKV6FeedForward
    for m in model.modules():
        if isinstance(m, RWKV6Attention):
            m.gate_fn = F.silu
        if isinstance(m, RWKV6FeedForward):
            m.act_fn = lambda x: F.relu(x).pow(2)


def tie_as_mapping(model_class):
    """transformers >= 5 reads _tied_weights_keys as {tied: source}; fla's models still give a
    list, which such a transformers rejects when the config ties the embeddings."""
    if isinstance(getattr(model_class, "_tied_weights_keys", None), list):
        import transformers
        if int(transformers.__version__.split(".")[0]) >= 5:
            model_class._tied_weights_keys = {"lm_head.weight": "model.embeddings.weight"}
    return model_class


def build_model(config_path):
    with open(config_path) as f:
        cfg = json.load(f)
    model_type = cfg.get("model_type")
    kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "torch_dtype")}
    if model_type == "kda":
        from fla.models import KDAConfig, KDAForCausalLM
        return tie_as_mapping(KDAForCausalLM)(KDAConfig(**kwargs)), cfg
    if model_type == "rwkv6":
        from fla.models import RWKV6Config, RWKV6ForCausalLM
        return tie_as_mapping(RWKV6ForCausalLM)(RWKV6Config(**kwargs)), cfg
    raise ValueError(f"{config_path}: unknown model_type {model_type!r} (expected kda | rwkv6)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", help="directory written by `kbench model-dump`")
    ap.add_argument("--device", default="cpu", help="where fla's float64 model runs (default cpu)")
    args = ap.parse_args()
    from safetensors.torch import load_file

    paths = {n: os.path.join(args.dump, n) for n in
             ("config.json", "model.safetensors", "batch.safetensors", "grads.safetensors")}
    for n, p in paths.items():
        if not os.path.exists(p):
            print(f"fla_equivalence: missing {p}", file=sys.stderr)
            return 2
    torch.manual_seed(0)
    patch_fla()
    model, cfg = build_model(paths["config.json"])
    patch_instances(model)
    weights = load_file(paths["model.safetensors"])
    # float64 before the load: load_state_dict copies into the existing (f32) tensors, which
    # would round lintrain's f64 weights to f32.
    model = model.double()
    missing, unexpected = model.load_state_dict({k: v.double() for k, v in weights.items()}, strict=False)
    tied = cfg.get("tie_word_embeddings", False)
    missing = [m for m in missing if not (tied and m == "lm_head.weight")]
    if missing or unexpected:
        print(f"fla_equivalence: state_dict mismatch: missing {missing}, unexpected {unexpected}", file=sys.stderr)
        return 2
    model = model.double().to(args.device)
    model.train()  # the chunk mode (fla's KDA layer switches to fused_recurrent in eval at T <= 64)

    batch = load_file(paths["batch.safetensors"])
    tokens = batch["tokens"].long().to(args.device)
    targets = batch["targets"].long().to(args.device)
    ours = load_file(paths["grads.safetensors"])
    our_loss = float(ours["loss"].double().item())

    if "starts" in batch:  # packed documents: one varlen sequence, boundaries at row and document starts
        B, T = tokens.shape
        flags = batch["starts"].long().clone()
        flags[:, 0] = 1
        bounds = torch.nonzero(flags.reshape(-1)).reshape(-1).tolist() + [B * T]
        cu_seqlens = torch.tensor(bounds, dtype=torch.int32, device=args.device)
        print(f"packed documents: {len(bounds) - 1} sequences in {B} rows (fla with cu_seqlens)")
        logits = model(input_ids=tokens.reshape(1, -1), use_cache=False, cu_seqlens=cu_seqlens).logits
    else:
        logits = model(input_ids=tokens, use_cache=False).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
    loss.backward()

    ok = True
    rows = []
    loss_rel = abs(our_loss - loss.item()) / max(abs(loss.item()), 1e-300)
    rows.append(("loss", loss_rel, LOSS_GATE))
    params = dict(model.named_parameters())
    for name in weights:
        if name not in params:
            continue
        ref = params[name].grad
        if ref is None:
            print(f"fla_equivalence: fla has no gradient for {name}", file=sys.stderr)
            ok = False
            continue
        if name not in ours:
            print(f"fla_equivalence: lintrain's dump has no gradient for {name}", file=sys.stderr)
            ok = False
            continue
        mine = ours[name].double().to(ref.device)
        if mine.shape != ref.shape:
            print(f"fla_equivalence: {name}: shape {tuple(mine.shape)} vs fla {tuple(ref.shape)}", file=sys.stderr)
            ok = False
            continue
        denom = ref.abs().max().item()
        err = (mine - ref).abs().max().item() / max(denom, 1e-300)
        if math.isnan(err):
            err = math.inf
        rows.append((name, err, GRAD_GATE))

    width = max(len(r[0]) for r in rows)
    print(f"{'tensor':<{width}}  {'rel err':>10}  gate")
    for name, err, gate in rows:
        flag = "ok" if err <= gate else "FAIL"
        ok = ok and err <= gate
        print(f"{name:<{width}}  {err:10.3e}  {gate:.0e} {flag}")
    print(f"loss: lintrain {our_loss:.10f}  fla float64 {loss.item():.10f}")
    worst = max(r[1] for r in rows[1:]) if len(rows) > 1 else float("nan")
    print(f"{'PASS' if ok else 'FAIL'}: {len(rows) - 1} gradients, worst {worst:.3e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
