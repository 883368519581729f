#!/usr/bin/env bash
# One run on the GPU machine: the same benchmark rows from two builds of kbench on the same GPU, in
# interleaved rounds (A, B, A, B, ...), so that a change is measured against its base in one
# run instead of across runs. Run on the GPU machine from the repo root:
#
#   bash scripts/device/ab_bench.sh KBENCH_A KBENCH_B OUT ROUNDS [CONFIG]
#
# KBENCH_A, KBENCH_B  kbench executables (e.g. the base and the changed build; a bundle's
#          run-in-bundle wrapper beside bin/ supplies their shared libraries)
# OUT      ab.jsonl (one line per row, build and round: {"row", "build": "A"|"B", "round",
#          "result"}), ab.log, env.txt
# ROUNDS   rounds of A then B
# CONFIG   the rows (default configs/bench-kda-peer.json)
# AB_DEADLINE_EPOCH  no round starts after this time (seconds since the epoch)
set -uo pipefail
a=${1:?kbench A}; b=${2:?kbench B}; out=${3:?out}; rounds=${4:?rounds}
config=${5:-configs/bench-kda-peer.json}
mkdir -p "$out"
q="--query-gpu=name,clocks.sm,clocks.mem,driver_version,temperature.gpu,utilization.gpu"
{ date -u; nvidia-smi $q --format=csv; } >> "$out/env.txt"
run_build() {  # label exe round
  local rows; rows=$(mktemp -d)
  echo "== build $1 round $3 ($2)" >> "$out/ab.log"
  local wrap=(); [ -x "$(dirname "$(dirname "$2")")/run-in-bundle" ] && wrap=("$(dirname "$(dirname "$2")")/run-in-bundle")
  "${wrap[@]}" bash scripts/bench.sh "$2" "$config" "$rows" >> "$out/ab.log" 2>&1 \
    || echo "bench.sh: some rows failed (build $1, round $3)" | tee -a "$out/ab.log"
  for f in "$rows"/*.json; do
    [ -f "$f" ] && { printf '{"row":"%s","build":"%s","round":%d,"result":' "$(basename "$f" .json)" "$1" "$3"; tr -d '\n' < "$f"; echo '}'; }
  done >> "$out/ab.jsonl"
  rm -rf "$rows"
}
for ((r = 1; r <= rounds; ++r)); do
  if [ -n "${AB_DEADLINE_EPOCH:-}" ] && [ "$(date +%s)" -ge "$AB_DEADLINE_EPOCH" ]; then
    echo "deadline: stopped before round $r" | tee -a "$out/ab.log"; break
  fi
  run_build A "$a" "$r"
  run_build B "$b" "$r"
  echo "round $r done at $(date -u +%T)" | tee -a "$out/ab.log"
done
{ date -u; nvidia-smi $q --format=csv,noheader; } >> "$out/env.txt"
