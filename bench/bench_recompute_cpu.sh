#!/usr/bin/env bash
# Activation recompute on the CPU trainer (v2101 checkpointing, v2111 selective), side by side in
# one run: for $MODEL (default gpt2-124m) at B=8, T=256 on $THREADS threads (default 2), the plan's
# activation arena, the trainer's tokens/s and peak RSS without recompute, with every layer
# checkpointed, with every 2nd layer, with selective recompute of the attention probabilities
# (sel_att) and of those plus the MLP activation (selective, v2111's default), next to
# `gen size --recompute none|full|selective`'s activation peak for the same shape ($CONFIGS picks
# a subset, e.g. CONFIGS="none selective"). The
# configurations run interleaved ($ROUNDS rounds of $STEPS steps) so that a noisy neighbour slows
# them alike; tokens/s is given as the median and the best of every step after each run's first
# over all rounds (on a shared machine the best step is the least disturbed one). CSV to stdout.
# Usage: bench/bench_recompute_cpu.sh [BUILD_DIR] [STEPS] [DATA_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${2:-4}; DATA=${3:-data/kjv}; THREADS=${THREADS:-2}; ROUNDS=${ROUNDS:-2}
MODEL=${MODEL:-gpt2-124m}
GEN="$BUILD/generator/gen"
export OMP_NUM_THREADS=$THREADS
TMP=$(mktemp -d /tmp/hyp-bench.XXXXXX); trap 'rm -rf "$TMP"' EXIT
if [ ! -d "$DATA" ]; then echo "run scripts/demo.sh once first (it prepares data/kjv), or pass a data directory" >&2; exit 2; fi
CONFIGS=${CONFIGS:-none all every2 sel_att selective}
declare -A SEL=([none]="" [all]=",recompute" [every2]=",recompute" [sel_att]=",selective-recompute" [selective]=",selective-recompute")
declare -A SET=([none]="" [all]="" [every2]="--set v2101.policy=every_k --set v2101.k=2" [sel_att]="--set v2111.targets=attention"
  [selective]="--set v2111.targets=attention_mlp")
for c in $CONFIGS; do
  # shellcheck disable=SC2086
  "$GEN" specs/v2500.yaml --enable adamw,memory-planning${SEL[$c]} ${SET[$c]} --model "$MODEL" --target cpu \
    --batch 8 --seq 256 -o "$TMP/$c" >/dev/null 2>&1
done
size_act() {
  "$GEN" size --model "$MODEL" --batch 8 --seq 256 --hw host-cpu --dtype fp32 --recompute "$1" --json |
    tr -d ' \n\t' | grep -oE '"activations":[0-9.e+]+' | head -1 | cut -d: -f2
}
declare -A WANT=([none]=$(size_act none) [all]=$(size_act full) [every2]="" [sel_att]=$(size_act selective) [selective]="")
for r in $(seq 1 "$ROUNDS"); do
  for c in $CONFIGS; do
    /usr/bin/time -f "%M" -o "$TMP/rss.$c" "$TMP/$c/train" --data "$DATA" --steps "$STEPS" --eval-every 0 > "$TMP/log" 2>&1
    grep "^step" "$TMP/log" | tail -n +2 | grep -oE "[0-9]+ tok/s" | grep -oE "[0-9]+" >> "$TMP/tps.$c"
  done
done
echo "model,config,act_bytes,gen_size_act_bytes,tokens_per_s_median,tokens_per_s_best,steps_measured,peak_rss_mb"
for c in $CONFIGS; do
  act=$(tr -d ' \n\t' < "$TMP/$c/plan.json" | grep -oE '"act_bytes":[0-9]+' | cut -d: -f2)
  stats=$(sort -n "$TMP/tps.$c" | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m "," v[NR] "," NR }')
  echo "$MODEL,$c,$act,${WANT[$c]},$stats,$(( $(cat "$TMP/rss.$c") / 1024 ))"
done
