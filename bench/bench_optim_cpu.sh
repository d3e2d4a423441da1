#!/usr/bin/env bash
# Optimizers on the CPU trainer (issue 14), two measurements, CSV to stdout:
#  1. state,MODEL,OPT,bytes_per_param: the optimizer-state bytes per parameter from each trainer's
#     own memory line (`rank 0/1 memory ... optimizer N B`, fp32, np=1) for AdamW (v2132), Lion
#     (v2134), Adam-mini (v2136), schedule-free AdamW (v2137) and Muon (v2138);
#  2. step,MODEL,B,T,OPT,REP,ms_per_step: the step time of Muon (Newton-Schulz: 5 quintic
#     iterations, 3 sgemm each, per hidden matrix) against AdamW on the same data, model and batch,
#     runs interleaved (adamw, muon, adamw, muon, ...) so the shared machine's load hits both
#     alike; ms_per_step = B*T over the trainer's mean tok/s (its first step left out).
# Usage: bench/bench_optim_cpu.sh [BUILD_DIR] [REPS]   (THREADS=2 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; REPS=${2:-3}; THREADS=${THREADS:-2}
GEN="$BUILD/generator/gen"
export OMP_NUM_THREADS=$THREADS
TMP=$(mktemp -d /tmp/hyp-bench-optim.XXXXXX); trap 'rm -rf "$TMP"' EXIT
cat specs/*/*.yaml > "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
echo "kind,model,B,T,optimizer,rep,value"
for M in tiny gpt2-124m; do
  for o in adamw lion adam-mini schedule-free muon; do
    "$GEN" specs/v2500.yaml --enable $o --model $M --target cpu --batch 1 --seq 64 -o "$TMP/m-$o" >/dev/null 2>&1
    n=$(python3 -c "import json,sys; print(sum(q['numel'] for q in json.load(open(sys.argv[1]))['params']))" "$TMP/m-$o/plan.json")
    "$TMP/m-$o/train" --data "$TMP/data" --steps 1 --batch 1 --seq 64 --eval-every 0 > "$TMP/log" 2>&1
    st=$(grep "rank 0/1 memory" "$TMP/log" | grep -oE "optimizer [0-9]+ B" | grep -oE "[0-9]+")
    echo "state_bytes_per_param,$M,1,64,$o,1,$(awk -v s="$st" -v n="$n" 'BEGIN {printf "%.3f", s / n}')"
  done
done
for shape in "tiny 4 64 20" "gpt2-124m 4 256 3"; do
  set -- $shape; M=$1; B=$2; T=$3; S=$4
  for o in adamw muon; do
    "$GEN" specs/v2500.yaml --enable $o --model $M --target cpu --batch $B --seq $T -o "$TMP/$M-$o" >/dev/null 2>&1
  done
  for r in $(seq 1 "$REPS"); do
    for o in adamw muon; do
      "$TMP/$M-$o/train" --data "$TMP/data" --steps "$S" --batch $B --seq $T --eval-every 0 > "$TMP/log" 2>&1
      tps=$(grep -o "mean [0-9]* tok/s" "$TMP/log" | grep -o "[0-9]*")
      echo "ms_per_step,$M,$B,$T,$o,$r,$(awk -v t="$tps" -v n=$((B * T)) 'BEGIN {printf "%.1f", 1000 * n / t}')"
    done
  done
done
