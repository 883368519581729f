#!/usr/bin/env bash
# One device call: lintrain's GPU tests and benchmark rows, then fla (the peer) at the same
# shapes, on the same GPU, in the same run, then lintrain's rows again (interleaved rounds:
# ours, fla, ours). Run on the GPU machine from the repo root:
#
#   bash scripts/device/side_by_side.sh BUNDLE OUT SECONDS [FLA_CASES...]
#
# BUNDLE   a folder of executables plus the non-CUDA shared libraries they need, with a
#          run-in-bundle wrapper that sets the library path, holding kbench (and
#          lintrain_cuda_tests: the tests run when it is there)
# OUT      where results go (at most 8 files: env.txt, tests.log, lintrain.log,
#          lintrain.jsonl, fla.log, fla_bench.jsonl, triton-cache.tgz); lintrain.jsonl has one
#          line per row and round ("round": 1 before fla, 2 after)
# SECONDS  wall budget for the whole script; fla gets what lintrain leaves (its harness skips
#          cases that would not fit and writes them as skipped), less the time of the first
#          lintrain round, kept for the second
# FLA_CASES  op:dtype:B:T:H:D[:chunk[:form]] (scripts/peer/fla_mixer_bench.py); fla needs
#          .peer/fla-src (docs/PEER.md) and reuses .peer/triton-cache.tgz when present.
# BENCH_CONFIG  the rows (default configs/bench-mixers.json)
set -uo pipefail
bundle=${1:?bundle}; out=${2:?out}; budget=${3:?seconds}; shift 3
start=$(date +%s); end=$((start + budget))
mkdir -p "$out"
q="--query-gpu=name,clocks.sm,clocks.mem,driver_version,temperature.gpu,utilization.gpu"
{ date -u; nvidia-smi $q --format=csv; } > "$out/env.txt"

# 1. GPU tests of the integrated tree.
if [ -x "$bundle/bin/lintrain_cuda_tests" ]; then
  "$bundle/run-in-bundle" "$bundle/bin/lintrain_cuda_tests" 2>&1 | tail -n 400 > "$out/tests.log"
  echo "lintrain_cuda_tests rc=${PIPESTATUS[0]} ($(( $(date +%s) - start )) s)" | tee -a "$out/tests.log"
fi

# 2. Benchmark rows, one JSON line per row and round.
config=${BENCH_CONFIG:-configs/bench-mixers.json}
lintrain_round() {
  local rows; rows=$(mktemp -d)
  echo "== round $1" >> "$out/lintrain.log"
  "$bundle/run-in-bundle" bash scripts/bench.sh "$bundle/bin/kbench" "$config" "$rows" >> "$out/lintrain.log" 2>&1 \
    || echo "bench.sh: some rows failed (see lintrain.log)" | tee -a "$out/lintrain.log"
  for f in "$rows"/*.json; do [ -f "$f" ] && { printf '{"row":"%s","round":%d,"result":' "$(basename "$f" .json)" "$1"; tr -d '\n' < "$f"; echo '}'; }; done >> "$out/lintrain.jsonl"
  echo "lintrain round $1 done at $(( $(date +%s) - start )) s" | tee -a "$out/lintrain.log"
}
r1=$(date +%s); lintrain_round 1; round_s=$(( $(date +%s) - r1 ))

# 3. fla side by side, in what is left.
if [ $# -gt 0 ] && [ -d .peer/fla-src ]; then
  export PYTHONPATH=$PWD/.peer/fla-src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
  cache_in=(); [ -f .peer/triton-cache.tgz ] && cache_in=(--cache-in .peer/triton-cache.tgz)
  fla_end=$((end - 25 - round_s))
  t=$((fla_end + 10 - $(date +%s))); [ $t -lt 1 ] && t=1
  timeout -s INT -k 5 $t python3 scripts/peer/fla_mixer_bench.py --cases "$@" --out "$out/fla_bench.jsonl" \
    --deadline-epoch $fla_end "${cache_in[@]}" >> "$out/fla.log" 2>&1
  echo "fla rc=$? at $(( $(date +%s) - start )) s" | tee -a "$out/fla.log"
  python3 scripts/peer/fla_mixer_bench.py --pack-only --cache-out "$out/triton-cache.tgz" >> "$out/fla.log" 2>&1
fi
[ $# -gt 0 ] && lintrain_round 2
{ date -u; nvidia-smi $q --format=csv,noheader; } >> "$out/env.txt"
tail -n 30 "$out/fla.log" 2>/dev/null
