#!/usr/bin/env bash
# Step-time overhead of the matrix optimizers against AdamW on the CPU trainer (issue 14): AdamW
# (v2132), Muon (v2138: 5 quintic Newton-Schulz iterations per hidden matrix, every step) and
# Shampoo (v2139: the L/R statistic GEMMs and the preconditioning GEMMs every step; the inverse
# 4th roots, float64 LAPACK dsyevd per block, every K steps), side by side in one run on the same
# data, batch and model, interleaved (adamw, muon, shampoo, ...), on tiny (d_model 128) and a
# wider GPT-2 ("wide": d_model 512, ffn 2048, 8 heads, 4 layers, byte vocabulary), block_size 1024.
# Rows (CPU time = user + sys; the steadier figure on a shared machine):
#   cpu_ms_per_step   of a run of 2S steps minus that of S steps, over S (start-up cancels):
#                     adamw, muon, and shampoo_step (roots only at step 1, in both runs: the
#                     per-step statistics and preconditioning work)
#   cpu_ms_per_root   shampoo_root: a run of R steps with the roots every step minus one with
#                     roots only at step 1, over R - 1 (one refresh of every block's roots)
#   ratio_vs_adamw    medians over REPS, over AdamW's; shampoo_every_K = (step + root / K) / AdamW,
#                     the amortized cost at precondition_frequency K (10 and 100, the default)
# S = 10 on tiny, 8 on wide: the shampoo_step runs both hold the step-1 roots (~21 s CPU on wide,
# the same work in both, but its CPU time varies by a second or two on a loaded machine), so S
# must be long enough for the difference to be the steps'.
# Usage: bench/bench_optim_overhead.sh [BUILD_DIR] [REPS]   (THREADS=1 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; REPS=${2:-3}; THREADS=${THREADS:-1}
GEN="$BUILD/generator/gen"
export OMP_NUM_THREADS=$THREADS
TMP=$(mktemp -d /tmp/hyp-bench-overhead.XXXXXX); trap 'rm -rf "$TMP"' EXIT
# (head closes the pipe early: without pipefail for this line, bible's SIGPIPE is not a failure)
set +o pipefail
bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 1000000 > "$TMP/corpus.txt"
set -o pipefail
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
sed -e 's/^name: tiny/name: wide/' -e 's/^d_model: 128/d_model: 512/' -e 's/^ffn_hidden: 512/ffn_hidden: 2048/' \
    -e 's/^n_heads: 4/n_heads: 8/' -e '/^params_note/d' specs/models/tiny.yaml > "$TMP/wide.yaml"
cpu() { # cpu DIR STEPS: CPU seconds of one run
  /usr/bin/time -f "%U %S" -o "$TMP/t" "$TMP/$1/train" --data "$TMP/data" --steps "$2" --batch 4 --seq 64 --eval-every 0 > "$TMP/log" 2>&1
  awk '{ print $1 + $2 }' "$TMP/t"
}
ms() { awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { printf "%.1f", 1000 * (b - a) / n }'; }
echo "kind,model,B,T,optimizer,rep,value"
for shape in "tiny 10 3" "$TMP/wide.yaml 8 2"; do
  set -- $shape; M=$1; S=$2; R=$3; name=$(basename "$M" .yaml)
  for o in adamw muon; do
    "$GEN" specs/v2500.yaml --enable $o --model "$M" --target cpu --batch 4 --seq 64 -o "$TMP/$name-$o" >/dev/null 2>&1
  done
  for k in 1 100000; do
    "$GEN" specs/v2500.yaml --enable shampoo --set v2139.start_preconditioning_step=1 --set v2139.precondition_frequency=$k \
      --model "$M" --target cpu --batch 4 --seq 64 -o "$TMP/$name-shampoo$k" >/dev/null 2>&1
  done
  for r in $(seq 1 "$REPS"); do
    for o in adamw muon shampoo100000; do
      a=$(cpu "$name-$o" "$S"); b=$(cpu "$name-$o" $((2 * S)))
      echo "cpu_ms_per_step,$name,4,64,${o/shampoo100000/shampoo_step},$r,$(ms "$a" "$b" "$S")"
    done
    a=$(cpu "$name-shampoo100000" "$R"); b=$(cpu "$name-shampoo1" "$R")
    echo "cpu_ms_per_root,$name,4,64,shampoo_root,$r,$(ms "$a" "$b" $((R - 1)))"
  done
done | tee "$TMP/rows.csv"
med() { grep ",$1,4,64,$2," "$TMP/rows.csv" | cut -d, -f7 | sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
for name in tiny wide; do
  base=$(med "$name" adamw); step=$(med "$name" shampoo_step); root=$(med "$name" shampoo_root)
  for o in muon shampoo_step; do
    echo "ratio_vs_adamw,$name,4,64,$o,median,$(awk -v a="$(med "$name" $o)" -v b="$base" 'BEGIN { printf "%.2f", a / b }')"
  done
  for k in 10 100; do
    echo "ratio_vs_adamw,$name,4,64,shampoo_every_$k,median,$(awk -v s="$step" -v r="$root" -v k=$k -v b="$base" 'BEGIN { printf "%.2f", (s + r / k) / b }')"
  done
done
