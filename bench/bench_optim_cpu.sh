#!/usr/bin/env bash
# Optimizers on the CPU trainer (issue 14), two measurements, CSV to stdout:
#  1. state,MODEL,OPT,bytes_per_param: the optimizer-state bytes per parameter from each trainer's
#     own memory line (`rank 0/1 memory ... optimizer N B`, fp32, np=1) for AdamW (v2132), Lion
#     (v2134), Adam-mini (v2136), schedule-free AdamW (v2137) and Muon (v2138);
#  2. the step time of Muon (Newton-Schulz: 5 quintic iterations, 3 sgemm each, per hidden
#     matrix) against AdamW on the same data, model and batch, runs interleaved (adamw, muon,
#     adamw, muon, ...): cpu_ms_per_step = the CPU time (user + sys) of a run of 2S steps minus
#     that of S steps, over S (start-up cancels; on a shared, overloaded machine CPU time is the
#     steadier figure), and wall_ms_per_step = B*T over the trainer's mean tok/s.
# Usage: bench/bench_optim_cpu.sh [BUILD_DIR] [REPS]   (THREADS=1 by default: one thread, so CPU
# time is the work and no OpenMP barrier spins on an oversubscribed machine)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; REPS=${2:-3}; THREADS=${THREADS:-1}
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
for shape in "tiny 4 64 10" "gpt2-124m 4 256 1"; do
  set -- $shape; M=$1; B=$2; T=$3; S=$4
  for o in adamw muon; do
    "$GEN" specs/v2500.yaml --enable $o --model $M --target cpu --batch $B --seq $T -o "$TMP/$M-$o" >/dev/null 2>&1
  done
  for r in $(seq 1 "$REPS"); do
    for o in adamw muon; do
      for n in $S $((2 * S)); do
        /usr/bin/time -f "%U %S" -o "$TMP/cpu$n" "$TMP/$M-$o/train" --data "$TMP/data" --steps $n --batch $B --seq $T --eval-every 0 > "$TMP/log$n" 2>&1
      done
      tps=$(grep -o "mean [0-9]* tok/s" "$TMP/log$((2 * S))" | grep -o "[0-9]*")
      echo "wall_ms_per_step,$M,$B,$T,$o,$r,$(awk -v t="$tps" -v n=$((B * T)) 'BEGIN {printf "%.1f", 1000 * n / t}')"
      echo "cpu_ms_per_step,$M,$B,$T,$o,$r,$(awk -v S="$S" -v a="$(cat "$TMP/cpu$S")" -v b="$(cat "$TMP/cpu$((2 * S))")" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.1f", 1000 * ((y[1] + y[2]) - (x[1] + x[2])) / S}')"
    done
  done
done
