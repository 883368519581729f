#!/usr/bin/env bash
# Run the benchmark rows of a config (default configs/bench-mixers.json) with kbench.
#   bash scripts/bench.sh [BUILD_DIR | KBENCH_EXE] [CONFIG] [OUT_DIR]
# Each row becomes `kbench <bench> --B .. --T .. ... --json OUT_DIR/<n>-<bench>.json`.
# Rows whose bench needs a GPU report the CPU fallback or say why they cannot run.
set -euo pipefail
build=${1:-build}
config=${2:-configs/bench-mixers.json}
out=${3:-out/bench}
kbench="$build/apps/kbench"
[ -f "$build" ] && kbench="$build"
[ -x "$kbench" ] || { echo "bench.sh: $kbench not found: build first (bash scripts/setup.sh)" >&2; exit 2; }
[ -f "$config" ] || { echo "bench.sh: config '$config' not found" >&2; exit 2; }
mkdir -p "$out"
mapfile -t rows < <(python3 - "$config" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
for i, row in enumerate(cfg["rows"]):
    args = [row["bench"]]
    for k, v in row.items():
        if k != "bench":
            args += [f"--{k}", str(v)]
    print(f"{i:02d}-{row['bench']}\t" + " ".join(args))
PY
)
status=0
for line in "${rows[@]}"; do
  name=${line%%$'\t'*}; args=${line#*$'\t'}
  echo "== kbench $args"
  # shellcheck disable=SC2086
  "$kbench" $args --json "$out/$name.json" || { echo "bench.sh: row '$args' failed" >&2; status=1; }
done
exit $status
