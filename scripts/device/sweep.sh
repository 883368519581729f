#!/usr/bin/env bash
# Short training runs of one config with different overrides, one after the other on the GPU
# machine, for a hyperparameter sweep. Run from the repo root:
#
#   bash scripts/device/sweep.sh TRAINER CONFIG OUT STEPS NAME="--set k=v ..." [NAME="..."] ...
#
# Each NAME trains CONFIG for STEPS steps into OUT/NAME (checkpoints off) with its overrides.
# OUT/summary.txt gets each run's eval lines; OUT/metrics.tgz every run's metrics.jsonl.
# SWEEP_DEADLINE_EPOCH: no run starts after this time (seconds since the epoch).
set -uo pipefail
trainer=${1:?trainer}; config=${2:?config}; out=${3:?out}; steps=${4:?steps}; shift 4
mkdir -p "$out"
for spec in "$@"; do
  name=${spec%%=*}; sets=${spec#*=}
  if [ -n "${SWEEP_DEADLINE_EPOCH:-}" ] && [ "$(date +%s)" -ge "$SWEEP_DEADLINE_EPOCH" ]; then
    echo "deadline: $name not run" | tee -a "$out/summary.txt"; continue
  fi
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$trainer" --config "$config" --out "$out/$name" --resume none --steps "$steps" \
    --set train.checkpoint_every=0 $sets > "$out/$name.log" 2>&1
  rc=$?
  {
    echo "== $name ($sets): rc=$rc, $(( $(date +%s) - start )) s"
    grep '"type":"eval"' "$out/$name/metrics.jsonl" 2>/dev/null | python3 -c '
import json, sys
for l in sys.stdin:
    j = json.loads(l)
    acc = j.get("mqar_accuracy", j.get("val_accuracy"))
    print("  step %6d  val loss %.4f  accuracy %.4f" % (j["step"], j["val_loss"], acc))'
    [ $rc -ne 0 ] && tail -5 "$out/$name.log"
  } | tee -a "$out/summary.txt"
done
tar czf "$out/metrics.tgz" -C "$out" $(cd "$out" && ls -d */metrics.jsonl 2>/dev/null) 2>/dev/null || true
