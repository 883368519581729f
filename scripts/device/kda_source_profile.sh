#!/usr/bin/env bash
# One run on the GPU machine: where inside one KDA kernel the warps wait. ncu's source counters
# (warp-state samples and instructions executed per SASS instruction, correlated with the CUDA
# source lines through the build's -lineinfo) for the named kernel at the given shapes. Run on
# the GPU machine from the repo root:
#
#   bash scripts/device/kda_source_profile.sh BUNDLE OUT KERNEL SHAPE...
#
# BUNDLE  a bundle holding kbench (scripts/device/side_by_side.sh says what a bundle is)
# KERNEL  a regex on the kernel name, e.g. intra_adjoint or inter_adjoint
# SHAPE   B:T:H:D:dtype:chunk, e.g. 8:512:12:64:bf16:32
# OUT     per shape and kernel: NAME.ncu-rep (the report), NAME.sass.csv (ncu --page source:
#         every SASS instruction with its samples by stall reason, under the CUDA line it came
#         from), NAME.details.txt (the sections' summary), profile.log. Clocks are left as they are
#         (--clock-control none). NCU_TIMEOUT: seconds per shape (default 240).
set -uo pipefail
bundle=${1:?bundle}; out=${2:?out}; kernel=${3:?kernel regex}; shift 3
mkdir -p "$out"
for s in "$@"; do
  IFS=: read -r B T H D dt C <<< "$s"
  name="${kernel//[^A-Za-z0-9]/_}_${B}x${T}x${H}x${D}_${dt}_c${C}"
  echo "== $s ($name)" >> "$out/profile.log"
  timeout "${NCU_TIMEOUT:-240}" "$bundle/run-in-bundle" ncu --clock-control none -k "regex:$kernel" --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section LaunchStats --section Occupancy \
    --import-source yes -f -o "$out/$name" \
    "$bundle/bin/kbench" kda --B "$B" --T "$T" --H "$H" --D "$D" --dtype "$dt" --chunk "$C" \
    --path fused --iters 1 --warmup 0 --sets 1 >> "$out/profile.log" 2>&1
  echo "collect rc=$?" >> "$out/profile.log"
  rep="$out/$name.ncu-rep"
  [ -f "$rep" ] || continue
  ncu -i "$rep" --page details > "$out/$name.details.txt" 2>> "$out/profile.log"
  ncu -i "$rep" --page source --csv --print-source cuda,sass > "$out/$name.sass.csv" 2>> "$out/profile.log" ||
    ncu -i "$rep" --page source --csv --print-source sass > "$out/$name.sass.csv" 2>> "$out/profile.log" ||
    echo "source page (sass) failed" >> "$out/profile.log"
done
tail -n 30 "$out/profile.log"
