#!/usr/bin/env bash
# Convergence of the low-precision modes against fp32 at equal steps (issue 12): tiny, B=8 x T=64,
# $STEPS steps (default 300) at lr $LR (default 2e-3, warmup 20 then cosine, clip 1), the same seed
# and data, on a fixed KJV slice (Gen 1:1 - Deu 34:12, first 600,000 characters, 10% validation),
# one thread each. Rows: fp32; bf16 (v2102: bf16 activations + oneDNN bf16 GEMMs, fp32 master);
# fp16 + loss scaling (v2102 dtype fp16 + v2162: GEMM operands rounded to IEEE fp16); SR-bf16
# (v2161: bf16 parameters, no fp32 master, stochastic rounding); and the ablation "nearest-bf16"
# (v2161 rounding nearest: bf16 parameters, no master, round to nearest). Prints validation loss at
# every $EVAL steps (default 100; 8 batches) and the difference to fp32 at the end, plus each
# trainer's memory line (params bytes per parameter).
# Usage: bench/bench_precision_convergence.sh [BUILD_DIR]     (env: STEPS, LR, EVAL, ROWS)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${STEPS:-300}; LR=${LR:-2e-3}; EVAL=${EVAL:-100}
ROWS=${ROWS:-"fp32 bf16 fp16-ls sr-bf16 nearest-bf16"}
GEN="$BUILD/generator/gen"
export OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/hyp-bench-prec.XXXXXX); trap 'rm -rf "$TMP"' EXIT
command -v bible >/dev/null || { echo "bible missing — run scripts/install-deps.sh (Debian package bible-kjv)" >&2; exit 2; }
set +o pipefail # head closes the pipe early
bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 600000 > "$TMP/corpus.txt"
set -o pipefail
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" --val-fraction 0.1 >/dev/null
BASE=adamw,warmup,cosine,clip
G=(specs/v2500.yaml --model tiny --target cpu --batch 8 --seq 64 --set v2130.warmup_steps=20)
sel() {
  case $1 in
    fp32) echo "--enable $BASE" ;;
    bf16) echo "--enable $BASE,bf16" ;;
    fp16-ls) echo "--enable $BASE,fp16-amp" ;;
    sr-bf16) echo "--enable $BASE,bf16,sr" ;;
    nearest-bf16) echo "--enable $BASE,bf16,sr --set v2161.rounding=nearest" ;;
    *) echo "unknown row $1" >&2; exit 2 ;;
  esac
}
printf "# tiny B=8 T=64, %s steps, lr %s (warmup 20, cosine), KJV slice; validation loss (8 batches)\n" "$STEPS" "$LR"
printf "%-14s" "row"; for s in $(seq "$EVAL" "$EVAL" "$STEPS"); do printf " %9s" "val@$s"; done; printf " %10s %10s\n" "vs fp32" "params B/p"
v32=""
for row in $ROWS; do
  # shellcheck disable=SC2046
  "$GEN" "${G[@]}" $(sel "$row") -o "$TMP/$row" >/dev/null 2>&1
  "$TMP/$row/train" --data "$TMP/data" --steps "$STEPS" --lr "$LR" --eval-every "$EVAL" --eval-batches 8 --seed 1 \
    --metrics "$TMP/$row.jsonl" > "$TMP/$row.log" 2>&1
  vals=$(grep -o '"val_loss":[^,}]*' "$TMP/$row.jsonl" | cut -d: -f2)
  last=$(echo "$vals" | tail -1)
  [ "$row" = fp32 ] && v32=$last
  nparam=$(tr -d ' \n\t' < "$TMP/$row/plan.json" | grep -oE '"param_bytes":[0-9]+' | cut -d: -f2) # f32 layout: 4 B each
  pbytes=$(grep -oE 'params [0-9]+ B' "$TMP/$row.log" | head -1 | grep -oE '[0-9]+')
  printf "%-14s" "$row"; for v in $vals; do printf " %9.4f" "$v"; done
  printf " %+10.4f %10.2f\n" "$(awk -v a="$last" -v b="${v32:-$last}" 'BEGIN { print a - b }')" \
    "$(awk -v b="$pbytes" -v n="$nparam" 'BEGIN { print b / (n / 4) }')"
done
