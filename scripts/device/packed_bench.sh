#!/usr/bin/env bash
# The cost of packed documents on the GPU: the training step of both bench configs on one token
# shard of ~300-token documents, with the state restarting at every document (on) and without
# (off, the model reading across documents), in interleaved rounds. Run from the repo root:
#
#   bash scripts/device/packed_bench.sh TRAINER OUT [ROUNDS [TRAINER ARGS...]]
#
# TRAINER  the trainer executable (a bundle's run-in-bundle wrapper beside bin/ is used)
# OUT      docs.bin (the shard), MODEL-{on,off}-R.{json,log} (trainer --bench-out and its log),
#          MODEL-compare-R.txt (trainer bench-compare off on), env.txt
# ROUNDS   rounds of off then on for each model (default 3)
# TRAINER ARGS  added to every run (e.g. --set train.cuda_graph=false: the packed steps run
#          eagerly, so the comparison without it would include the graph's gain)
# The shard: 4.0M tokens, vocabulary 32000, documents of 150..450 tokens (uniform, mean 300),
# each opened by token 0 (data.eot_token=0), seed 5.
set -uo pipefail
tr_exe=${1:?trainer}; out=${2:?out}; rounds=${3:-3}
shift $(( $# < 3 ? $# : 3 )); extra=("$@")
mkdir -p "$out"
wrap=(); [ -x "$(dirname "$(dirname "$tr_exe")")/run-in-bundle" ] && wrap=("$(dirname "$(dirname "$tr_exe")")/run-in-bundle")
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,driver_version,temperature.gpu --format=csv; } >> "$out/env.txt"
python3 - "$out/docs.bin" <<'PY'
import random, struct, sys
random.seed(5)
toks = []
while len(toks) < 4_000_000:
    toks.append(0)
    toks.extend(random.randrange(1, 32000) for _ in range(random.randint(150, 450)))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack(f"<{len(toks)}H", *toks))
PY
for r in $(seq 1 "$rounds"); do
  for m in kda rwkv6; do
    for v in off on; do
      [ $v = on ] && reset=true || reset=false
      "${wrap[@]}" "$tr_exe" --config configs/bench-step-$m.json --out "$out/run-$m-$v" --resume none --bench 150 \
        --bench-warmup 20 --timers step%50 --set data.source=tokens --set "data.path=$out/docs.bin" \
        --set data.eot_token=0 --set data.reset_state_at_eot=$reset --bench-out "$out/$m-$v-$r.json" "${extra[@]}" \
        > "$out/$m-$v-$r.log" 2>&1 || echo "bench $m $v round $r failed" | tee -a "$out/env.txt"
    done
  done
done
for m in kda rwkv6; do
  for r in $(seq 1 "$rounds"); do
    "${wrap[@]}" "$tr_exe" bench-compare "$out/$m-off-$r.json" "$out/$m-on-$r.json" > "$out/$m-compare-$r.txt" 2>&1
    echo "$m round $r: $(grep -E '^step ' "$out/$m-compare-$r.txt")"
  done
done
