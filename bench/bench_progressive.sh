#!/usr/bin/env bash
# Progressive training (v2150, `gen progressive`) against the large model trained from scratch:
# tiny with 2 layers for S1 steps grown (identity depth, v2151) into tiny's 4 layers for S2 steps,
# one cosine schedule over S1 + S2; the 4-layer model from scratch (a) at equal training FLOPs,
# S2 + S1 x F(2 layers) / F(4 layers) steps (F = the plans' flops_per_token; the same tokens per
# step), and (b) at equal tokens, S1 + S2 steps; each with a cosine schedule of its own length; and
# the control (c): the 2-layer model alone for S1 + S2 steps (does the growth add anything?).
# Every run: cpu, B=4, T=32, AdamW at tiny's lr with WARMUP steps of linear warmup (v2130; 0: none —
# then the 4-layer model stalls on a plateau and loses even to the 2-layer one, see docs/scaling.md),
# the KJV's first 300 KB (as lib.sh's kjv_corpus),
# one training seed per row (--seed: initialization and data order). Compared: the final
# validation loss (16 batches), and the FLOPs. Usage:
#   bench/bench_progressive.sh [BUILD_DIR] [S1] [S2] [SEEDS] [WARMUP]   (defaults 300 300 "1 2 3" 50;
#   about 9 minutes on 2 cores)
# Prints a markdown table (docs/scaling.md shows one run of it). Never run by ctest.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
S1=${2:-300}
S2=${3:-300}
SEEDS=${4:-1 2 3}
WARMUP=${5:-50}
GEN="$BUILD/generator/gen"
TMP=$(mktemp -d /tmp/hyp-prog.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1
cd "$ROOT"
command -v bible >/dev/null || { echo "bible missing — run scripts/install-deps.sh (Debian package bible-kjv)"; exit 2; }
(set +o pipefail; bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 300000 > "$TMP/corpus.txt")  # head closes the pipe early
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
sed "s/^name: tiny/name: tiny-2L/; s/^n_layers: 4/n_layers: 2/" specs/models/tiny.yaml > "$TMP/tiny-2L.yaml"
GOPT=(--enable adamw,cosine,warmup --set "v2130.warmup_steps=$WARMUP" --target cpu --batch 4 --seq 32)
"$GEN" specs/v2500.yaml "${GOPT[@]}" --model tiny -o "$TMP/big" >/dev/null 2>&1
"$GEN" specs/v2500.yaml "${GOPT[@]}" --model "$TMP/tiny-2L.yaml" -o "$TMP/small" >/dev/null 2>&1
fpt() { tr -d ' \n\t' < "$1/plan.json" | grep -oE '"flops_per_token":[0-9]+' | cut -d: -f2; }
fs=$(fpt "$TMP/small"); fl=$(fpt "$TMP/big")
SC=$(python3 -c "print(round($S2 + $S1 * $fs / $fl))")
TOK=128
val() { grep -o '"val_loss":[^,}]*' "$1" | tail -1 | cut -d: -f2; }
RUN=(--data "$TMP/data" --sample 0 --eval-every 50 --eval-batches 16)
gf() { python3 -c "print(f'{$1 * $TOK * $2 / 1e9:.2f}')"; }
echo "| seed | progressive 2 → 4 layers ($S1 + $S2 steps): val loss | 4 layers from scratch, equal FLOPs ($SC steps) | from scratch, equal tokens ($((S1 + S2)) steps) | 2 layers only ($((S1 + S2)) steps) | progressive − scratch (equal FLOPs) |"
echo "|---|---|---|---|---|---|"
sp=0; ss=0; st=0; sc=0; n=0
for seed in $SEEDS; do
  "$GEN" progressive specs/v2500.yaml --stages "$TMP/tiny-2L.yaml:$S1,tiny:$S2" -o "$TMP/prog-$seed" "${GOPT[@]}" -- "${RUN[@]}" --seed "$seed" > "$TMP/prog-$seed.log" 2>&1 || { tail -20 "$TMP/prog-$seed.log"; exit 1; }
  "$TMP/big/train" "${RUN[@]}" --seed "$seed" --steps "$SC" --metrics "$TMP/scratch-$seed.jsonl" >/dev/null 2>&1
  "$TMP/big/train" "${RUN[@]}" --seed "$seed" --steps $((S1 + S2)) --metrics "$TMP/tokens-$seed.jsonl" >/dev/null 2>&1
  "$TMP/small/train" "${RUN[@]}" --seed "$seed" --steps $((S1 + S2)) --metrics "$TMP/small-$seed.jsonl" >/dev/null 2>&1
  p=$(val "$TMP/prog-$seed/metrics.jsonl"); s=$(val "$TMP/scratch-$seed.jsonl"); t=$(val "$TMP/tokens-$seed.jsonl"); c=$(val "$TMP/small-$seed.jsonl")
  printf "| %s | %.4f | %.4f | %.4f | %.4f | %+.4f |\n" "$seed" "$p" "$s" "$t" "$c" "$(python3 -c "print($p - $s)")"
  sp=$(python3 -c "print($sp + $p)"); ss=$(python3 -c "print($ss + $s)"); st=$(python3 -c "print($st + $t)"); sc=$(python3 -c "print($sc + $c)"); n=$((n + 1))
done
printf "| mean | %.4f | %.4f | %.4f | %.4f | %+.4f |\n" "$(python3 -c "print($sp / $n)")" "$(python3 -c "print($ss / $n)")" "$(python3 -c "print($st / $n)")" "$(python3 -c "print($sc / $n)")" "$(python3 -c "print(($sp - $ss) / $n)")"
echo
echo "training GFLOPs (plans' flops_per_token x $TOK tokens per step): progressive $(python3 -c "print(f'{($S1 * $fs + $S2 * $fl) * $TOK / 1e9:.2f}')"), scratch equal FLOPs $(gf "$SC" "$fl"), scratch equal tokens $(gf $((S1 + S2)) "$fl"), 2 layers only $(gf $((S1 + S2)) "$fs")"
echo "flops_per_token: 2 layers $fs, 4 layers $fl; warmup $WARMUP steps, then cosine"
