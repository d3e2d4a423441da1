#!/usr/bin/env bash
# bench_mup_transfer.sh — muTransfer (v2145) measured: an LR sweep of a 2-layer GPT-2 (4 heads,
# MLP 4C, byte vocabulary) at widths 64..512 under SP and under muP (v2144 mup + v2145, base
# width 64), each run STEPS AdamW steps (5 warmup, then constant LR; B=8, T=32) on Bible text with
# the generated trainer; the loss is the mean training loss of the last 10 steps. Then the
# transfer itself: the best LR found on the narrow proxy (width 64) trains the widest model, and
# its loss is compared with the best the widest model's own sweep found.
# Writes bench/results/mup_transfer.tsv and mup_transfer.svg; prints the best LR per width and
# scheme and the shift of the best LR from the narrowest to the widest width.
# Usage: bench/bench_mup_transfer.sh [BUILD_DIR]   (env: WIDTHS, LRS, STEPS, SCHEMES, NAME: the
# results file name, mup_transfer by default)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
WIDTHS=${WIDTHS:-"64 128 256 512"}
LRS=${LRS:-"0.0001220703125 0.000244140625 0.00048828125 0.0009765625 0.001953125 0.00390625 0.0078125 0.015625"}
STEPS=${STEPS:-100}
SCHEMES=${SCHEMES:-"sp mup"}
NAME=${NAME:-mup_transfer}
OUT=$ROOT/bench/results
source "$ROOT/tests/gen/model_yaml.sh"
TMP=$(mktemp -d /tmp/hyp-muptransfer.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT"
bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 200000 > "$TMP/corpus.txt"
"$BUILD/generator/gen" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
TSV=$OUT/$NAME.tsv
echo "# scheme width lr loss  (bench_mup_transfer.sh: L=2 NH=4, B=8 T=32, $STEPS steps, warmup 5, mean loss of the last 10)" > "$TSV"
run() { # run DIR LR -> mean loss of the last 10 steps (nan if it diverged)
  "$1/train" --data "$TMP/data" --steps "$STEPS" --eval-every 0 --lr "$2" --metrics "$TMP/m.jsonl" >/dev/null 2>&1 || true
  grep -o '"loss":[^,]*' "$TMP/m.jsonl" 2>/dev/null | cut -d: -f2 | tail -10 |
    awk '{ s += $1; n++ } END { if (n == 10 && s == s && s / n < 100) printf "%.5f", s / n; else print "nan" }'
}
for W in $WIDTHS; do
  gpt2_yaml "w$W" "$W" 4 $((4 * W)) > "$TMP/w$W.yaml"
  for s in $SCHEMES; do
    sel=adamw,warmup,init; [ $s = mup ] && sel=adamw,warmup,init,mu-transfer
    "$BUILD/generator/gen" "$ROOT/specs/v2500.yaml" --enable $sel --set v2130.warmup_steps=5 --set v2144.scheme=$s \
      --set v2144.base_width=64 --model "$TMP/w$W.yaml" --target cpu --batch 8 --seq 32 -o "$TMP/$s$W" >/dev/null 2>&1
    for lr in $LRS; do echo "$s $W $lr $(run "$TMP/$s$W" $lr)" >> "$TSV"; done
    echo "$s width $W done"
  done
done
python3 "$ROOT/bench/mup_plot.py" sweep "$TSV" "$OUT/$NAME.svg"
best() { awk -v s=$1 -v w=$2 '$1 == s && $2 == w && $4 != "nan" { if (!n++ || $4 < b) { b = $4; lr = $3 } } END { print lr, b }' "$TSV"; }
first=${WIDTHS%% *}; last=${WIDTHS##* }
for s in $SCHEMES; do
  for W in $WIDTHS; do read -r lr l <<< "$(best $s $W)"; echo "$s width $W: best LR $lr (loss $l)"; done
  read -r l0 _ <<< "$(best $s $first)"; read -r l1 b1 <<< "$(best $s $last)"
  echo "$s: best LR moves x$(awk -v a="$l0" -v b="$l1" 'BEGIN { r = b / a; if (r < 1) r = 1 / r; printf "%.2f", r }') from width $first to $last ($l0 -> $l1)"
  # the transfer: the proxy's best LR on the widest model (already in the sweep: same runs)
  t=$(awk -v s=$s -v w=$last -v lr="$l0" '$1 == s && $2 == w && $3 == lr { print $4 }' "$TSV")
  echo "$s: width $last trained at the width-$first best LR $l0: loss $t (its own best $b1 at LR $l1)"
done
echo "wrote $TSV and $OUT/$NAME.svg"
