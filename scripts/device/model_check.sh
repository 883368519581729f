#!/usr/bin/env bash
# One device call for the model milestone: lintrain's GPU tests, one training step of the
# TARGETS.md model per architecture and precision (kbench step), the fla equivalence check
# (scripts/fla_equivalence.py against lintrain's model-dump) and a short trainer run with
# stage timers. Run on the GPU machine from the repo root:
#
#   bash scripts/device/model_check.sh BUNDLE OUT [ARCHS] [TEST_FILTER]
#
# BUNDLE  a folder of executables plus the non-CUDA shared libraries they need, with a run-in-bundle wrapper that sets the library path, holding lintrain_cuda_tests,
#         kbench and trainer (or BUNDLE.tar.xz of it, unpacked first)
# OUT     where results go: env.txt, tests.log, step.jsonl, step.log, equiv.log, trainer.log
# ARCHS   architectures for the step and equivalence rows (default "kda rwkv6")
# TEST_FILTER  Catch2 filter for the GPU tests (default: all)
# fla comes from .peer/fla-src (docs/PEER.md). SKIP_EQUIV=1 leaves out step 3, SKIP_TRAINER=1 step 4.
set -uo pipefail
bundle=${1:?bundle}; out=${2:?out}; archs=${3:-kda rwkv6}; filter=${4:-}
mkdir -p "$out"
if [ -f "$bundle.tar.xz" ] && [ ! -d "$bundle" ]; then tar -xJf "$bundle.tar.xz" -C "$(dirname "$bundle")"; fi
run() { "$bundle/run-in-bundle" "$@"; }
export LINTRAIN_TRAINER=$PWD/$bundle/bin/trainer   # the trainer tests run it as a subprocess
q="--query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version,temperature.gpu,utilization.gpu"
{ date -u; nvidia-smi $q --format=csv; } > "$out/env.txt"
start=$(date +%s)

# 1. GPU tests.
run "$bundle/bin/lintrain_cuda_tests" $filter 2>&1 | tail -n 300 > "$out/tests.log"
echo "lintrain_cuda_tests rc=${PIPESTATUS[0]} ($(( $(date +%s) - start )) s)" | tee -a "$out/tests.log"

# 2. One training step of the TARGETS.md model (d768, 2 blocks, 12 x 64, vocab 32000, B8 T512).
for arch in $archs; do
  for prec in fp32 bf16; do
    run "$bundle/bin/kbench" step --arch $arch --precision $prec --B 8 --T 512 --d 768 --layers 2 --heads 12 \
      --head-dim 64 --vocab 32000 --chunk 32 --iters 50 --warmup 5 --json /tmp/step_${arch}_$prec.json \
      >> "$out/step.log" 2>&1 || echo "kbench step $arch $prec failed" | tee -a "$out/step.log"
    [ -f /tmp/step_${arch}_$prec.json ] && { tr -d '\n' < /tmp/step_${arch}_$prec.json; echo; } >> "$out/step.jsonl"
  done
done
echo "steps done at $(( $(date +%s) - start )) s" | tee -a "$out/step.log"

# 3. fla equivalence: lintrain fp32 on the GPU (fused mixers) and f64 on the CPU (ops path)
#    against fla's model in float64.
export PYTHONPATH=$PWD/.peer/fla-src PYTHONUNBUFFERED=1
[ "${SKIP_EQUIV:-0}" = 1 ] || for arch in $archs; do
  for mode in "cuda f32" "cpu f64"; do
    set -- $mode
    d=/tmp/dump_${arch}_$1
    run "$bundle/bin/kbench" model-dump --arch $arch --device $1 --dtype $2 --B 2 --T 128 --d 768 --layers 2 \
      --heads 12 --head-dim 64 --vocab 32000 --chunk 32 --out $d >> "$out/equiv.log" 2>&1
    echo "== $arch lintrain $1 $2 vs fla float64" >> "$out/equiv.log"
    timeout 240 python3 scripts/fla_equivalence.py $d >> "$out/equiv.log" 2>&1
    echo "fla_equivalence $arch $1 rc=$? at $(( $(date +%s) - start )) s" | tee -a "$out/equiv.log"
  done
done

# 4. A short trainer run on the GPU with stage timers.
if [ "${SKIP_TRAINER:-0}" != 1 ] && [ -f configs/quick.json ]; then
  run "$bundle/bin/trainer" --config configs/quick.json --device cuda --steps 200 --out /tmp/quick-gpu \
    > "$out/trainer.log" 2>&1
  echo "trainer rc=$? at $(( $(date +%s) - start )) s" | tee -a "$out/trainer.log"
fi
{ date -u; nvidia-smi $q --format=csv,noheader; } >> "$out/env.txt"
