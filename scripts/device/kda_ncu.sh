#!/usr/bin/env bash
# One device call: an ncu summary of each KDA kernel (the five launches of one fwd+bwd) at
# the given shapes, for the peer table (docs/BENCHMARKS.md). Run on the GPU machine from the
# repo root:
#
#   bash scripts/device/kda_ncu.sh BUNDLE OUT SHAPE...
#
# BUNDLE  a bundle holding kbench (scripts/device/side_by_side.sh says what a bundle is)
# SHAPE   B:T:H:D:dtype:chunk, e.g. 8:512:12:64:bf16:32
# OUT     ncu.csv (per shape a line "== SHAPE", then ncu --csv --page raw with the metrics
#         below), ncu.log
# Per kernel: duration, achieved occupancy, the tensor pipe's and L1/shared's share of peak,
# DRAM throughput, registers, shared memory a block, and the stall reasons (cycles a warp
# spends per issued instruction, by reason). Clocks are left as they are (--clock-control none).
# NCU_TIMEOUT: seconds per shape (default 280).
set -uo pipefail
bundle=${1:?bundle}; out=${2:?out}; shift 2
mkdir -p "$out"
metrics=gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,\
sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
l1tex__throughput.avg.pct_of_peak_sustained_active,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,\
sm__throughput.avg.pct_of_peak_sustained_elapsed,\
launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__grid_size,launch__block_size,\
launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,\
smsp__average_warp_latency_per_inst_issued.ratio,\
smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_selected_per_issue_active.ratio
for s in "$@"; do
  IFS=: read -r B T H D dt C <<< "$s"
  echo "== $s" | tee -a "$out/ncu.log" >> "$out/ncu.csv"
  timeout "${NCU_TIMEOUT:-280}" "$bundle/run-in-bundle" ncu --clock-control none -k regex:kda_ --launch-count 5 --metrics "$metrics" \
    --csv --page raw "$bundle/bin/kbench" kda --B "$B" --T "$T" --H "$H" --D "$D" --dtype "$dt" --chunk "$C" \
    --path fused --iters 1 --warmup 0 --sets 1 >> "$out/ncu.csv" 2>> "$out/ncu.log"
  echo "rc=$?" >> "$out/ncu.log"
done
tail -n 20 "$out/ncu.log"
