#!/usr/bin/env python3
"""Check the trainer's per-stage timers against a profiler's kernel list (CUPTI).

    trainer --config configs/bench-step-kda.json --bench 200 --timers step%50 \\
        --kernel-trace runs/k.jsonl --out runs/fid
    python3 scripts/timer_fidelity.py --trace runs/k.jsonl --metrics runs/fid/bench/metrics.jsonl

Inputs: the --kernel-trace file (one {"kind": "kernel-trace", ...} line per timed step: every
kernel CUPTI recorded in the step, with the chain of stages it was launched inside) and the
run's metrics.jsonl (one {"type": "timers", ...} line per timed step: each stage's event time
and launch count). Steps are matched by "step" (the timers' count, 0 = first after warm-up).

Per timed step and stage (inclusive of the stages it encloses) the table shows:
  event ms     the stage's CUDA-event time (sum over its scopes in the step)
  kernel ms    the sum of the durations of the stage's kernels (CUPTI start..end)
  span ms      the first kernel's start to the last one's end (the kernels' extent; gaps
               between scopes of a stage entered more than once are inside it)
  copy ms      the summed durations of the stage's memcpy / memset (not kernels: not in
               "kernel ms" nor counted as launches; shown because the event time holds them)
  gaps         (event - kernel ms) / event: the share of the stage's time with no kernel of it
               running (launch latency between dependent kernels, host work the device waits for)
  launches     launches the launch atlas counted in the stage (a cuBLAS call counts one)
  kernels      kernels CUPTI recorded in the stage
  aux          of those, cuBLAS's split-K reduction kernels (cublasLt splitKreduce_kernel, the
               xmma GEMMs' ..._split_k_kernel), which cuBLAS launches inside the GEMM call
               that the atlas counted
  time         "ok" when the event time lies in [lo, hi] widened by the tolerance (x event), else
               the signed distance to the nearer end; lo = the stage's extent on the device
               (first start to last end over its kernels and copies), hi = the same from the
               end of the work that ran before the stage's first kernel. The stage's enter event
               completes somewhere in that launch gap (after the work queued before it, before
               the stage's first kernel starts), so a faithful event time lies in between; the
               gap (a few microseconds) is the resolution of the comparison. For the step's
               first stage the work before it is not in the trace (hi unbounded), and a stage
               with no kernel or copy (host work only: "data") has nothing to compare: "host"
  count        "ok" when launches == kernels - aux, else the difference
The event time is GPU wall time between the stage's enter and leave events, so it is compared
with the extent of the stage's work on the device; the sum of kernel durations leaves out the
gaps between kernels, which the step pays, and is shown with the gap share, not judged.
Nothing is adjusted. Then the step checks: the top-level stages' event times against the
step's event time (tolerance), and for reference the step's kernel sum and span.

Exit status: 0 when every check passes, 1 when some check fails, 2 for unreadable input.
Python 3 standard library only.
"""
import argparse
import json
import sys

OUTSIDE = "(outside stages)"


class BadInput(Exception):
    pass


def read_lines(path, want):
    """The JSON objects of `path` (JSON lines) for which want(obj) holds."""
    out = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise BadInput(f"{path}:{n}: not JSON ({e})") from None
                if want(obj):
                    out.append(obj)
    except OSError as e:
        raise BadInput(f"cannot read {path}: {e.strerror}") from None
    return out


def rel(a, b):
    """(a - b) / a, 0 when both are 0, inf when only a is 0."""
    if a == 0:
        return 0.0 if b == 0 else float("inf")
    return (a - b) / a


def verdict_count(launches, kernels):
    return ("ok", True) if launches == kernels else (f"{kernels - launches:+d}", False)


def is_aux(kernel):
    """A kernel cuBLAS launches inside a GEMM call besides the GEMM itself."""
    return "splitKreduce" in kernel["name"] or "split_k_kernel" in kernel["name"]


def extent_ms(records, all_records):
    """(lo, hi): the extent of `records` from their first start, and from the end of the work
    before them, to their last end (see the header)."""
    if not records:
        return 0.0, 0.0
    first = min(r["start_ns"] for r in records)
    last = max(r["end_ns"] for r in records)
    before = [r["end_ns"] for r in all_records if r["end_ns"] <= first]
    if not before:
        return (last - first) / 1e6, float("inf")
    return (last - first) / 1e6, (last - max(before)) / 1e6


def verdict_band(event_ms, lo, hi, tol):
    if lo - tol * event_ms <= event_ms <= hi + tol * event_ms:
        return "ok", True
    if event_ms == 0:
        return "event 0", False
    d = event_ms - (hi if event_ms > hi else lo)
    return f"{100 * d / event_ms:+.1f}%", False


def kernels_of(kernels, stage):
    if stage == OUTSIDE:
        return [k for k in kernels if not k.get("stages")]
    return [k for k in kernels if stage in k.get("stages", [])]


def check_step(timing, trace, tol, out):
    """Prints the table of one step; returns (checks, failures)."""
    kernels = trace["kernels"]
    copies = trace.get("copies", [])
    step = timing["step"]
    stages = timing["stages"]
    for s in stages:
        if "depth" not in s:
            raise BadInput(f"the timers line of step {step} has no stage depths (written by an older trainer)")
    checks = failures = 0
    out.write(f"step {step} (train step {timing.get('train_step', '?')}): {len(kernels)} kernels, "
              f"{timing.get('launches', 0)} launches counted, dropped records {trace.get('dropped', 0)}\n")
    head = (f"  {'stage':<44} {'event ms':>9} {'kernel ms':>9} {'span ms':>9} {'copy ms':>8} {'gaps':>6} {'launches':>8}"
            f" {'kernels':>7} {'aux':>4}  {'time':>8} {'count':>6}\n")
    out.write(head)
    known = {s["stage"] for s in stages}
    for s in stages:
        name = s["stage"]
        ks = kernels_of(kernels, name)
        ksum = sum(k["end_ns"] - k["start_ns"] for k in ks) / 1e6
        span = (max(k["end_ns"] for k in ks) - min(k["start_ns"] for k in ks)) / 1e6 if ks else 0.0
        cs = kernels_of(copies, name)
        copy = sum(c["end_ns"] - c["start_ns"] for c in cs) / 1e6
        aux = sum(1 for k in ks if is_aux(k))
        event = float(s["ms"])
        gaps = f"{100 * rel(event, ksum):5.1f}%" if event > 0 else "   n/a"
        tv, tok = verdict_band(event, *extent_ms(ks + cs, kernels + copies), tol)
        if not ks and not cs:
            tv, tok = "host", True
        cv, cok = verdict_count(int(s.get("launches", 0)), len(ks) - aux)
        if name == OUTSIDE:
            # Host time between stages has no kernels by design: only its launch count is checked.
            tv, tok = "n/a", True
        checks += 2
        failures += (not tok) + (not cok)
        label = "  " * int(s["depth"]) + name
        out.write(f"  {label:<44} {event:9.3f} {ksum:9.3f} {span:9.3f} {copy:8.3f} {gaps:>6} {int(s.get('launches', 0)):8d}"
                  f" {len(ks):7d} {aux:4d}  {tv:>8} {cv:>6}\n")
    stray = [k for k in kernels if k.get("stages") and not any(c in known for c in k["stages"])]
    if stray:
        out.write(f"  {len(stray)} kernels ran in stages the timers did not time (another thread's?)\n")
    step_ms = float(timing["step_ms"])
    top = sum(float(s["ms"]) for s in stages if int(s["depth"]) == 0 and s["stage"] != OUTSIDE)
    r = rel(step_ms, top)
    ok = abs(r) <= tol
    checks += 1
    failures += not ok
    all_sum = sum(k["end_ns"] - k["start_ns"] for k in kernels) / 1e6
    all_span = (max(k["end_ns"] for k in kernels) - min(k["start_ns"] for k in kernels)) / 1e6 if kernels else 0.0
    out.write(f"  step: event {step_ms:.3f} ms, top-level stages sum {top:.3f} ms "
              f"({100 * r:+.2f}% of the step outside stages): {'ok' if ok else 'FAILED'} "
              f"(tolerance {100 * tol:g}%)\n")
    all_copies = sum(c["end_ns"] - c["start_ns"] for c in copies) / 1e6
    out.write(f"  step: kernels sum {all_sum:.3f} ms ({100 * all_sum / step_ms if step_ms else 0:.1f}% of the "
              f"event time), span {all_span:.3f} ms; copies {all_copies:.3f} ms in {len(copies)}; "
              f"launches counted {timing.get('launches', 0)}, kernels {len(kernels)} "
              f"({sum(1 for k in kernels if is_aux(k))} cuBLAS split-K reductions)\n")
    return checks, failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--trace", required=True, help="the trainer's --kernel-trace file")
    ap.add_argument("--metrics", required=True, help="the run's metrics.jsonl (its timers lines)")
    ap.add_argument("--step", type=int, action="append", help="only this timed step (repeatable)")
    ap.add_argument("--tolerance", type=float, default=0.02, help="relative tolerance (default 0.02)")
    args = ap.parse_args(argv)
    try:
        return run(args)
    except (BadInput, KeyError, TypeError, ValueError) as e:
        print(f"timer_fidelity: bad input: {e!r}" if not isinstance(e, BadInput) else f"timer_fidelity: {e}",
              file=sys.stderr)
        return 2


def run(args):
    traces = {t["step"]: t for t in read_lines(args.trace, lambda o: o.get("kind") == "kernel-trace")}
    timings = {t["step"]: t for t in read_lines(args.metrics, lambda o: o.get("type") == "timers")}
    steps = sorted(set(traces) & set(timings))
    if args.step:
        steps = [s for s in steps if s in set(args.step)]
    if not steps:
        print(f"timer_fidelity: no timed step is in both {args.trace} ({sorted(traces)}) and "
              f"{args.metrics} ({sorted(timings)})", file=sys.stderr)
        return 2
    checks = failures = 0
    for s in steps:
        c, f = check_step(timings[s], traces[s], args.tolerance, sys.stdout)
        checks += c
        failures += f
    print(f"verdict: {checks - failures} of {checks} checks pass over {len(steps)} steps "
          f"(tolerance {100 * args.tolerance:g}%)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
