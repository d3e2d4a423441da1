#!/usr/bin/env bash
# Optimizer cost on the CPU trainer (issue 14): the step time of Muon (v2138: Newton-Schulz, 5
# quintic iterations = 3 sgemm per matrix per iteration) against AdamW and Lion on the same data,
# model and batch, runs interleaved (adamw, lion, muon, adamw, lion, muon...) so the shared
# machine's load hits all alike; and the optimizer-state bytes per parameter from each trainer's
# own memory line. CSV to stdout: model,B,T,optimizer,rep,ms_per_step,state_bytes_per_param.
# The step time is B*T over the trainer's mean tok/s (first step left out by the trainer).
# Usage: bench/bench_optim_cpu.sh [BUILD_DIR] [STEPS] [REPS]   (THREADS=2 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${2:-4}; REPS=${3:-2}; THREADS=${THREADS:-2}
GEN="$BUILD/generator/gen"
export OMP_NUM_THREADS=$THREADS
TMP=$(mktemp -d /tmp/hyp-bench-optim.XXXXXX); trap 'rm -rf "$TMP"' EXIT
cat specs/*/*.yaml > "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
echo "model,B,T,optimizer,rep,ms_per_step,state_bytes_per_param"
for shape in "tiny 4 64" "gpt2-124m 4 256"; do
  set -- $shape; M=$1; B=$2; T=$3
  for o in adamw lion muon; do
    "$GEN" specs/v2500.yaml --enable $o --model $M --target cpu --batch $B --seq $T -o "$TMP/$M-$o" >/dev/null 2>&1
  done
  n=$(python3 -c "import json,sys; print(sum(q['numel'] for q in json.load(open(sys.argv[1]))['params']))" "$TMP/$M-adamw/plan.json")
  for r in $(seq 1 "$REPS"); do
    for o in adamw lion muon; do
      "$TMP/$M-$o/train" --data "$TMP/data" --steps "$STEPS" --batch $B --seq $T --eval-every 0 > "$TMP/log" 2>&1
      tps=$(grep -o "mean [0-9]* tok/s" "$TMP/log" | grep -o "[0-9]*")
      st=$(grep "rank 0/1 memory" "$TMP/log" | grep -oE "optimizer [0-9]+ B" | grep -oE "[0-9]+")
      echo "$M,$B,$T,$o,$r,$(awk -v t="$tps" -v n=$((B * T)) 'BEGIN {printf "%.1f", 1000 * n / t}'),$(awk -v s="$st" -v n="$n" 'BEGIN {printf "%.2f", s / n}')"
    done
  done
done
