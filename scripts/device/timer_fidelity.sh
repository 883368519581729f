#!/usr/bin/env bash
# One device call: the per-stage timers against CUPTI's kernel list, and the timers' cost.
# Run on the GPU machine from the repo root:
#
#   bash scripts/device/timer_fidelity.sh BUNDLE OUT [BUNDLE_NO_TIMERS]
#
# BUNDLE: bin/trainer with the non-CUDA shared libraries it needs and a run-in-bundle wrapper
# (or BUNDLE.tar.xz of it, unpacked first), as for step_side_by_side.sh. libcupti is loaded
# at run time: from BUNDLE/lib when it holds libcupti.so*, else from the CUDA toolkit's
# folders, else the loader's path ($LINTRAIN_CUPTI_LIB, when set, wins).
# BUNDLE_NO_TIMERS (optional): the same trainer built with -DLINTRAIN_STAGE_TIMERS=OFF.
#
# 1. Fidelity, per config (CONFIGS, default bench-step-kda bench-step-rwkv6): `trainer --bench
#    200 --bench-warmup 20 --timers step%50 --kernel-trace`, then scripts/timer_fidelity.py on
#    its kernel trace and metrics.jsonl -> OUT/<config>.fidelity.txt (the table and verdicts).
# 2. Cost, per config, ROUNDS (default 2) interleaved rounds of: timers off, step%50, all, and
#    (with BUNDLE_NO_TIMERS) the build without stage hooks -> OUT/cost.jsonl, OUT/cost.txt
#    (median ms per step of each arm, and its ratio to "timers off" of the same build).
# OUT also gets env.txt and the logs (fidelity.log, cost.log).
set -uo pipefail
bundle=${1:?bundle}; out=${2:?out}; bundle_off=${3:-}
mkdir -p "$out"
for b in "$bundle" $bundle_off; do
  if [ -f "$b.tar.xz" ] && [ ! -d "$b" ]; then tar -xJf "$b.tar.xz" -C "$(dirname "$b")"; fi
done
q="--query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version,temperature.gpu,utilization.gpu"
{ date -u; nvidia-smi $q --format=csv; } > "$out/env.txt"
start=$(date +%s)
since() { echo "$(( $(date +%s) - start )) s"; }

if [ -z "${LINTRAIN_CUPTI_LIB:-}" ]; then
  for c in "$bundle"/lib/libcupti.so* /usr/local/cuda/lib64/libcupti.so* /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* \
           /usr/local/cuda-*/lib64/libcupti.so* /usr/local/cuda-*/extras/CUPTI/lib64/libcupti.so*; do
    [ -f "$c" ] && { LINTRAIN_CUPTI_LIB=$(readlink -f "$c"); export LINTRAIN_CUPTI_LIB; break; }
  done
fi
echo "libcupti: ${LINTRAIN_CUPTI_LIB:-(loader path)}" | tee -a "$out/env.txt"

configs=${CONFIGS:-bench-step-kda bench-step-rwkv6}

# 1. Fidelity.
for cfg in $configs; do
  dir=/tmp/fid_${cfg}_$RANDOM
  "$bundle/run-in-bundle" "$bundle/bin/trainer" --config configs/$cfg.json --out $dir --bench 200 --bench-warmup 20 \
    --timers step%50 --kernel-trace "$out/$cfg.kernels.jsonl" --bench-out "$out/$cfg.fidelity_bench.json" \
    >> "$out/fidelity.log" 2>&1 || echo "trainer --kernel-trace $cfg failed" | tee -a "$out/fidelity.log"
  cp "$dir/bench/metrics.jsonl" "$out/$cfg.metrics.jsonl" 2>/dev/null
  python3 scripts/timer_fidelity.py --trace "$out/$cfg.kernels.jsonl" --metrics "$out/$cfg.metrics.jsonl" \
    > "$out/$cfg.fidelity.txt" 2>&1
  echo "$cfg: timer_fidelity rc=$? ($(since)): $(tail -n 1 "$out/$cfg.fidelity.txt")" | tee -a "$out/fidelity.log"
done

# 2. Cost, interleaved rounds.
arms=("on:off" "on:step%50" "on:all"); [ -n "$bundle_off" ] && arms+=("off:off")
for round in $(seq 1 "${ROUNDS:-2}"); do
  for cfg in $configs; do
    for arm in "${arms[@]}"; do
      build=${arm%%:*}; t=${arm#*:}; b=$bundle; [ "$build" = off ] && b=$bundle_off
      tag=${cfg}_${build}_${t//%/_}_$RANDOM
      "$b/run-in-bundle" "$b/bin/trainer" --config configs/$cfg.json --out /tmp/$tag --bench 200 --bench-warmup 20 \
        --timers $t --bench-out /tmp/$tag.json >> "$out/cost.log" 2>&1 || echo "trainer $cfg $arm failed" | tee -a "$out/cost.log"
      [ -f /tmp/$tag.json ] && { printf '{"config":"%s","build":"%s","timers":"%s","round":%s,"result":' \
        "$cfg" "$build" "$t" "$round"; tr -d '\n' < /tmp/$tag.json; echo '}'; } >> "$out/cost.jsonl"
    done
  done
done
echo "cost rounds done ($(since))" | tee -a "$out/cost.log"

python3 - "$out/cost.jsonl" > "$out/cost.txt" <<'EOF'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault((r["config"], r["build"], r["timers"]), []).append(r["result"]["ms_per_step"]["median"])
print("median ms/step per arm (median over rounds; each round's value is the run's median of 200 steps)")
for (cfg, build, t), v in sorted(rows.items()):
    base = rows.get((cfg, "on", "off"))
    ratio = statistics.median(v) / statistics.median(base) if base else float("nan")
    label = f"stage hooks {'compiled' if build == 'on' else 'compiled out'}, --timers {t}"
    print(f"{cfg:18} {label:44} {statistics.median(v):8.3f} ms  x{ratio:.4f} vs hooks compiled, timers off  "
          f"(rounds: {', '.join(f'{x:.3f}' for x in v)})")
EOF
cat "$out/cost.txt"
{ date -u; nvidia-smi $q --format=csv,noheader; } >> "$out/env.txt"
