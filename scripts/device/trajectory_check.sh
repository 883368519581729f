#!/usr/bin/env bash
# The trajectory check of both models in fp32 and bf16 (scripts/fla_trajectory.py): lintrain's
# run of configs/quick.json on DEVICE against fla's model + torch.optim.AdamW on the same
# batches, with the spread of two fla replays and both against the float64 run on the CPU.
# Run from the repo root:
#
#   bash scripts/device/trajectory_check.sh TRAINER FLA_PARENT OUT [DEVICE] [STEPS] [ARCHS]
#
# TRAINER     the trainer binary (or a wrapper such as a bundle's run-in-bundle + trainer)
# FLA_PARENT  the folder that holds fla's `fla/` package (it goes on PYTHONPATH)
# DEVICE      cuda (default) or cpu;  STEPS: 200 (default);  ARCHS: "kda rwkv6" (default)
# OUT/summary.txt gets each check's verdict lines; exit status 1 when one fails.
# The rates: KDA 1e-3, RWKV6 3e-4 (higher rates make the tiny model's fp32 training chaotic:
# docs/notes-training.md, 2026-12-05).
set -uo pipefail
trainer=${1:?trainer}; fla=${2:?folder holding fla/}; out=${3:?out}; device=${4:-cuda}; steps=${5:-200}; archs=${6:-kda rwkv6}
mkdir -p "$out"
[ -d "$fla/fla" ] || { echo "trajectory_check: no fla/ package in $fla" >&2; exit 2; }
fail=0
for arch in $archs; do
  lr=1e-3; [ "$arch" = rwkv6 ] && lr=3e-4
  common=(--config configs/quick.json --resume none --steps "$steps" --set model.arch=$arch --set train.lr=$lr
          --set train.checkpoint_every=50 --set train.keep_checkpoints=100)
  ref="$out/$arch-fp64"
  # shellcheck disable=SC2086
  $trainer "${common[@]}" --device cpu --set model.precision=fp64 --out "$ref" \
    --dump-trajectory "$ref/trajectory" > "$ref.log" 2>&1 || { echo "$arch fp64: trainer failed (see $ref.log)"; fail=1; continue; }
  for p in fp32 bf16; do
    d="$out/$arch-$p"
    # shellcheck disable=SC2086
    $trainer "${common[@]}" --device "$device" --set model.precision=$p --out "$d" \
      --dump-trajectory "$d/trajectory" > "$d.log" 2>&1 || { echo "$arch $p: trainer failed (see $d.log)"; fail=1; continue; }
    PYTHONPATH="$fla${PYTHONPATH:+:$PYTHONPATH}" python3 scripts/fla_trajectory.py "$d/trajectory" "$d" \
      --device "$device" --spread --reference "$ref" > "$d.replay.txt" 2>&1
    rc=$?
    { echo "== $arch $p on $device (lr $lr, $steps steps): rc=$rc"; grep -E "^  worst|^PASS|^FAIL" "$d.replay.txt"; } \
      | tee -a "$out/summary.txt"
    [ $rc -eq 0 ] || fail=1
  done
done
exit $fail
