#!/usr/bin/env bash
# One device call: data-parallel training on the GPUs of this machine, through NCCL.
# Run on the GPU machine from the repo root:
#
#   bash scripts/device/dist_check.sh BUNDLE OUT
#
# BUNDLE: bin/trainer and bin/lintrain_cuda_tests with the non-CUDA shared libraries they need
# and a run-in-bundle wrapper (or BUNDLE.tar.xz, unpacked first). libnccl.so.2 is loaded at run
# time: $LINTRAIN_NCCL_LIB when set, else the CUDA toolkit's or the Python nvidia-nccl wheel's.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, exported here for every process).
#
# 1. GPU tests tagged [dist] (NCCL collectives in a world of one; trainer --nproc 1 against the
#    single-GPU run; with 2+ GPUs: 2 ranks, a killed rank, resume) -> OUT/tests.log
# 2. Weak scaling (per-GPU B8 T512, bf16, configs/bench-step-kda.json and -rwkv6.json): for N in
#    1 2 4 8 up to the GPU count, `trainer --nproc N --bench` with train.batch_size = 8 N, and the
#    single-process run without NCCL for reference; ROUNDS (default 2) interleaved rounds;
#    ZeRO-1 and bf16 reduction at the largest N -> OUT/scaling.jsonl, OUT/scaling.txt
set -uo pipefail
bundle=${1:?bundle}; out=${2:?out}
mkdir -p "$out"
if [ -f "$bundle.tar.xz" ] && [ ! -d "$bundle" ]; then tar -xJf "$bundle.tar.xz" -C "$(dirname "$bundle")"; fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -z "${LINTRAIN_NCCL_LIB:-}" ]; then
  for c in /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda-*/lib64/libnccl.so.2 \
           $(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null) \
           /usr/lib/x86_64-linux-gnu/libnccl.so.2; do
    [ -f "$c" ] && { LINTRAIN_NCCL_LIB=$(readlink -f "$c"); export LINTRAIN_NCCL_LIB; break; }
  done
fi
gpus=$(nvidia-smi -L | wc -l)
q="--query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version,temperature.gpu,utilization.gpu"
{ date -u; nvidia-smi $q --format=csv; echo "libnccl: ${LINTRAIN_NCCL_LIB:-(loader path)}"; echo "GPUs: $gpus"; } > "$out/env.txt"
cat "$out/env.txt"
start=$(date +%s)
since() { echo "$(( $(date +%s) - start )) s"; }

# 1. Tests.
"$bundle/run-in-bundle" "$bundle/bin/lintrain_cuda_tests" "[dist]" > "$out/tests.log" 2>&1
echo "lintrain_cuda_tests [dist] rc=$? ($(since))" | tee -a "$out/tests.log"
tail -n 3 "$out/tests.log"

# 2. Weak scaling.
ns=""; for n in 1 2 4 8; do [ "$n" -le "$gpus" ] && ns="$ns $n"; done
top=${ns##* }
: > "$out/scaling.jsonl"
run_arm() {  # cfg tag nproc(0 = single process) extra...
  local cfg=$1 tag=$2 n=$3; shift 3
  local b=8; [ "$n" -gt 0 ] && b=$((8 * n))
  local dir=/tmp/dist_${tag}_$RANDOM np=(); [ "$n" -gt 0 ] && np=(--nproc "$n")
  "$bundle/run-in-bundle" "$bundle/bin/trainer" --config configs/$cfg.json --out $dir "${np[@]}" \
    --set train.batch_size=$b --bench ${STEPS:-100} --bench-warmup 20 --bench-out $dir/bench.json "$@" \
    >> "$out/scaling.log" 2>&1 || echo "$cfg $tag failed" | tee -a "$out/scaling.log"
  [ -f $dir/bench.json ] && python3 - "$cfg" "$tag" "$n" "$dir/bench.json" >> "$out/scaling.jsonl" <<'EOF'
import json, sys
cfg, tag, n, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
r = json.load(open(path))
d = r.get("dist", {})
print(json.dumps({"config": cfg, "arm": tag, "nproc": n, "ms": r["ms_per_step"], "tokens_per_s": r["tokens_per_s"],
                  "comm_ms": d.get("comm_ms"), "comm_exposed_ms": d.get("comm_exposed_ms"),
                  "hidden_fraction": d.get("hidden_fraction"), "warnings": r.get("warnings", [])}))
EOF
}
for round in $(seq 1 "${ROUNDS:-2}"); do
  for cfg in ${CONFIGS:-bench-step-kda bench-step-rwkv6}; do
    run_arm $cfg single 0
    for n in $ns; do run_arm $cfg n$n $n; done
    run_arm $cfg n${top}_zero1 $top --set dist.zero1=true
    run_arm $cfg n${top}_bf16 $top --set dist.reduce_dtype=bf16
    run_arm $cfg n${top}_no_overlap $top --set dist.overlap=false
  done
  echo "round $round done ($(since))" | tee -a "$out/scaling.log"
done
python3 - "$out/scaling.jsonl" > "$out/scaling.txt" <<'EOF'
import json, sys, collections, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)
for r in rows: by[(r["config"], r["arm"], r["nproc"])].append(r)
print(f"{'config':18} {'arm':16} {'N':>2} {'ms/step':>9} {'tok/s':>10} {'comm ms':>8} {'exposed':>8} {'hidden':>7} {'eff':>6}")
base = {}
for (cfg, arm, n), rs in sorted(by.items()):
    ms = statistics.median(r["ms"]["median"] for r in rs)
    tps = statistics.median(r["tokens_per_s"] for r in rs)
    if arm == "n1": base[cfg] = ms
for (cfg, arm, n), rs in sorted(by.items()):
    ms = statistics.median(r["ms"]["median"] for r in rs)
    tps = statistics.median(r["tokens_per_s"] for r in rs)
    c = [r["comm_ms"]["median"] for r in rs if r["comm_ms"]]
    e = [r["comm_exposed_ms"]["median"] for r in rs if r["comm_exposed_ms"]]
    h = [r["hidden_fraction"] for r in rs if r["hidden_fraction"] is not None]
    eff = base.get(cfg, 0) / ms if n > 0 and base.get(cfg) else float("nan")
    print(f"{cfg:18} {arm:16} {n:>2} {ms:9.3f} {tps:10.0f} {statistics.median(c) if c else float('nan'):8.3f} "
          f"{statistics.median(e) if e else float('nan'):8.3f} {statistics.median(h) if h else float('nan'):7.2f} {eff:6.3f}")
EOF
cat "$out/scaling.txt"
echo "done ($(since))"
