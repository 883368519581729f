#!/usr/bin/env python3
"""lintrain vs fla + torch.optim.AdamW: a whole training trajectory, step by step.

    trainer --config C --set model.precision=fp64 --device cpu --out RUN \\
            --set train.checkpoint_every=50 --set train.keep_checkpoints=100 --dump-trajectory RUN/trajectory
    python scripts/fla_trajectory.py RUN/trajectory RUN

Replays lintrain's run in PyTorch: fla's KDAForCausalLM / RWKV6ForCausalLM built from the dump's
config.json and loaded with lintrain's initial weights (init.safetensors), trained on lintrain's
exact batches (batches.safetensors) with torch.optim.AdamW under the run's settings (run.json):
betas, eps, weight decay on the parameters lintrain decays (decay.json; the script prints how that
set differs from the common "every tensor of 2 or more dimensions" rule), the learning rate of
each step from lintrain's schedule as a LambdaLR, torch.nn.utils.clip_grad_norm_ before the step,
and lintrain's skipped steps left out. Then, per step, compares the loss and the gradient norm
with steps.jsonl, the learning rate with lintrain's, and at every checkpoint in RUN
(step-N/model.safetensors and the AdamW moments in state.safetensors) every parameter and moment:
    rel = max |ours - torch| / max |torch|     (per tensor; scalars: |ours - torch| / |torch|)

The model runs with fla's Triton pieces replaced by their pure-torch definitions (the ones of
scripts/fla_equivalence.py), in float64 when the run was fp64 (the gate is then 1e-6), else in
float32 (gate 1e-4; on a GPU pass --device cuda); a bf16 run is replayed under
torch.autocast(bfloat16) with float32 master weights, as lintrain's bf16 mode keeps them.
--spread replays a second time with every batch's rows split in two halves whose gradients are
summed (the same mathematics in another reduction order) and also passes a figure whose error
is within twice the two replays' difference: the check for bf16, where rounding differences grow
along a trajectory. --reference REF64 names the same run in float64 (model.precision=fp64,
checkpoints at the same steps, its dump in REF64/trajectory): lintrain's and fla's errors against
it are printed, and a figure also passes when lintrain's error is at most twice fla's (lintrain
as accurate as fla at that precision). Exit status 0 when every figure passes, 1 otherwise, 2 on
bad input.

--curve N replays long runs (a night config's first thousands of steps) with fla's own Triton
kernels on a GPU, as fla's users train (the pure-torch definitions on the CPU): no figure is gated; every N steps it prints the window's mean loss
of fla and of lintrain and fla's accuracy on the answer tokens of the batches it trained on, so
the two learning curves can be laid side by side (--report keeps every step's figures).
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fla_equivalence import build_model, patch_fla, patch_instances  # noqa: E402


def lintrain_lr(train, step):
    """engine/optim/schedule.cpp's lr_at: step is 0-based."""
    lr, warmup, total = train["lr"], train["warmup_steps"], train["steps"]
    if step < warmup:
        return lr * (step + 1) / warmup
    if train["lr_decay"] == "constant":
        return lr
    span = total - warmup
    progress = 1.0 if span <= 0 else min(max((step - warmup) / span, 0.0), 1.0)
    lo = train["min_lr_ratio"] * lr
    if train["lr_decay"] == "cosine":
        return lr - (lr - lo) * 0.5 * (1.0 - math.cos(math.pi * progress))
    return lr - (lr - lo) * progress


def rel_err(ours, ref):
    ours = ours.double().to(ref.device)
    denom = ref.abs().max().item()
    err = (ours - ref).abs().max().item()
    return err / denom if denom > 0 else err


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class Replay:
    """fla's model + torch.optim.AdamW on the dumped batches, one step at a time."""

    def __init__(self, args, dump, dtype, train, decay, autocast, split_rows, quiet):
        from safetensors.torch import load_file
        self.args, self.train, self.autocast, self.split_rows = args, train, autocast, split_rows
        torch.manual_seed(0)
        model, cfg = build_model(os.path.join(dump, "config.json"))
        patch_instances(model)
        weights = load_file(os.path.join(dump, "init.safetensors"))
        model = model.to(dtype)  # before the load, which copies into the existing tensors' dtype
        missing, unexpected = model.load_state_dict({k: v.to(dtype) for k, v in weights.items()}, strict=False)
        tied = cfg.get("tie_word_embeddings", False)
        missing = [m for m in missing if not (tied and m == "lm_head.weight")]
        if missing or unexpected:
            raise ValueError(f"state_dict mismatch: missing {missing}, unexpected {unexpected}")
        self.model = model.to(args.device)
        self.model.train()
        params = dict(self.model.named_parameters())  # tied: the embedding once
        self.named = {n: p for n, p in params.items() if n in weights}
        decayed = [self.named[n] for n in decay["decay"] if n in self.named]
        plain = [self.named[n] for n in decay["no_decay"] if n in self.named]
        if len(decayed) + len(plain) != len(self.named):
            raise ValueError("decay.json does not cover every parameter")
        if not quiet:
            by_rule = {n for n, p in self.named.items() if p.dim() >= 2}
            ours = set(n for n in decay["decay"] if n in self.named)
            print(f"weight decay {train['weight_decay']} on {len(decayed)} tensors, none on {len(plain)}")
            for n in sorted(by_rule - ours):
                print(f"  not decayed though >= 2-D: {n}")
            for n in sorted(ours - by_rule):
                print(f"  decayed though < 2-D: {n}")
        self.opt = torch.optim.AdamW(
            [{"params": decayed, "weight_decay": train["weight_decay"]}, {"params": plain, "weight_decay": 0.0}],
            lr=train["lr"], betas=(train["beta1"], train["beta2"]), eps=train["eps"], foreach=False)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: lintrain_lr(train, s) / train["lr"])

    def step(self, tok, tgt, skipped):
        """One step on micro-batches tok, tgt [A, B, T]; returns (loss, grad norm, lr).
        self.correct / self.valid: the step's answer tokens fla predicted (argmax) / all of them."""
        self.opt.zero_grad(set_to_none=False)
        valid = int((tgt != -100).sum().item())
        self.valid, self.correct = valid, 0
        loss_sum = 0.0
        for a in range(tok.shape[0]):
            rows = tok.shape[1]
            parts = [(0, rows // 2), (rows // 2, rows)] if self.split_rows and rows > 1 else [(0, rows)]
            for lo, hi in parts:
                with torch.autocast(device_type=self.args.device.split(":")[0], dtype=torch.bfloat16,
                                    enabled=self.autocast):
                    logits = self.model(input_ids=tok[a, lo:hi], use_cache=False).logits
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]) if self.autocast else
                                       logits.reshape(-1, logits.shape[-1]), tgt[a, lo:hi].reshape(-1),
                                       ignore_index=-100, reduction="sum") / max(valid, 1)
                loss.backward()
                loss_sum += loss.item()
                self.correct += int(((logits.argmax(-1) == tgt[a, lo:hi]) & (tgt[a, lo:hi] != -100)).sum().item())
        grads = [p for p in self.named.values() if p.grad is not None]
        max_norm = self.train["max_grad_norm"]
        if max_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(grads, max_norm).item()
        else:
            norm = torch.norm(torch.stack([g.grad.detach().norm() for g in grads])).item()
        lr_now = self.opt.param_groups[0]["lr"]
        if not skipped:
            self.opt.step()
        self.sched.step()
        return loss_sum, norm, lr_now

    def state(self):
        """{name: param}, {"m."/"v." + name: moment} (detached)."""
        params = {n: p.detach() for n, p in self.named.items()}
        moments = {}
        for n, p in self.named.items():
            st = self.opt.state.get(p, {})
            if "exp_avg" in st:
                moments["m." + n] = st["exp_avg"]
                moments["v." + n] = st["exp_avg_sq"]
        return params, moments


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump", help="the folder of trainer --dump-trajectory")
    ap.add_argument("run", help="the run's output folder (its step-N checkpoints are compared)")
    ap.add_argument("--device", default="cpu", help="where fla's model runs (default cpu)")
    ap.add_argument("--steps", type=int, default=0, help="replay only the first N steps (default: all)")
    ap.add_argument("--gate", type=float, default=0.0, help="relative error gate (default 1e-6 fp64, 1e-4 else)")
    ap.add_argument("--spread", action="store_true",
                    help="also replay with every batch's rows in two halves; pass figures within 2x that spread")
    ap.add_argument("--reference", default="",
                    help="the run folder of the same config in float64 (model.precision=fp64, with --dump-trajectory in "
                         "RUN/trajectory and checkpoints at the same steps): lintrain's and fla's errors against it are "
                         "reported, and a figure also passes when lintrain's error is at most twice fla's")
    ap.add_argument("--report", default="", help="write every step's figures here as JSON lines")
    ap.add_argument("--curve", type=int, default=0, metavar="N",
                    help="fla's own Triton kernels, no gate: print both learning curves every N steps")
    args = ap.parse_args()
    from safetensors.torch import load_file

    need = ["config.json", "run.json", "decay.json", "init.safetensors", "batches.safetensors", "steps.jsonl"]
    for n in need:
        if not os.path.exists(os.path.join(args.dump, n)):
            print(f"fla_trajectory: missing {os.path.join(args.dump, n)} (written by trainer --dump-trajectory)",
                  file=sys.stderr)
            return 2
    if not os.path.isdir(args.run):
        print(f"fla_trajectory: no run folder {args.run}", file=sys.stderr)
        return 2
    with open(os.path.join(args.dump, "run.json")) as f:
        run = json.load(f)
    with open(os.path.join(args.dump, "decay.json")) as f:
        decay = json.load(f)
    train = run["train"]
    precision = run["model"]["precision"]
    dtype = torch.float64 if precision == "fp64" else torch.float32
    gate = args.gate or (1e-6 if precision == "fp64" else 1e-4)
    autocast = precision == "bf16"

    if args.curve > 0 and (args.spread or args.reference):
        print("fla_trajectory: --curve takes neither --spread nor --reference", file=sys.stderr)
        return 2
    if args.curve > 0 and args.device.startswith("cuda"):
        import fla  # noqa: F401  (registers the models; Triton kernels kept)
    else:
        patch_fla()  # also --curve on the CPU, where Triton does not run
    try:
        ref = Replay(args, args.dump, dtype, train, decay, autocast, split_rows=False, quiet=False)
        alt = Replay(args, args.dump, dtype, train, decay, autocast, split_rows=True, quiet=True) if args.spread else None
    except ValueError as e:
        print(f"fla_trajectory: {e}", file=sys.stderr)
        return 2

    batches = load_file(os.path.join(args.dump, "batches.safetensors"))
    tokens, targets, step_ids = batches["tokens"].long(), batches["targets"].long(), batches["steps"].tolist()
    results = {r["step"]: r for r in read_jsonl(os.path.join(args.dump, "steps.jsonl"))}
    first = int(step_ids[0]) if step_ids else 1
    if first != 1:
        print(f"fla_trajectory: the dump starts at step {first}: replay needs a run from step 1", file=sys.stderr)
        return 2
    n_steps = len(step_ids) if args.steps <= 0 else min(args.steps, len(step_ids))
    report = open(args.report, "w") if args.report else None

    ref64 = None
    if args.reference:
        steps64 = os.path.join(args.reference, "trajectory", "steps.jsonl")
        if not os.path.exists(steps64):
            print(f"fla_trajectory: no {steps64} (run the reference with --dump-trajectory REF/trajectory)", file=sys.stderr)
            return 2
        ref64 = {r["step"]: r for r in read_jsonl(steps64)}

    kinds = ("loss", "grad_norm", "lr", "params", "moments")
    # Against the float64 reference: lintrain's worst error and fla's (the same figure of each).
    vs64 = {k: [0.0, 0.0] for k in ("loss", "grad_norm", "params", "moments")}
    worst = {k: 0.0 for k in kinds}
    spread = {k: 0.0 for k in kinds}
    worst_at = {}
    checked = []
    window = []  # --curve: the rows since the last print

    def note(kind, err, where, table=worst):
        if not (err <= table[kind]):  # NaN counts as worst
            table[kind] = err if not math.isnan(err) else math.inf
            if table is worst:
                worst_at[kind] = where

    def rel(a, b):
        return abs(a - b) / max(abs(b), 1e-300)

    for i in range(n_steps):
        step = int(step_ids[i])
        ours = results.get(step)
        if ours is None:
            print(f"fla_trajectory: steps.jsonl has no step {step}", file=sys.stderr)
            return 2
        tok, tgt = tokens[i].to(args.device), targets[i].to(args.device)
        loss, norm, lr_now = ref.step(tok, tgt, ours["skipped"])
        e_loss, e_norm, e_lr = rel(ours["loss"], loss), rel(ours["grad_norm"], norm), rel(ours["lr"], lr_now)
        note("loss", e_loss, step)
        note("grad_norm", e_norm, step)
        note("lr", e_lr, step)
        if ref64 is not None and step in ref64:
            for k, theirs in (("loss", loss), ("grad_norm", norm)):
                r = ref64[step][k]
                vs64[k][0] = max(vs64[k][0], rel(ours[k], r))
                vs64[k][1] = max(vs64[k][1], rel(theirs, r))
        row = {"step": step, "loss": loss, "loss_lintrain": ours["loss"], "grad_norm": norm,
               "grad_norm_lintrain": ours["grad_norm"], "lr": lr_now, "rel_loss": e_loss, "rel_grad_norm": e_norm}
        if alt:
            loss_b, norm_b, _ = alt.step(tok, tgt, ours["skipped"])
            note("loss", rel(loss_b, loss), step, spread)
            note("grad_norm", rel(norm_b, norm), step, spread)
            row["spread_loss"], row["spread_grad_norm"] = rel(loss_b, loss), rel(norm_b, norm)

        ck = os.path.join(args.run, f"step-{step:08d}")
        if os.path.isdir(ck):
            mine = load_file(os.path.join(ck, "model.safetensors"))
            state = load_file(os.path.join(ck, "state.safetensors"))
            params, moments = ref.state()
            e_p = max(rel_err(mine[n], p) for n, p in params.items())
            e_m = max((rel_err(state[n], m) for n, m in moments.items()), default=0.0)
            for n, p in params.items():
                note("params", rel_err(mine[n], p), f"{n} @ {step}")
            for n, m in moments.items():
                note("moments", rel_err(state[n], m), f"{n} @ {step}")
            row["rel_params"], row["rel_moments"] = e_p, e_m
            ck64 = os.path.join(args.reference, f"step-{step:08d}") if ref64 is not None else ""
            if ck64 and os.path.isdir(ck64):
                mine64 = load_file(os.path.join(ck64, "model.safetensors"))
                state64 = load_file(os.path.join(ck64, "state.safetensors"))
                for n, p in params.items():
                    r = mine64[n].double().to(p.device)
                    vs64["params"][0] = max(vs64["params"][0], rel_err(mine[n], r))
                    vs64["params"][1] = max(vs64["params"][1], rel_err(p, r))
                for n, m in moments.items():
                    r = state64[n].double().to(m.device)
                    vs64["moments"][0] = max(vs64["moments"][0], rel_err(state[n], r))
                    vs64["moments"][1] = max(vs64["moments"][1], rel_err(m, r))
            line = (f"step {step:6d}: loss {loss:.10f} (rel {e_loss:.2e}), grad norm rel {e_norm:.2e}, "
                    f"params rel {e_p:.2e}, moments rel {e_m:.2e}")
            if alt:
                params_b, moments_b = alt.state()
                s_p = max(rel_err(params_b[n], p) for n, p in params.items())
                s_m = max((rel_err(moments_b[n], m) for n, m in moments.items()), default=0.0)
                note("params", s_p, step, spread)
                note("moments", s_m, step, spread)
                row["spread_params"], row["spread_moments"] = s_p, s_m
                line += f"; spread params {s_p:.2e}, moments {s_m:.2e}"
            checked.append(step)
            print(line)
        row["correct"], row["answers"] = ref.correct, ref.valid
        if report:
            report.write(json.dumps(row) + "\n")
        if args.curve > 0:
            window.append(row)
            if len(window) == args.curve or i == n_steps - 1:
                mean = lambda k: sum(r[k] for r in window) / len(window)  # noqa: E731
                acc = sum(r["correct"] for r in window) / max(sum(r["answers"] for r in window), 1)
                print(f"steps {window[0]['step']:6d}-{step:6d}: loss fla {mean('loss'):.4f} lintrain "
                      f"{mean('loss_lintrain'):.4f}; fla's answer accuracy {acc:.4f}", flush=True)
                window = []
    if report:
        report.close()
    if args.curve > 0:
        how = "fla's Triton kernels" if args.device.startswith("cuda") else "the pure-torch definitions"
        print(f"{n_steps} steps replayed with {how} ({precision}); no figure gated")
        return 0

    ok = True
    print(f"{n_steps} steps replayed, checkpoints compared at steps {checked or 'none'}")
    for k in kinds:
        as_accurate = ref64 is not None and k in vs64 and vs64[k][0] <= 2 * vs64[k][1]
        passed = worst[k] <= gate or (alt is not None and worst[k] <= 2 * spread[k]) or as_accurate
        ok = ok and passed
        extra = f"  (spread of two replays {spread[k]:.3e})" if alt else ""
        if ref64 is not None and k in vs64:
            extra += f"  (against float64: lintrain {vs64[k][0]:.3e}, fla {vs64[k][1]:.3e})"
        print(f"  worst {k:10s} rel {worst[k]:.3e}  {'ok' if passed else 'FAIL'}  {worst_at.get(k, '')}{extra}")
    if not checked:
        print("  no checkpoint of the run falls in the replayed steps: parameters were not compared")
        ok = False
    rules = f"gate {gate:.0e}" + (", or within 2x the spread" if alt else "")
    rules += ", or lintrain's error against float64 at most 2x fla's" if ref64 is not None else ""
    print(f"{'PASS' if ok else 'FAIL'} ({rules})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
