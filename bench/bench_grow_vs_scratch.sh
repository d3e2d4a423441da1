#!/usr/bin/env bash
# Growth (v2151 depth identity, v2153 fpi width, v2152 d_model/heads width) against training the
# large model from scratch at equal training FLOPs: tiny (4 layers, d_model 128, MLP 512) trained
# S1 steps, grown by `gen grow` to 6 layers (identity), to 6 layers + MLP 768 (both), and to
# d_model 256 / 8 heads / MLP 1024 (wide; without and with --noise 0.01), then trained S2 steps; the
# large model from scratch gets the steps that spend the same FLOPs, S2 + S1 x F(small) / F(large)
# (F = the plans' flops_per_token: the same tokens per step). Every run: cpu, B=4, T=32, one
# learning-rate schedule of its own length, the same data (the KJV's first 300 KB, as lib.sh's
# kjv_corpus: fixed, unlike the specs' text); the final validation loss is compared, and the cost to
# reach the small model's final validation loss (evaluated every 10 steps), in large-model steps of
# equal FLOPs: scratch, the first step from which it stays there; grown, S1 x F(small) / F(large) for the small model's
# training plus its own first such step.
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
command -v bible >/dev/null || { echo "bible missing — run scripts/install-deps.sh (Debian package bible-kjv)"; exit 2; }
(set +o pipefail; bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 300000 > "$TMP/corpus.txt")  # head closes the pipe early
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
model() { sed "s/^name: tiny/name: $1/; s/^n_layers: 4/n_layers: $2/; s/^ffn_hidden: 512/ffn_hidden: $3/; s/^d_model: 128/d_model: ${4:-128}/; s/^n_heads: 4/n_heads: ${5:-4}/" specs/models/tiny.yaml > "$TMP/$1.yaml"; }
model tiny-deep 6 512
model tiny-both 6 768
model tiny-wide 4 1024 256 8
for m in tiny "$TMP/tiny-deep.yaml" "$TMP/tiny-both.yaml" "$TMP/tiny-wide.yaml"; do
  "$GEN" specs/v2500.yaml --enable adamw --model "$m" --target cpu --batch 4 --seq 32 -o "$TMP/$(basename "$m" .yaml)" >/dev/null 2>&1
done
fpt() { tr -d ' \n\t' < "$1/plan.json" | grep -oE '"flops_per_token":[0-9]+' | cut -d: -f2; }
RUN=(--data "$TMP/data" --sample 0 --eval-every 10 --eval-batches 8)
val() { grep -o '"val_loss":[^,}]*' "$1" | tail -1 | cut -d: -f2; }
# reach FILE TARGET: the first evaluated step from which the validation loss stays <= TARGET to the
# end of the run (the first crossing alone is noise: 8 batches of 128 tokens), or "never"
reach() { grep -o '"step":[0-9]*\|"val_loss":[^,}]*' "$1" | awk -F: -v t="$2" '$1 == "\"step\"" { s = $2 } $1 == "\"val_loss\"" { if ($2 > t) c = ""; else if (c == "") c = s } END { print (c == "" ? "never" : c) }'; }
"$TMP/tiny/train" "${RUN[@]}" --steps "$S1" --ckpt-dir "$TMP/ck" --metrics "$TMP/small.jsonl" >/dev/null 2>&1
SRC=$(printf "%s/ck/step_%08d" "$TMP" "$S1")
TARGET=$(val "$TMP/small.jsonl")
echo "| large model | grown: $S1 small + $S2 large steps, val loss | scratch at equal FLOPs: steps, val loss | grown − scratch | large-model steps to the small's final val loss: grown, scratch |"
echo "|---|---|---|---|---|"
for n in deep both wide wide-noise; do
  m=${n%-noise}; extra=(); [ "$n" = wide-noise ] && extra=(--noise 0.01)
  "$GEN" grow "$SRC" --to "$TMP/tiny-$m" -o "$TMP/init-$n" "${extra[@]}" >/dev/null 2>&1
  "$TMP/tiny-$m/train" "${RUN[@]}" --steps "$S2" --init-from "$TMP/init-$n" --metrics "$TMP/grown-$n.jsonl" >/dev/null 2>&1
  fs=$(fpt "$TMP/tiny"); fl=$(fpt "$TMP/tiny-$m")
  sc=$(python3 -c "import sys; print(round($S2 + $S1 * $fs / $fl))")
  [ -f "$TMP/scratch-$m.jsonl" ] || "$TMP/tiny-$m/train" "${RUN[@]}" --steps "$sc" --metrics "$TMP/scratch-$m.jsonl" >/dev/null 2>&1
  g=$(val "$TMP/grown-$n.jsonl"); s=$(val "$TMP/scratch-$m.jsonl")
  rg=$(reach "$TMP/grown-$n.jsonl" "$TARGET"); rs=$(reach "$TMP/scratch-$m.jsonl" "$TARGET")
  [ "$rg" != never ] && rg=$(python3 -c "print(round($S1 * $fs / $fl + $rg))")
  case $n in
    deep) label="6 layers (identity depth growth)" ;;
    both) label="6 layers, MLP 768 (identity depth + fpi width)" ;;
    wide) label="d_model 256, 8 heads, MLP 1024 (v2152 width, exact copies)" ;;
    *) label="d_model 256, 8 heads, MLP 1024 (v2152 width, --noise 0.01)" ;;
  esac
  printf "| %s | %.4f | %d, %.4f | %+.4f | %s, %s |\n" "$label" "$g" "$sc" "$s" "$(python3 -c "print($g - $s)")" "$rg" "$rs"
done
echo
echo "small model after $S1 steps: val loss $TARGET"
