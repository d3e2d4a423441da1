#!/usr/bin/env bash
# bench_mup_coord.sh — the muP coordinate check (v2144/v2145; Yang et al. 2022, Fig. 5): a 2-layer
# GPT-2 (4 heads, MLP 4C, byte vocabulary) at widths 64..1024 under SP (v2144 scheme sp) and muP
# (v2144 mup + v2145, base width 64), trained STEPS Adam steps at a constant LR on one fixed batch
# of Bible text by tests/tools/mup_coord; the RMS of the residual stream after the embedding and
# each block and of the logits, per step, averaged over SEEDS initializations (the model's random
# init differs per width, so one seed is noisy). Writes bench/results/mup_coord.tsv and .svg.
# Usage: bench/bench_mup_coord.sh [BUILD_DIR]   (env: WIDTHS, STEPS, LR, SEEDS)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
WIDTHS=${WIDTHS:-"64 128 256 512 1024"}
STEPS=${STEPS:-4}
LR=${LR:-3e-3}
SEEDS=${SEEDS:-"1 2 3"}
OUT=$ROOT/bench/results
source "$ROOT/tests/gen/model_yaml.sh"
TMP=$(mktemp -d /tmp/hyp-mupcoord.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mkdir -p "$OUT"
bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 20000 > "$TMP/text.txt"
echo "# scheme width step tensor rms  (bench_mup_coord.sh: L=2 NH=4, B=4 T=32, $STEPS steps at LR $LR, base width 64, mean over seeds $SEEDS)" > "$OUT/mup_coord.tsv"
for W in $WIDTHS; do
  gpt2_yaml "w$W" "$W" 4 $((4 * W)) > "$TMP/w$W.yaml"
  for s in sp mup; do
    sel=adamw,init; [ $s = mup ] && sel=adamw,init,mu-transfer
    "$BUILD/generator/gen" "$ROOT/specs/v2500.yaml" --enable $sel --set v2144.scheme=$s --set v2144.base_width=64 \
      --model "$TMP/w$W.yaml" --target cpu --batch 4 --seq 32 -o "$TMP/$s$W" >/dev/null 2>&1
    for seed in $SEEDS; do "$BUILD/tests/mup_coord" "$TMP/$s$W/plan.json" "$TMP/text.txt" "$STEPS" "$LR" 4 32 "$seed"; done |
      awk -v s=$s -v w=$W '$1 == "coord" { k = $2 " " $3; if (!(k in n)) order[++m] = k; n[k]++; sum[k] += $4 }
        END { for (i = 1; i <= m; i++) print s, w, order[i], sum[order[i]] / n[order[i]] }' >> "$OUT/mup_coord.tsv"
  done
  echo "width $W done"
done
python3 "$ROOT/bench/mup_plot.py" coord "$OUT/mup_coord.tsv" "$OUT/mup_coord.svg"
# the summary: each tensor's RMS at the last step per width; widest / narrowest and max / min
for s in sp mup; do
  awk -v s=$s -v st="$STEPS" '$1 == s && $3 == st { if (!($4 in lo)) { lo[$4] = $5; mn[$4] = $5; mx[$4] = $5 }
      hi[$4] = $5; v[$4] = v[$4] sprintf(" %.3g", $5); if ($5 < mn[$4]) mn[$4] = $5; if ($5 > mx[$4]) mx[$4] = $5 }
    END { for (n in lo) printf "%s %-6s RMS after %d steps by width:%s; widest/narrowest %.2f, max/min %.2f\n", s, n, st, v[n], hi[n] / lo[n], mx[n] / mn[n] }' "$OUT/mup_coord.tsv" | sort
done
echo "wrote $OUT/mup_coord.tsv and $OUT/mup_coord.svg"
