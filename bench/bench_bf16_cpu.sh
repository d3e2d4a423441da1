#!/usr/bin/env bash
# v2102 on the cpu: the bf16 trainer (activations and their gradients in bf16, oneDNN bf16 GEMMs)
# against the fp32 trainer, gpt2-124m at B=8, T=256 (or $MODEL/$B/$T) on $THREADS threads
# (default 2), side by side in one run: the two trainers alternate for $ROUNDS rounds (default 2)
# of $STEPS steps (default 4) each, so a load change on this shared machine hits both. Per run:
# tokens/s over the steps after the first (the trainer's "last N steps"), MFU (fp32 trainer: vs
# the fp32 FMA peak; bf16 trainer: vs the bf16 matmul peak, both measured at start), the memory
# line and peak RSS; then the bf16/fp32 ratio of each round and of the medians.
# Usage: bench/bench_bf16_cpu.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${STEPS:-4}; ROUNDS=${ROUNDS:-2}; THREADS=${THREADS:-2}
MODEL=${MODEL:-gpt2-124m}; B=${B:-8}; T=${T:-256}
GEN="$BUILD/generator/gen"
export OMP_NUM_THREADS=$THREADS
TMP=$(mktemp -d /tmp/hyp-bench-bf16.XXXXXX); trap 'rm -rf "$TMP"' EXIT
if [ ! -d data/kjv ]; then echo "run scripts/demo.sh once first (it prepares data/kjv)" >&2; exit 2; fi
"$GEN" specs/v2500.yaml --enable adamw,memory-planning --model "$MODEL" --target cpu --batch $B --seq $T -o "$TMP/fp32" >/dev/null 2>&1
"$GEN" specs/v2500.yaml --enable adamw,memory-planning,bf16 --model "$MODEL" --target cpu --batch $B --seq $T -o "$TMP/bf16" >/dev/null 2>&1
for dt in fp32 bf16; do
  "$GEN" size specs/v2500.yaml --enable adamw,memory-planning --model "$MODEL" --hardware host-cpu --batch $B --seq $T \
    --dtype $dt 2>/dev/null | grep -i "activation" | head -3 | sed "s/^/gen size --dtype $dt: /" || true
done
echo "round,impl,tokens_per_s,mfu_pct,peak_rss_mib"
for r in $(seq 1 "$ROUNDS"); do
  for impl in fp32 bf16; do
    /usr/bin/time -f "%M" -o "$TMP/rss" "$TMP/$impl/train" --data data/kjv --steps "$STEPS" --eval-every 0 --sample 0 > "$TMP/log" 2>&1
    [ "$r" = 1 ] && grep -E "^rank .*memory|^MFU" "$TMP/log" | sed "s/^/$impl: /" >&2
    tps=$(grep -o "last [0-9]* steps [0-9]* tok/s" "$TMP/log" | grep -o "[0-9]* tok/s" | grep -o "[0-9]*")
    mfu=$(grep "^step" "$TMP/log" | tail -n +2 | grep -o "MFU *[0-9.]*" | awk '{s += $2; n++} END {printf "%.1f", s / n}')
    echo "$r,$impl,$tps,$mfu,$(( $(cat "$TMP/rss") / 1024 ))" | tee -a "$TMP/csv"
  done
done
awk -F, '{ v[$2] = v[$2] " " $3; if ($2 == "fp32") f[$1] = $3; else b[$1] = $3 }
  END { for (r in f) printf "round %s: bf16/fp32 = %.2f\n", r, b[r] / f[r] }' "$TMP/csv"
