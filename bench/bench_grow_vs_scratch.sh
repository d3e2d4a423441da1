#!/usr/bin/env bash
# Growth (v2151 depth identity, v2153 fpi width) against training the large model from scratch at
# equal training FLOPs: tiny (4 layers, MLP 512) trained S1 steps, grown by `gen grow` to 6 layers
# (identity) and to 6 layers + MLP 768 (both), then trained S2 steps; the large model from scratch
# gets the steps that spend the same FLOPs, S2 + S1 x F(small) / F(large) (F = the plans'
# flops_per_token: the same tokens per step). Every run: cpu, B=4, T=32, one learning-rate
# schedule of its own length, the same data; the final validation loss is compared.
# Usage: bench/bench_grow_vs_scratch.sh [BUILD_DIR] [S1] [S2]   (defaults 150 150; minutes)
# Prints a markdown table (docs/scaling.md shows one run of it). Never run by ctest.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
S1=${2:-150}
S2=${3:-150}
GEN="$BUILD/generator/gen"
TMP=$(mktemp -d /tmp/hyp-grow.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1
cd "$ROOT"
cat specs/*/*.yaml > "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
model() { sed "s/^name: tiny/name: $1/; s/^n_layers: 4/n_layers: $2/; s/^ffn_hidden: 512/ffn_hidden: $3/" specs/models/tiny.yaml > "$TMP/$1.yaml"; }
model tiny-deep 6 512
model tiny-both 6 768
for m in tiny "$TMP/tiny-deep.yaml" "$TMP/tiny-both.yaml"; do
  "$GEN" specs/v2500.yaml --enable adamw --model "$m" --target cpu --batch 4 --seq 32 -o "$TMP/$(basename "$m" .yaml)" >/dev/null 2>&1
done
fpt() { tr -d ' \n\t' < "$1/plan.json" | grep -oE '"flops_per_token":[0-9]+' | cut -d: -f2; }
RUN=(--data "$TMP/data" --sample 0 --eval-every 50 --eval-batches 8)
val() { grep -o '"val_loss":[^,}]*' "$1" | tail -1 | cut -d: -f2; }
"$TMP/tiny/train" "${RUN[@]}" --steps "$S1" --ckpt-dir "$TMP/ck" --metrics "$TMP/small.jsonl" >/dev/null 2>&1
SRC=$(printf "%s/ck/step_%08d" "$TMP" "$S1")
echo "| large model | grown: $S1 small + $S2 large steps, val loss | scratch at equal FLOPs: steps, val loss | grown − scratch |"
echo "|---|---|---|---|"
for n in deep both; do
  "$GEN" grow "$SRC" --to "$TMP/tiny-$n" -o "$TMP/init-$n" >/dev/null 2>&1
  "$TMP/tiny-$n/train" "${RUN[@]}" --steps "$S2" --init-from "$TMP/init-$n" --metrics "$TMP/grown-$n.jsonl" >/dev/null 2>&1
  fs=$(fpt "$TMP/tiny"); fl=$(fpt "$TMP/tiny-$n")
  sc=$(python3 -c "import sys; print(round($S2 + $S1 * $fs / $fl))")
  "$TMP/tiny-$n/train" "${RUN[@]}" --steps "$sc" --metrics "$TMP/scratch-$n.jsonl" >/dev/null 2>&1
  g=$(val "$TMP/grown-$n.jsonl"); s=$(val "$TMP/scratch-$n.jsonl")
  label=$([ $n = deep ] && echo "6 layers (identity depth growth)" || echo "6 layers, MLP 768 (identity depth + fpi width)")
  printf "| %s | %.4f | %d, %.4f | %+.4f |\n" "$label" "$g" "$sc" "$s" "$(python3 -c "print($g - $s)")"
done
echo
echo "small model after $S1 steps: val loss $(val "$TMP/small.jsonl")"
