#!/usr/bin/env python3
"""Plot a trainer run's metrics.jsonl: loss (train and validation), throughput and memory.

    python3 scripts/plot_metrics.py runs/quick/metrics.jsonl            # writes runs/quick/metrics.png
    python3 scripts/plot_metrics.py runs/a/metrics.jsonl runs/b/metrics.jsonl -o compare.png

Each line of metrics.jsonl is one JSON object: {"type": "train", "step", "loss", "lr",
"grad_norm", "tokens_per_s", "ms_per_step", "mem_in_use", "mem_reserved", ...} or
{"type": "eval", "step", "val_loss", "mqar_accuracy" | "val_accuracy"}. Needs matplotlib
(Debian: apt-get install python3-matplotlib).
"""
import argparse
import json
import os
import sys
import textwrap


def read_metrics(path):
    train, evals = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"{path}:{n}: skipped a line that is not JSON ({e})", file=sys.stderr)
                continue
            (evals if rec.get("type") == "eval" else train).append(rec)
    return train, evals


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics", nargs="+", help="metrics.jsonl file(s) written by the trainer")
    ap.add_argument("-o", "--out", help="output PNG (default: metrics.png beside the first file)")
    ap.add_argument("--title", default="", help="a figure title: say date, GPU and command, e.g. --title '2026-12-05, H200: ...'")
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_metrics.py needs matplotlib: apt-get install python3-matplotlib (or pip install matplotlib)",
              file=sys.stderr)
        return 2
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(args.metrics[0])), "metrics.png")

    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    ax_loss, ax_acc, ax_tput, ax_mem = axes.flat
    for path in args.metrics:
        if not os.path.exists(path):
            print(f"plot_metrics.py: {path} does not exist", file=sys.stderr)
            return 2
        train, evals = read_metrics(path)
        label = os.path.basename(os.path.dirname(os.path.abspath(path))) or path
        steps = [r["step"] for r in train]
        ax_loss.plot(steps, [r["loss"] for r in train], label=f"{label} train", lw=1)
        if evals:
            ax_loss.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "o-", label=f"{label} val", ms=3)
            key = "mqar_accuracy" if "mqar_accuracy" in evals[0] else "val_accuracy"
            ax_acc.plot([r["step"] for r in evals], [r.get(key, 0.0) for r in evals], "o-", label=f"{label} {key}", ms=3)
        ax_tput.plot(steps, [r.get("tokens_per_s", 0.0) for r in train], label=label, lw=1)
        ax_mem.plot(steps, [r.get("mem_in_use", 0) / 2**20 for r in train], label=f"{label} in use", lw=1)
        ax_mem.plot(steps, [r.get("mem_reserved", 0) / 2**20 for r in train], "--", label=f"{label} reserved", lw=1)
    ax_loss.set(title="loss", xlabel="step", ylabel="mean token loss")
    ax_acc.set(title="validation accuracy", xlabel="step", ylabel="accuracy", ylim=(0, 1))
    ax_tput.set(title="throughput", xlabel="step", ylabel="tokens / s")
    ax_mem.set(title="allocator memory", xlabel="step", ylabel="MiB")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    if args.title:
        fig.suptitle(textwrap.fill(args.title, 140), fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
