#!/usr/bin/env python3
"""Peer side of `kbench step`: one full training step of fla's KDAForCausalLM / RWKV6ForCausalLM.

This is OUR script. It imports fla from PYTHONPATH (docs/PEER.md: fla's `fla/` package copied to
.peer/fla-src, never committed) and copies none of its code.

Model (shared/TARGETS.md, "Depth-2 language model, one training step"): d_model 768, 2 blocks,
12 heads x 64, vocab 32000; KDAConfig(hidden_size=768, num_heads=12, head_dim=64,
num_hidden_layers=2), RWKV6Config(hidden_size=768, num_heads=12, expand_k=1, expand_v=1,
num_hidden_layers=2); every other setting is fla's default (the full config is in the JSON).
Batch B x T random token ids (uniform in [0, vocab), never zeros): inputs tokens[:, :-1], targets
tokens[:, 1:] of one [B, T+1] draw.

One step = zero_grad(set_to_none) ; logits = model(input_ids).logits ;
loss = F.cross_entropy(logits.view(-1, V), targets.view(-1)) (mean over B*T, computed here as
shared/math/fla-reference.md says, on the logits in the model's dtype; --loss torch-fp32 upcasts
first, --loss fla-fused-linear uses fla's FusedLinearCrossEntropyLoss on the last hidden state) ;
loss.backward() ; torch.nn.utils.clip_grad_norm_(params, 1.0) ; torch.optim.AdamW(lr 1e-4,
betas (0.9, 0.95), eps 1e-8, weight_decay 0.1, fused=True when it can be built).
Precision: bf16 = model.to(bfloat16), so weights, gradients and AdamW state are bf16 (TARGETS.md:
"fla's run keeps weights and AdamW state in bf16"); fp32 = everything fp32 with PyTorch matmuls in
full fp32 (fla's Triton kernels still use TF32 inside, fla-reference.md); tf32 = fp32 with
torch.set_float32_matmul_precision("high").

Measured per case (arch x precision), after a first step (compile + autotune, timed apart):
  ms/step       CUDA events around each of --steps steps, no host sync inside the timed loop
                (as kbench step times itself); median / p10 / p90 / mean / min.
  sync ms/step  the same steps with torch.cuda.synchronize() after each (host wall, perf_counter).
  launches      CUDA kernels of one step from torch.profiler (memcpy/memset counted apart).
  GPU-only      sum of the device-event durations (kernels, memcpy, memset) of one step (profiler,
                median over --prof-steps steps), and the span first-kernel-start to
                last-kernel-end (under the profiler, whose host overhead widens the gaps).
  graph         (--graph) median of CUDA-graph replays of the whole step (a second AdamW with
                capturable=True; failures are reported, never hidden). On the H200 (fla bc3b101d)
                RWKV6 bf16 captures, KDA bf16 does not (the capture is invalidated). A failed
                capture can leave memory behind that inflates the next cases' memory figures:
                take memory figures from a run without --graph.
  memory        torch.cuda.max_memory_allocated / max_memory_reserved over the timed steps
                (empty_cache before the warm-up, peak stats reset after it); weights, grads and
                optimizer state bytes; activation = peak allocated - (weights + grads + state).
Each case is one JSON line in --out, written when it finishes; skipped cases are written too.

Triton: the first step of a fresh machine compiles and autotunes every fla kernel (minutes:
fla-reference.md "Time"). --fast-autotune makes each Triton autotuner stop at the first config
that compiles and runs (its timing is taken, the other configs are not compiled); results
already in the on-disk autotune cache are still used, and fast results are NOT written to the
disk cache (so a carried cache never holds them). Figures taken with it may be slower than fully
tuned ones: the JSON says how many tunings were fast-stopped.
--cache-in / --cache-out / --pack-only handle TRITON_CACHE_DIR (/tmp/triton-cache) as
fla_mixer_bench.py does (same tgz format; use the same path: Triton's index files hold absolute
paths).

Needs no torch for --help or --pack-only.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

T_START = time.time()
ARCHS = ("kda", "rwkv6")
PRECISIONS = ("bf16", "fp32", "tf32")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())} +{time.time() - T_START:6.1f}s] {msg}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", action="append", choices=ARCHS, help="repeatable; default: kda and rwkv6")
    p.add_argument("--precision", action="append", choices=PRECISIONS, help="repeatable; default: bf16 and fp32")
    p.add_argument("--B", type=int, default=8)
    p.add_argument("--T", type=int, default=512)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64, help="KDA head_dim (RWKV6: d / heads with expand_k = 1)")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="steps after the first one, before timing")
    p.add_argument("--prof-steps", type=int, default=3, help="profiled steps for the GPU-only time")
    p.add_argument("--graph", action="store_true", help="also time CUDA-graph replay of the whole step")
    p.add_argument("--loss", choices=("torch", "torch-fp32", "fla-fused-linear"), default="torch")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fast-autotune", action="store_true",
                   help="each Triton autotuner takes the first config that compiles (not written to disk)")
    p.add_argument("--out", default=None, help="JSON-lines output (appended)")
    p.add_argument("--resume", action="store_true", help="skip cases already ok/error in --out")
    p.add_argument("--deadline-epoch", type=float, default=None, help="absolute deadline (unix seconds)")
    p.add_argument("--est-first-s", type=float, default=None,
                   help="time a case is assumed to need (default 60 with --fast-autotune, else 330)")
    p.add_argument("--cache-in", default=None, help="tar.gz to unpack into TRITON_CACHE_DIR first")
    p.add_argument("--cache-out", default=None, help="pack TRITON_CACHE_DIR as tar.gz here at the end")
    p.add_argument("--pack-only", action="store_true", help="only pack TRITON_CACHE_DIR into --cache-out and exit")
    p.add_argument("--cache-max-bytes", type=int, default=16_000_000)
    a = p.parse_args(argv)
    a.arch = a.arch or list(ARCHS)
    a.precision = a.precision or ["bf16", "fp32"]
    if a.est_first_s is None:
        a.est_first_s = 60.0 if a.fast_autotune else 330.0
    if a.pack_only and not a.cache_out:
        p.error("--pack-only needs --cache-out")
    if not a.pack_only and not a.out:
        p.error("--out is required")
    return a


# ---------------------------------------------------------------- Triton cache
from triton_cache import cache_dir, pack_cache, unpack_cache  # noqa: E402  (scripts/peer/triton_cache.py)


# ---------------------------------------------------------------- autotune hooks
AUTOTUNE_EVENTS = []


def install_autotune_hooks(fast):
    """Wrap (not copy) Triton's Autotuner: record each tuning (disk-cache hit or not, seconds) and, when
    `fast`, stop each tuning at the first config whose benchmark is finite; fast results are kept out of
    the on-disk autotune cache. Returns a dict describing what was installed."""
    info = {"instrumented": False, "fast": fast, "fast_installed": False, "disk_write_blocked": False}
    try:
        from triton.runtime import autotuner as at
    except Exception as e:
        info["error"] = f"{type(e).__name__}: {e}"
        return info
    A = at.Autotuner
    orig_run, orig_bench = A.run, A._bench
    orig_check = getattr(A, "check_disk_cache", None)

    def run(self, *args, **kwargs):
        n, t0 = len(self.cache), time.time()
        self._lt_found, self._lt_disk, self._lt_benched, self._lt_skipped = False, None, 0, 0
        try:
            return orig_run(self, *args, **kwargs)
        finally:
            if len(self.cache) > n:
                AUTOTUNE_EVENTS.append({"fn": self.base_fn.__name__, "disk_hit": bool(self._lt_disk),
                                        "benched": self._lt_benched, "fast_skipped": self._lt_skipped,
                                        "s": time.time() - t0})

    def bench(self, *args, config, **meta):
        if fast and getattr(self, "_lt_found", False):
            self._lt_skipped = getattr(self, "_lt_skipped", 0) + 1
            return [float("inf")] * 3
        r = orig_bench(self, *args, config=config, **meta)
        self._lt_benched = getattr(self, "_lt_benched", 0) + 1
        first = r[0] if isinstance(r, (list, tuple)) else r
        if fast and first is not None and math.isfinite(first):
            self._lt_found = True
        return r

    A.run, A._bench = run, bench
    info["instrumented"] = True
    info["fast_installed"] = fast
    if orig_check is not None:
        def check(self, *args, **kwargs):
            hit = orig_check(self, *args, **kwargs)
            self._lt_disk = hit
            return hit
        A.check_disk_cache = check
    if fast and hasattr(at, "get_cache_manager"):
        orig_gcm = at.get_cache_manager

        class NoAutotunePut:
            def __init__(self, m):
                self._m = m

            def __getattr__(self, name):
                return getattr(self._m, name)

            def put(self, data, filename, *a, **k):
                if str(filename).endswith(".autotune.json"):
                    return None
                return self._m.put(data, filename, *a, **k)

        at.get_cache_manager = lambda key, *a, **k: NoAutotunePut(orig_gcm(key, *a, **k))
        info["disk_write_blocked"] = True
    elif fast:
        # no hook on the cache writer: keep fast results off the disk by not using the disk cache at all
        def run_nocache(self, *args, **kwargs):
            self.cache_results = False
            return run(self, *args, **kwargs)
        A.run = run_nocache
        info["disk_write_blocked"] = "cache_results disabled"
    return info


def autotune_summary(events):
    return {"tunings": len(events), "disk_hits": sum(e["disk_hit"] for e in events),
            "fast_stopped": sum(e["fast_skipped"] > 0 for e in events),
            "configs_benched": sum(e["benched"] for e in events),
            "tune_s": round(sum(e["s"] for e in events), 2),
            "slowest": [[e["fn"], round(e["s"], 2)] for e in sorted(events, key=lambda e: -e["s"])[:5]]}


# ---------------------------------------------------------------- profiler helpers
def cuda_events(prof, torch):
    """[(name, start_us, dur_us)] of device-side events (kernels, memcpy, memset), sorted by start.
    GPU-side user annotations (record_function ranges such as "Optimizer.step#AdamW.step", which the
    profiler also puts on the device timeline) are not kernels and are left out."""
    def annotation(e, name):
        return bool(getattr(e, "is_user_annotation", False)) or "#" in name or name.startswith("ProfilerStep")

    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and not annotation(e, e.name):
            out.append((e.name, e.time_range.start, e.time_range.elapsed_us()))
    if not out:  # fall back to raw kineto events
        for e in prof.profiler.kineto_results.events():
            if e.device_type() == torch.autograd.DeviceType.CUDA and not annotation(e, e.name()):
                out.append((e.name(), e.start_ns() / 1e3, e.duration_ns() / 1e3))
    out.sort(key=lambda x: x[1])
    return out


def is_copy(name):
    return name.startswith("Memcpy") or name.startswith("Memset")


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    i = q * (len(xs) - 1)
    lo, hi = math.floor(i), math.ceil(i)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


def stats(xs):
    return {"median_ms": statistics.median(xs), "p10_ms": pct(xs, 0.1), "p90_ms": pct(xs, 0.9),
            "mean_ms": statistics.fmean(xs), "min_ms": min(xs), "n": len(xs)}


# ---------------------------------------------------------------- one case
def fla_config(arch, a):
    from fla.models import KDAConfig, RWKV6Config
    common = dict(hidden_size=a.d, num_heads=a.heads, num_hidden_layers=a.layers, vocab_size=a.vocab)
    if arch == "kda":
        return KDAConfig(head_dim=a.head_dim, **common)
    return RWKV6Config(expand_k=1.0, expand_v=1.0, **common)


def run_case(arch, prec, a, torch):
    import torch.nn.functional as F
    from fla.models import KDAForCausalLM, RWKV6ForCausalLM

    rec = {"kind": "case", "case": f"{arch}:{prec}", "arch": arch, "precision": prec, "B": a.B, "T": a.T,
           "d": a.d, "layers": a.layers, "heads": a.heads, "head_dim": a.head_dim, "vocab": a.vocab,
           "loss_impl": a.loss, "fast_autotune": a.fast_autotune}
    dtype = torch.bfloat16 if prec == "bf16" else torch.float32
    torch.set_float32_matmul_precision("high" if prec == "tf32" else "highest")
    rec["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    dev = torch.device("cuda")
    # should be ~0: anything here is left over from an earlier case (e.g. a failed --graph capture)
    rec["allocated_at_case_start_bytes"] = torch.cuda.memory_allocated()
    rec["reserved_at_case_start_bytes"] = torch.cuda.memory_reserved()

    cfg = fla_config(arch, a)
    rec["fla_config"] = json.loads(cfg.to_json_string(use_diff=False))
    torch.manual_seed(a.seed)
    model = (KDAForCausalLM if arch == "kda" else RWKV6ForCausalLM)(cfg)
    model = model.to(device=dev, dtype=dtype)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    rec["params"] = sum(p.numel() for p in params)
    rec["weights_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    rec["param_dtypes"] = sorted({str(p.dtype) for p in model.parameters()})

    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed + 1)
    tokens = torch.randint(0, a.vocab, (a.B, a.T + 1), generator=gen, device=dev)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    V = a.vocab

    def make_opt(**extra):
        kw = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **extra)
        try:
            return torch.optim.AdamW(params, fused=True, **kw), "AdamW(fused=True)"
        except Exception as e:  # e.g. a dtype the fused kernel refuses
            return torch.optim.AdamW(params, foreach=True, **kw), f"AdamW(foreach=True) [fused failed: {e}]"

    opt, rec["optimizer"] = make_opt()
    criterion = None
    if a.loss == "fla-fused-linear":
        from fla.modules import FusedLinearCrossEntropyLoss
        criterion = FusedLinearCrossEntropyLoss()

    def loss_of():
        if criterion is not None:
            h = model.model(input_ids=x, use_cache=False)[0]
            return criterion(h, y, model.lm_head.weight, model.lm_head.bias)
        logits = model(input_ids=x, use_cache=False).logits
        if a.loss == "torch-fp32":
            logits = logits.float()
        return F.cross_entropy(logits.view(-1, V), y.view(-1))

    def step(o=opt, zero=True):
        if zero:
            o.zero_grad(set_to_none=True)
        loss = loss_of()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        o.step()
        return loss, norm

    # 1. first step: compile + autotune (or cache loads)
    n_ev = len(AUTOTUNE_EVENTS)
    log(f"{arch} {prec}: {rec['params'] / 1e6:.1f}M params; first step (compile + autotune)")
    t0 = time.time()
    loss, norm = step()
    torch.cuda.synchronize()
    rec["first_step_s"] = round(time.time() - t0, 2)
    rec["autotune"] = autotune_summary(AUTOTUNE_EVENTS[n_ev:])
    rec["loss_first"] = float(loss.item())
    rec["grad_norm_first"] = float(norm.item())
    log(f"{arch} {prec}: first step {rec['first_step_s']} s, loss {rec['loss_first']:.4f}, "
        f"tunings {rec['autotune']['tunings']} (disk {rec['autotune']['disk_hits']}, "
        f"fast-stopped {rec['autotune']['fast_stopped']})")

    # 2. warm-up from an emptied cache, then the timed steps (peak memory over the timed steps)
    torch.cuda.empty_cache()
    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    n_ev2 = len(AUTOTUNE_EVENTS)
    torch.cuda.reset_peak_memory_stats()
    rec["allocated_before_timed_bytes"] = torch.cuda.memory_allocated()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(a.steps)]
    for e0, e1 in evs:
        e0.record()
        step()
        e1.record()
    torch.cuda.synchronize()
    rec["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    rec["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    rec["step"] = stats([e0.elapsed_time(e1) for e0, e1 in evs])
    rec["tokens_per_s"] = a.B * a.T / (rec["step"]["median_ms"] * 1e-3)
    rec["tflops_6n"] = 6.0 * rec["params"] * rec["tokens_per_s"] / 1e12
    log(f"{arch} {prec}: {rec['step']['median_ms']:.3f} ms/step (p10 {rec['step']['p10_ms']:.3f}, "
        f"p90 {rec['step']['p90_ms']:.3f}), {rec['tokens_per_s'] / 1e3:.1f}k tok/s")

    walls = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e3)
    rec["sync_step"] = stats(walls)
    rec["retuned_after_first_step"] = len(AUTOTUNE_EVENTS) - n_ev2

    # 3. memory accounting (grads exist after a step; zero_grad(set_to_none) runs at the next step's start)
    rec["grads_bytes"] = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    rec["optimizer_state_bytes"] = sum(v.numel() * v.element_size() for st in opt.state.values()
                                       for v in st.values() if torch.is_tensor(v))
    rec["activation_bytes"] = rec["peak_allocated_bytes"] - (rec["weights_bytes"] + rec["grads_bytes"]
                                                              + rec["optimizer_state_bytes"])

    # 4. launches and GPU-only time from the profiler
    try:
        from torch.profiler import ProfilerActivity, profile

        def prof_steps(n):
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(n):
                    step()
                torch.cuda.synchronize()
            return cuda_events(prof, torch)

        one = prof_steps(1)
        rec["launches_per_step"] = sum(not is_copy(n) for n, _, _ in one)
        rec["copies_per_step"] = sum(is_copy(n) for n, _, _ in one)
        by_name = {}
        for n, _, d in one:
            c, t = by_name.get(n, (0, 0.0))
            by_name[n] = (c + 1, t + d)
        rec["kernels"] = [[n[:120], c, round(t, 1)] for n, (c, t) in
                          sorted(by_name.items(), key=lambda kv: -kv[1][1])]
        many = prof_steps(a.prof_steps)
        k = len(one)
        if k and len(many) == k * a.prof_steps:
            parts = [many[i * k:(i + 1) * k] for i in range(a.prof_steps)]
            rec["gpu_only_ms"] = statistics.median(sum(d for _, _, d in p) for p in parts) / 1e3
            rec["gpu_span_ms"] = statistics.median(p[-1][1] + p[-1][2] - p[0][1] for p in parts) / 1e3
            rec["gpu_only_note"] = f"median over {a.prof_steps} profiled steps"
        else:
            rec["gpu_only_ms"] = sum(d for _, _, d in many) / max(1, a.prof_steps) / 1e3
            rec["gpu_span_ms"] = None
            rec["gpu_only_note"] = (f"mean over {a.prof_steps} profiled steps (device events {len(many)} != "
                                    f"{a.prof_steps} x {k})")
        log(f"{arch} {prec}: {rec['launches_per_step']} launches/step (+{rec['copies_per_step']} copies), "
            f"GPU-only {rec['gpu_only_ms']:.3f} ms")
    except Exception as e:
        rec["profiler_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        log(f"{arch} {prec}: profiler failed: {rec['profiler_error']}")

    loss, norm = step()
    rec["loss_last"] = float(loss.item())
    rec["grad_norm_last"] = float(norm.item())
    rec["finite"] = math.isfinite(rec["loss_last"]) and all(bool(torch.isfinite(p).all()) for p in params)
    rec["steps_taken"] = 1 + a.warmup + 2 * a.steps + (1 + a.prof_steps) * ("profiler_error" not in rec) + 1

    # 5. optional CUDA graph of the whole step
    if a.graph:
        rec["graph_step_ms"], rec["graph_error"] = None, None
        try:
            gopt, rec["graph_optimizer"] = make_opt(capturable=True)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    step(gopt)
            torch.cuda.current_stream().wait_stream(s)
            gopt.zero_grad(set_to_none=True)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                step(gopt, zero=False)
            g.replay()
            torch.cuda.synchronize()
            ts = []
            for _ in range(a.steps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                g.replay()
                e1.record()
                ts.append((e0, e1))
            torch.cuda.synchronize()
            rec["graph_step"] = stats([e0.elapsed_time(e1) for e0, e1 in ts])
            rec["graph_step_ms"] = rec["graph_step"]["median_ms"]
            log(f"{arch} {prec}: CUDA graph {rec['graph_step_ms']:.3f} ms/step")
            del g, gopt
        except Exception as e:
            rec["graph_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            log(f"{arch} {prec}: graph failed: {rec['graph_error']}")
            try:
                torch.cuda.synchronize()
            except Exception:
                rec["cuda_broken"] = True
    del model, opt
    return rec


# ---------------------------------------------------------------- main
def env_record(torch, hooks, cache_in):
    import triton
    import fla
    rec = {"kind": "env", "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
           "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "python": sys.version.split()[0], "fla_version": fla.__version__,
           "fla_path": os.path.dirname(fla.__file__), "triton_cache_dir": cache_dir(), "cache_in": cache_in,
           "autotune_hooks": hooks, "argv": sys.argv[1:],
           "env": {k: os.environ.get(k) for k in ("TRITON_F32_DEFAULT", "FLA_CACHE_RESULTS", "FLA_CACHE_MODE",
                                                  "TORCHINDUCTOR_CACHE_DIR", "CUDA_VISIBLE_DEVICES")}}
    try:
        import transformers
        rec["transformers"] = transformers.__version__
    except Exception:
        pass
    commit_file = os.path.join(os.path.dirname(os.path.dirname(fla.__file__)), "FLA_COMMIT")
    rec["fla_commit"] = open(commit_file).read().strip() if os.path.exists(commit_file) else None
    return rec


def main(argv=None):
    a = parse_args(argv)
    if a.pack_only:
        print(json.dumps({"kind": "cache", **pack_cache(a.cache_out, a.cache_max_bytes)}), flush=True)
        return 0
    deadline = a.deadline_epoch if a.deadline_epoch is not None else float("inf")
    cache_in = unpack_cache(a.cache_in)  # before torch/triton are imported
    log(f"cache: {cache_in}")
    log("importing torch, triton, fla (fla takes ~18 s)")
    import torch
    import fla  # noqa: F401  (registers the models with transformers)
    hooks = install_autotune_hooks(a.fast_autotune)
    log(f"imports done; autotune hooks {hooks}")

    done = set()
    if a.resume and os.path.exists(a.out):
        for line in open(a.out):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "case" and r.get("status") in ("ok", "error"):
                done.add(r["case"])
    out = open(a.out, "a")

    def emit(r):
        out.write(json.dumps(r) + "\n")
        out.flush()

    emit(env_record(torch, hooks, cache_in))
    rows, rc = [], 0
    for prec in a.precision:
        for arch in a.arch:
            name = f"{arch}:{prec}"
            if name in done:
                log(f"[skip] {name}: already in {a.out}")
                continue
            left = deadline - time.time()
            if left < a.est_first_s:
                r = {"kind": "case", "case": name, "arch": arch, "precision": prec, "status": "skipped",
                     "why": f"deadline: {left:.0f} s left < {a.est_first_s:.0f} s estimate"}
                emit(r)
                rows.append(r)
                log(f"[skip] {name}: {r['why']}")
                continue
            t0 = time.time()
            try:
                r = run_case(arch, prec, a, torch)
                r["status"] = "ok"
            except Exception as e:
                import traceback
                traceback.print_exc()
                r = {"kind": "case", "case": name, "arch": arch, "precision": prec, "status": "error",
                     "error": f"{type(e).__name__}: {str(e)[:500]}"}
            r["case_wall_s"] = round(time.time() - t0, 1)
            emit(r)
            rows.append(r)
            log(f"[case] {name} {r['status']} in {r['case_wall_s']} s")
            broken = r.get("cuda_broken", False)
            if not broken:
                try:
                    import gc
                    gc.collect()
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                except Exception:
                    broken = True
            if broken:  # rerun with --resume in a fresh process
                log("[fatal] CUDA context unusable; rerun with --resume")
                rc = 3
                break
        if rc:
            break
    if a.cache_out:
        info = {"kind": "cache", **pack_cache(a.cache_out, a.cache_max_bytes)}
        emit(info)
        log(f"cache: {info}")
    summary(rows)
    return rc


def summary(rows):
    MB = 1e6
    print(f"{'case':12} {'ms/step':>8} {'p10':>8} {'p90':>8} {'sync ms':>8} {'gpu ms':>8} {'graph':>8} "
          f"{'tok/s':>9} {'launch':>6} {'peak MB':>8} {'resv MB':>8} {'act MB':>8} {'1st s':>6}")
    for r in rows:
        if r.get("status") != "ok":
            print(f"{r['case']:12} {r.get('status')}: {r.get('why') or r.get('error')}")
            continue

        def f(v, nd=3):
            return "n/a" if v is None else f"{v:.{nd}f}"
        print(f"{r['case']:12} {f(r['step']['median_ms']):>8} {f(r['step']['p10_ms']):>8} "
              f"{f(r['step']['p90_ms']):>8} {f(r['sync_step']['median_ms']):>8} {f(r.get('gpu_only_ms')):>8} "
              f"{f(r.get('graph_step_ms')):>8} {r['tokens_per_s']:9.0f} {str(r.get('launches_per_step')):>6} "
              f"{r['peak_allocated_bytes'] / MB:8.1f} {r['peak_reserved_bytes'] / MB:8.1f} "
              f"{r['activation_bytes'] / MB:8.1f} {r['first_step_s']:6.1f}")
    print(f"total wall {time.time() - T_START:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
