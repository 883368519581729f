#!/usr/bin/env bash
# One device call: lintrain's GPU tests, one training step of the benchmark model
# (d768, 2 blocks, 12 x 64, vocab 32000, B8 T512) per architecture and precision with
# kbench step, fla's model at the same shapes (scripts/peer/fla_model_step.py), and the
# trainer's quiet-card arm (timers off / step%50 / all; repeated) for the timers' cost and
# repeatability. Run on the GPU machine from the repo root:
#
#   bash scripts/device/step_side_by_side.sh BUNDLE OUT
#
# BUNDLE: lintrain_cuda_tests, kbench and trainer with the non-CUDA shared libraries they
# need and a run-in-bundle wrapper (or BUNDLE.tar.xz of it, unpacked first).
# OUT: env.txt, tests.log, step.log, step.jsonl, fla_step.jsonl, fla_step.log, bench.log,
# bench.jsonl. fla comes from .peer/fla-src, its Triton cache from .peer/triton-cache.tgz.
# ROWS overrides the kbench step rows ("arch precision [max-split-MiB]", comma-separated);
# BENCH_CONFIGS the trainer configs; SKIP_FLA=1 leaves out step 4.
set -uo pipefail
bundle=${1:?bundle}; out=${2:?out}
mkdir -p "$out"
if [ -f "$bundle.tar.xz" ] && [ ! -d "$bundle" ]; then tar -xJf "$bundle.tar.xz" -C "$(dirname "$bundle")"; fi
run() { "$bundle/run-in-bundle" "$@"; }
export LINTRAIN_TRAINER=$PWD/$bundle/bin/trainer   # the trainer tests run it as a subprocess
q="--query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version,temperature.gpu,utilization.gpu"
{ date -u; nvidia-smi $q --format=csv; } > "$out/env.txt"
start=$(date +%s)
since() { echo "$(( $(date +%s) - start )) s"; }

# 1. GPU tests.
run "$bundle/bin/lintrain_cuda_tests" 2>&1 | tail -n 200 > "$out/tests.log"
echo "lintrain_cuda_tests rc=${PIPESTATUS[0]} ($(since))" | tee -a "$out/tests.log"

# 2. lintrain: kbench step rows (and the allocator's oversize threshold at 16 MiB).
shape="--B 8 --T 512 --d 768 --layers 2 --heads 12 --head-dim 64 --vocab 32000 --chunk 32 --iters 100 --warmup 10"
IFS=, read -r -a rows <<< "${ROWS:-kda fp32,kda tf32,kda bf16,rwkv6 fp32,rwkv6 tf32,rwkv6 bf16}"
for row in "${rows[@]}"; do
  set -- $row
  extra=""; tag="$1_$2"; [ $# -ge 3 ] && { extra="--max-split-mb $3"; tag="${tag}_split$3"; }
  run "$bundle/bin/kbench" step --arch $1 --precision $2 $shape $extra --json /tmp/step_$tag.json >> "$out/step.log" 2>&1 \
    || echo "kbench step $row failed" | tee -a "$out/step.log"
  [ -f /tmp/step_$tag.json ] && { printf '{"row":"%s","result":' "$tag"; tr -d '\n' < /tmp/step_$tag.json; echo '}'; } >> "$out/step.jsonl"
done
echo "kbench step rows done ($(since))" | tee -a "$out/step.log"

# 3. the trainer's quiet-card arm on the KDA bf16 config: timers off twice (repeatability),
#    step%50 and all (the timers' cost), then the same for RWKV6.
for cfg in ${BENCH_CONFIGS:-bench-step-kda bench-step-rwkv6}; do
  for t in off off step%50 all; do
    tag=${cfg}_${t//%/_}_$RANDOM
    run "$bundle/bin/trainer" --config configs/$cfg.json --out /tmp/$tag --bench 200 --bench-warmup 20 --timers $t \
      --bench-out /tmp/$tag.json >> "$out/bench.log" 2>&1 || echo "trainer --bench $cfg $t failed" | tee -a "$out/bench.log"
    [ -f /tmp/$tag.json ] && { printf '{"config":"%s","timers":"%s","result":' "$cfg" "$t"; tr -d '\n' < /tmp/$tag.json; echo '}'; } >> "$out/bench.jsonl"
  done
done
echo "trainer bench done ($(since))" | tee -a "$out/bench.log"

# 4. fla's model step at the same shapes, same GPU, same call.
[ "${SKIP_FLA:-0}" = 1 ] && exit 0
export PYTHONPATH=$PWD/.peer/fla-src PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/triton-cache
END=$(( $(date +%s) + 240 ))
cache_in=(); [ -f .peer/triton-cache.tgz ] && cache_in=(--cache-in .peer/triton-cache.tgz)
timeout -s INT -k 5 255 python3 scripts/peer/fla_model_step.py --arch kda --arch rwkv6 --precision bf16 --precision fp32 \
  --steps 30 --warmup 3 --fast-autotune --deadline-epoch $END "${cache_in[@]}" --out "$out/fla_step.jsonl" \
  > "$out/fla_step.log" 2>&1
echo "fla rc=$? ($(since))" | tee -a "$out/fla_step.log"
{ date -u; nvidia-smi $q --format=csv,noheader; } >> "$out/env.txt"
