#!/usr/bin/env python3
"""Side-by-side peer harness: time fla's (flash-linear-attention, Triton) token mixers.

This is OUR script. It imports fla from PYTHONPATH (docs/PEER.md: fla's `fla/` package copied to
.peer/fla-src, never committed) and copies none of its code.

For each case (op in {kda, rwkv6}, dtype bf16|fp32, B, T, H, D, chunk, input form) it builds random
leaf inputs with requires_grad, a fixed random dO, and measures:
  fwd_ms, fwdbwd_ms   eager wall time: median of triton.testing.do_bench (it flushes L2 before each
                      iteration, outside the timed region); grads set to None before every iteration
                      (grad_to_none), so every fwd+bwd allocates fresh gradients, as in training.
                      "fwd" is the training forward (grad mode on, saves for backward).
  gpu_fwdbwd_ms       GPU-only time: sum of the CUDA kernel durations of one fwd+bwd from torch.profiler
                      (median over a few profiled iterations after warm-up; no L2 flush between them).
  gpu_span_fwdbwd_ms  first kernel start to last kernel end of that iteration (gaps included).
  graph_fwdbwd_ms     median do_bench time of replaying a CUDA graph of one fwd+bwd, or null + reason.
  launches_fwd / launches_fwdbwd
                      CUDA kernels (memcpy/memset counted apart) in one training fwd and one fwd+bwd,
                      fresh grads (no AccumulateGrad adds): fla's own launches.
  extra_peak_bytes    torch.cuda.max_memory_allocated over one fwd+bwd minus memory_allocated before it
                      (inputs and dO already live; includes o and the new gradients);
  saved_after_fwd_bytes  memory_allocated after the forward minus before (o + tensors kept for backward).
  floors              bytes that must move (inputs read once, o written once; for fwd+bwd also dO read
                      and every gradient written once) over --bw (measured D2D copy rate).

Cases are given as op:dtype:B:T:H:D[:chunk[:form]], e.g. kda:bf16:8:512:12:64:64:pre.
KDA forms:  pre   = g = logsigmoid(randn).clamp(min=-5), beta = sigmoid(randn), q/k L2-norm in kernel
                    (the form TARGETS.md's fla figures were taken with);
            layer = fla's KDA layer call: raw g = randn with A_log = log U(1,16), dt_bias as the layer
                    initialises it (gate in kernel), raw beta = randn (sigmoid in kernel), q/k L2-norm in
                    kernel, state_v_first=True; A_log and dt_bias get gradients too.
RWKV6:      r,k,v randn, w = logsigmoid(randn).clamp(min=-5) (fla's tests use logsigmoid(randn)),
            u = randn(H, D), scale = 1.0 (what fla's RWKV6 model passes).

One JSON object per line goes to --out (flushed after each case); a table is printed at the end.
--deadline-s stops cleanly: a case is started only if its estimated cost fits in the time left.
--cache-in / --cache-out unpack / pack TRITON_CACHE_DIR (tar.gz) so compiles and fla's autotune results
(Triton autotune cache_results) can be reused by a later device call. Use TRITON_CACHE_DIR=/tmp/triton-cache
(the default): Triton's cache index files hold absolute paths.
--precompile-jobs N compiles the cases' kernels in N parallel worker processes first (fla's first KDA
fwd+bwd compile + autotune took > 170 s serially on the H200 machine), then drops the autotune results those
workers wrote and re-tunes in the measuring process on already-compiled kernels.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

T_START = time.time()


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", default=[], help="op:dtype:B:T:H:D[:chunk[:form]]")
    p.add_argument("--out", default=None, help="JSON-lines output file (appended)")
    p.add_argument("--pack-only", action="store_true",
                   help="only pack TRITON_CACHE_DIR into --cache-out (no torch/fla import) and exit")
    p.add_argument("--resume", action="store_true", help="skip cases already present in --out")
    p.add_argument("--deadline-s", type=float, default=1e9, help="wall seconds from script start")
    p.add_argument("--deadline-epoch", type=float, default=None,
                   help="absolute deadline (unix seconds); overrides --deadline-s (survives a --resume rerun)")
    p.add_argument("--est-first-s", type=float, default=75.0,
                   help="time a case is assumed to need when its kernels are not compiled yet")
    p.add_argument("--est-warm-s", type=float, default=40.0,
                   help="time a case needs otherwise (new shapes may re-run fla's autotuning)")
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--rep-ms", type=float, default=100.0)
    p.add_argument("--prof-iters", type=int, default=5)
    p.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph replay measurement")
    p.add_argument("--precompile-jobs", type=int, default=0,
                   help="before measuring, compile every case's kernels in up to N parallel processes (one per "
                        "distinct op/dtype/form/D/chunk), then delete the autotune results they wrote (their "
                        "timings were taken on a shared GPU) so the measuring process re-tunes on compiled kernels")
    p.add_argument("--precompile-max-s", type=float, default=240.0,
                   help="kill precompile workers still running after this many seconds (or near the deadline)")
    p.add_argument("--first-call-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--bw", type=float, default=4.3e12, help="copy bandwidth for the traffic floor, B/s")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache-in", default=None, help="tar.gz to unpack into TRITON_CACHE_DIR first")
    p.add_argument("--cache-out", default=None, help="write TRITON_CACHE_DIR as tar.gz here at the end")
    p.add_argument("--cache-max-bytes", type=int, default=16_000_000)
    a = p.parse_args()
    if not a.pack_only and (not a.cases or not a.out):
        p.error("--cases and --out are required unless --pack-only")
    if a.deadline_epoch is not None:
        a.deadline_s = a.deadline_epoch - T_START
    return a


ARGS = parse_args()
# The Triton cache carried between calls (scripts/peer/triton_cache.py sets TRITON_CACHE_DIR).
from triton_cache import pack_cache, unpack_cache  # noqa: E402

CACHE_DIR = os.environ["TRITON_CACHE_DIR"]


if ARGS.pack_only:
    print(json.dumps({"kind": "cache", **pack_cache(ARGS.cache_out, ARGS.cache_max_bytes)}), flush=True)
    sys.exit(0)
CACHE_IN_INFO = unpack_cache(ARGS.cache_in)

import torch  # noqa: E402  (after TRITON_CACHE_DIR is set)
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

import fla  # noqa: E402
from fla.ops.kda import chunk_kda  # noqa: E402
from fla.ops.rwkv6 import chunk_rwkv6  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
MB = 1e6

# ---------------------------------------------------------------- autotune instrumentation
# Triton 3.6 has no autotuning listener knob, so wrap (not copy) two Autotuner methods to record, per
# tuning, whether the result came from the on-disk cache (cache_results) and how long it took
# (compiling and benchmarking every config on a miss).
AUTOTUNE_EVENTS = []
try:
    from triton.runtime.autotuner import Autotuner

    _orig_run, _orig_check = Autotuner.run, Autotuner.check_disk_cache

    def _run(self, *args, **kwargs):
        n, t0 = len(self.cache), time.time()
        self._lt_disk_hit = None
        ret = _orig_run(self, *args, **kwargs)
        if len(self.cache) > n:
            AUTOTUNE_EVENTS.append({"fn": self.base_fn.__name__, "disk_cached": self._lt_disk_hit is not None,
                                    "cache_hit": bool(self._lt_disk_hit), "s": time.time() - t0})
        return ret

    def _check(self, *args, **kwargs):
        hit = _orig_check(self, *args, **kwargs)
        self._lt_disk_hit = hit
        return hit

    Autotuner.run, Autotuner.check_disk_cache = _run, _check
    LISTENER = True
except Exception:
    LISTENER = False


# ---------------------------------------------------------------- cases
class Case:
    def __init__(self, spec):
        parts = spec.split(":")
        self.spec = spec
        self.op, self.dt = parts[0], parts[1]
        self.B, self.T, self.H, self.D = (int(x) for x in parts[2:6])
        self.chunk = int(parts[6]) if len(parts) > 6 and parts[6] else 64
        self.form = parts[7] if len(parts) > 7 else ("pre" if self.op == "kda" else "std")
        assert self.op in ("kda", "rwkv6"), spec
        assert self.dt in DTYPES, spec
        assert self.op != "kda" or self.form in ("pre", "layer"), spec
        self.dtype = DTYPES[self.dt]

    def compile_key(self):  # kernels compiled once per (op, dtype, form, D, chunk)
        return (self.op, self.dt, self.form, self.D, self.chunk)

    def build(self, gen):
        """Leaf inputs (requires_grad), the call, and dO. Random, never zeros."""
        B, T, H, D, dt = self.B, self.T, self.H, self.D, self.dtype
        dev = "cuda"

        def rn(*shape, dtype=dt):
            return torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32).to(dtype)

        if self.op == "kda":
            q, k, v = rn(B, T, H, D), rn(B, T, H, D), rn(B, T, H, D)
            if self.form == "pre":
                g = F.logsigmoid(rn(B, T, H, D, dtype=torch.float32)).clamp(min=-5.0).to(dt)
                beta = torch.sigmoid(rn(B, T, H, dtype=torch.float32)).to(dt)
                leaves = [q, k, v, g, beta]
                kw = dict(use_qk_l2norm_in_kernel=True, chunk_size=self.chunk)
            else:
                g, beta = rn(B, T, H, D), rn(B, T, H)
                u01 = torch.rand(H, generator=gen, device=dev)
                A_log = torch.log(1.0 + 15.0 * u01)
                r = torch.rand(H * D, generator=gen, device=dev)
                dtv = torch.exp(r * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(min=1e-4)
                dt_bias = dtv + torch.log(-torch.expm1(-dtv))
                leaves = [q, k, v, g, beta, A_log, dt_bias]
                kw = dict(A_log=A_log, dt_bias=dt_bias, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                          use_beta_sigmoid_in_kernel=True, state_v_first=True, chunk_size=self.chunk)
            for x in leaves:
                x.requires_grad_(True)

            def call():
                return chunk_kda(q, k, v, g, beta, **kw)[0]
        else:
            r_, k, v = rn(B, T, H, D), rn(B, T, H, D), rn(B, T, H, D)
            w = F.logsigmoid(rn(B, T, H, D, dtype=torch.float32)).clamp(min=-5.0).to(dt)
            u = rn(H, D)
            leaves = [r_, k, v, w, u]
            for x in leaves:
                x.requires_grad_(True)

            def call():
                return chunk_rwkv6(r_, k, v, w, u, scale=1.0, chunk_size=self.chunk)[0]
        dO = rn(B, T, H, D)
        return leaves, call, dO


# ---------------------------------------------------------------- measurement helpers
def nbytes(t):
    return t.numel() * t.element_size()


def none_grads(leaves):
    for x in leaves:
        x.grad = None


def cuda_kernels(prof):
    """[(name, start_us, dur_us)] of device-side events, sorted by start."""
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out.append((e.name, e.time_range.start, e.time_range.elapsed_us()))
    if not out:  # fall back to raw kineto events
        for e in prof.profiler.kineto_results.events():
            if e.device_type() == torch.autograd.DeviceType.CUDA:
                out.append((e.name(), e.start_ns() / 1e3, e.duration_ns() / 1e3))
    out.sort(key=lambda x: x[1])
    return out


def is_copy(name):
    return name.startswith("Memcpy") or name.startswith("Memset")


def profile(fn, leaves, iters):
    from torch.profiler import ProfilerActivity, profile as tprofile
    torch.cuda.synchronize()
    with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            none_grads(leaves)
            fn()
        torch.cuda.synchronize()
    return cuda_kernels(prof)


def split_iters(evs, iters):
    """Per-iteration (sum of kernel us, span us, n kernels, n copies), if the list splits evenly."""
    n = len(evs) // iters
    if n * iters != len(evs) or n == 0:
        return None
    res = []
    for i in range(iters):
        part = evs[i * n:(i + 1) * n]
        res.append((sum(d for _, _, d in part), part[-1][1] + part[-1][2] - part[0][1],
                    sum(not is_copy(nm) for nm, _, _ in part), sum(is_copy(nm) for nm, _, _ in part)))
    return res


def run_case(c, gen, graph_ok):
    rec = {"kind": "case", "case": c.spec, "op": c.op, "dtype": c.dt, "B": c.B, "T": c.T, "H": c.H, "D": c.D,
           "chunk": c.chunk, "form": c.form}
    leaves, call, dO = c.build(gen)

    def fwd():
        return call()

    def fwdbwd():
        call().backward(dO)

    # first call: compile + autotune (or cache loads)
    n_ev = len(AUTOTUNE_EVENTS)
    t0 = time.time()
    none_grads(leaves)
    fwdbwd()
    torch.cuda.synchronize()
    rec["first_call_s"] = round(time.time() - t0, 3)
    ev = AUTOTUNE_EVENTS[n_ev:]
    rec["autotune"] = {"tunings": len(ev), "disk_cached": sum(e["disk_cached"] for e in ev),
                       "cache_hits": sum(e["cache_hit"] for e in ev),
                       "tune_s": round(sum(e["s"] for e in ev), 3),
                       "slowest": sorted(([e["fn"], round(e["s"], 2)] for e in ev), key=lambda x: -x[1])[:4],
                       } if LISTENER else None

    # sanity: finite output and gradients on random inputs
    none_grads(leaves)
    o = fwd()
    o.backward(dO)
    torch.cuda.synchronize()
    rec["finite"] = bool(torch.isfinite(o).all().item()) and all(
        x.grad is not None and bool(torch.isfinite(x.grad).all().item()) for x in leaves)
    rec["o_abs_mean"] = float(o.float().abs().mean().item())
    o_bytes = nbytes(o)
    del o

    # eager wall times
    rec["fwd_ms"] = triton.testing.do_bench(fwd, warmup=ARGS.warmup_ms, rep=ARGS.rep_ms,
                                            grad_to_none=leaves, return_mode="median")
    rec["fwdbwd_ms"] = triton.testing.do_bench(fwdbwd, warmup=ARGS.warmup_ms, rep=ARGS.rep_ms,
                                               grad_to_none=leaves, return_mode="median")

    # launches and GPU-only time (profiler), fresh grads each iteration
    try:
        evs_f = profile(fwd, leaves, 1)
        evs_fb = profile(fwdbwd, leaves, 1)
        rec["launches_fwd"] = sum(not is_copy(n) for n, _, _ in evs_f)
        rec["copies_fwd"] = sum(is_copy(n) for n, _, _ in evs_f)
        rec["launches_fwdbwd"] = sum(not is_copy(n) for n, _, _ in evs_fb)
        rec["copies_fwdbwd"] = sum(is_copy(n) for n, _, _ in evs_fb)
        rec["gpu_fwd_ms"] = sum(d for _, _, d in evs_f) / 1e3
        rec["kernels_fwdbwd"] = [[n[:80], round(d, 2)] for n, _, d in evs_fb]
        evs_many = profile(fwdbwd, leaves, ARGS.prof_iters)
        per = split_iters(evs_many, ARGS.prof_iters)
        if per and all(p[2] == rec["launches_fwdbwd"] for p in per):
            rec["gpu_fwdbwd_ms"] = statistics.median(p[0] for p in per) / 1e3
            rec["gpu_span_fwdbwd_ms"] = statistics.median(p[1] for p in per) / 1e3
        else:
            rec["gpu_fwdbwd_ms"] = sum(d for _, _, d in evs_many) / ARGS.prof_iters / 1e3
            rec["gpu_span_fwdbwd_ms"] = None
        rec["gpu_fwdbwd_note"] = f"median of {ARGS.prof_iters} profiled iterations" if per else "mean (uneven split)"

    except Exception as e:  # keep the wall times; say what failed
        rec["profiler_error"] = f"{type(e).__name__}: {str(e)[:300]}"

    # memory: fresh grads, one fwd+bwd
    none_grads(leaves)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    o = fwd()
    torch.cuda.synchronize()
    rec["saved_after_fwd_bytes"] = torch.cuda.memory_allocated() - base
    o.backward(dO)
    torch.cuda.synchronize()
    rec["extra_peak_bytes"] = torch.cuda.max_memory_allocated() - base
    rec["grads_bytes"] = sum(nbytes(x.grad) for x in leaves)
    del o
    none_grads(leaves)

    # traffic floor
    in_bytes = sum(nbytes(x) for x in leaves)
    rec["floor_fwd_us"] = (in_bytes + o_bytes) / ARGS.bw * 1e6
    rec["floor_fwdbwd_us"] = (2 * in_bytes + 2 * o_bytes) / ARGS.bw * 1e6

    # CUDA graph of one fwd+bwd
    rec["graph_fwdbwd_ms"], rec["graph_error"] = None, None
    if ARGS.no_graph:
        rec["graph_error"] = "skipped (--no-graph)"
    elif not graph_ok.get(c.op, True):
        rec["graph_error"] = "skipped: capture failed in an earlier case of this op"
    else:
        try:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    none_grads(leaves)
                    fwdbwd()
            torch.cuda.current_stream().wait_stream(s)
            none_grads(leaves)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fwdbwd()
            g.replay()
            torch.cuda.synchronize()
            rec["graph_fwdbwd_ms"] = triton.testing.do_bench(g.replay, warmup=ARGS.warmup_ms, rep=ARGS.rep_ms,
                                                             return_mode="median")
            del g
        except Exception as e:  # report, never hide
            rec["graph_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            graph_ok[c.op] = False
            try:
                torch.cuda.synchronize()
            except Exception:  # a failed capture can leave the context unusable: main() reruns
                rec["cuda_broken"] = True
                return rec
        none_grads(leaves)
    return rec


def autotune_files():
    res = set()
    for d, _, fs in os.walk(CACHE_DIR):
        res |= {os.path.join(d, f) for f in fs if f.endswith(".autotune.json")}
    return res


def precompile(specs):
    """Compile each distinct compile key's kernels in parallel worker processes (Triton compiles serially
    inside one process; fla's KDA fwd+bwd takes minutes). Workers share the GPU, so the autotune
    results they write are deleted afterwards; compiled kernels stay in TRITON_CACHE_DIR."""
    import subprocess
    t0, before = time.time(), autotune_files()
    first = {}
    for spec in specs:
        first.setdefault(Case(spec).compile_key(), spec)
    todo, running, res = list(first.items()), [], {"kind": "precompile", "jobs": ARGS.precompile_jobs, "runs": []}
    while todo or running:
        while todo and len(running) < ARGS.precompile_jobs:
            key, spec = todo.pop(0)
            cmd = [sys.executable, os.path.abspath(__file__), "--first-call-only", "--cases", spec, "--out", os.devnull]
            running.append((key, spec, time.time(), subprocess.Popen(cmd)))
        time.sleep(0.5)
        left = ARGS.deadline_s - (time.time() - T_START)
        for item in list(running):
            key, spec, ts, pr = item
            if pr.poll() is None and (left < ARGS.est_warm_s or time.time() - t0 > ARGS.precompile_max_s):
                pr.kill()  # leave time to measure what did compile
                pr.wait()
            if pr.poll() is not None:
                running.remove(item)
                res["runs"].append({"case": spec, "key": list(key), "rc": pr.returncode,
                                    "wall_s": round(time.time() - ts, 1)})
    dropped = sorted(autotune_files() - before)
    for f in dropped:
        os.remove(f)
    res.update(wall_s=round(time.time() - t0, 1), autotune_results_dropped=len(dropped),
               autotune_results_kept=len(before), ok_keys=[r["key"] for r in res["runs"] if r["rc"] == 0])
    return res


def env_record():
    rec = {"kind": "env", "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
           "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "python": sys.version.split()[0], "fla_version": fla.__version__,
           "fla_path": os.path.dirname(fla.__file__), "triton_cache_dir": CACHE_DIR,
           "autotune_instrumented": LISTENER, "cache_in": CACHE_IN_INFO,
           "env": {k: os.environ.get(k) for k in ("TRITON_F32_DEFAULT", "FLA_CACHE_RESULTS", "FLA_CACHE_MODE",
                                                  "FLA_DISABLE_BACKEND_DISPATCH", "FLA_USE_FAST_OPS")}}
    commit_file = os.path.join(os.path.dirname(os.path.dirname(fla.__file__)), "FLA_COMMIT")
    rec["fla_commit"] = open(commit_file).read().strip() if os.path.exists(commit_file) else None
    try:
        from fla.utils import _compat
        rec["fla_supports_autotune_cache"] = _compat.SUPPORTS_AUTOTUNE_CACHE
        rec["fla_autotune_cache_kwargs"] = {k: bool(v) for k, v in _compat.autotune_cache_kwargs.items()}
    except Exception as e:
        rec["fla_supports_autotune_cache"] = f"unknown ({e})"
    return rec


def fmt(x, nd=3):
    return "n/a" if x is None else f"{x:.{nd}f}"


def main():
    done = set()
    if ARGS.resume and os.path.exists(ARGS.out):
        for line in open(ARGS.out):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "case" and r.get("status") in ("ok", "error"):
                done.add(r["case"])
    out = open(ARGS.out, "a")

    def emit(r):
        out.write(json.dumps(r) + "\n")
        out.flush()

    if ARGS.first_call_only:  # a --precompile-jobs worker: compile (and tune) one case, nothing else
        gen = torch.Generator(device="cuda")
        gen.manual_seed(ARGS.seed)
        for spec in ARGS.cases:
            leaves, call, dO = Case(spec).build(gen)
            t0 = time.time()
            call().backward(dO)
            torch.cuda.synchronize()
            print(f"[precompile] {spec} first call {time.time() - t0:.1f}s", flush=True)
        return
    env = env_record()
    emit(env)
    print(json.dumps(env), flush=True)
    compiled, graph_ok, rows = set(), {}, []
    if ARGS.precompile_jobs > 0:
        pre = precompile([s for s in ARGS.cases if s not in done])
        emit(pre)
        print(json.dumps(pre), flush=True)
        compiled |= {tuple(k) for k in pre["ok_keys"]}
    gen = torch.Generator(device="cuda")
    gen.manual_seed(ARGS.seed)
    for spec in ARGS.cases:
        c = Case(spec)
        if spec in done:
            print(f"[skip] {spec}: already in {ARGS.out}", flush=True)
            continue
        left = ARGS.deadline_s - (time.time() - T_START)
        need = ARGS.est_warm_s if c.compile_key() in compiled else ARGS.est_first_s
        if left < need:
            r = {"kind": "case", "case": spec, "status": "skipped", "why": f"budget: {left:.0f}s left < {need:.0f}s"}
            emit(r)
            rows.append(r)
            print(f"[skip] {spec}: {r['why']}", flush=True)
            continue
        t0 = time.time()
        try:
            r = run_case(c, gen, graph_ok)
            r["status"] = "ok"
        except Exception as e:
            r = {"kind": "case", "case": spec, "status": "error", "error": f"{type(e).__name__}: {str(e)[:500]}"}
        r["case_wall_s"] = round(time.time() - t0, 1)
        compiled.add(c.compile_key())
        emit(r)
        rows.append(r)
        print(f"[case] {spec} {r['status']} in {r['case_wall_s']}s: "
              + (f"fwd {fmt(r.get('fwd_ms'))} fwd+bwd {fmt(r.get('fwdbwd_ms'))} gpu {fmt(r.get('gpu_fwdbwd_ms'))}"
                 f" graph {fmt(r.get('graph_fwdbwd_ms'))} launches {r.get('launches_fwd')}/{r.get('launches_fwdbwd')}"
                 if r["status"] == "ok" else r.get("error", "")), flush=True)
        if r.get("cuda_broken"):
            print(f"[fatal] CUDA context unusable after the graph capture of {spec}", flush=True)
            finish(rows, emit)
            sys.exit(3)
        if r["status"] == "error":
            try:
                torch.cuda.synchronize()
            except Exception as e:  # CUDA context broken: let the caller rerun with --resume
                print(f"[fatal] CUDA context unusable after {spec}: {e}", flush=True)
                finish(rows, emit)
                sys.exit(3)
    finish(rows, emit)


def finish(rows, emit):
    if ARGS.cache_out:
        info = pack_cache(ARGS.cache_out, ARGS.cache_max_bytes)
        info["kind"] = "cache"
        emit(info)
        print(json.dumps(info), flush=True)
    hdr = (f"{'case':34} {'fwd ms':>8} {'f+b ms':>8} {'gpu f+b':>8} {'span':>8} {'graph':>8} {'launch':>7} "
           f"{'peak MB':>8} {'saved MB':>8} {'floor us':>8} {'1st s':>6}")
    print(hdr)
    for r in rows:
        if r.get("status") != "ok":
            print(f"{r['case']:34} {r.get('status')}: {r.get('why') or r.get('error')}")
            continue
        print(f"{r['case']:34} {fmt(r['fwd_ms']):>8} {fmt(r['fwdbwd_ms']):>8} {fmt(r['gpu_fwdbwd_ms']):>8} "
              f"{fmt(r['gpu_span_fwdbwd_ms']):>8} {fmt(r['graph_fwdbwd_ms']):>8} "
              f"{str(r['launches_fwd']) + '/' + str(r['launches_fwdbwd']):>7} {r['extra_peak_bytes'] / MB:8.1f} "
              f"{r['saved_after_fwd_bytes'] / MB:8.1f} {r['floor_fwdbwd_us']:8.1f} {r['first_call_s']:6.1f}")
    print(f"total wall {time.time() - T_START:.1f}s", flush=True)


if __name__ == "__main__":
    main()
