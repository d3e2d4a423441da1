#!/usr/bin/env bash
# v2126 packing vs padding on a corpus of short documents (Debian's fortunes, one document per
# fortune; `apt-get install -y fortunes`), byte tokens, model tiny, cpu trainer, T in {128, 256} (tiny's context is 256).
#
# What it measures, side by side in one run:
#   * the document length histogram (from the .docs sidecars `gen data --doc-sep %` writes),
#   * padding fraction: packing (this trainer: rows are T-token windows of the document stream)
#     wastes none; a padding trainer (each document alone in a row of T, the rest padding with the
#     loss masked; a document longer than T takes ceil(len/T) rows) wastes 1 - sum(len) /
#     (rows * T), computed exactly from the histogram,
#   * throughput of the trainer with packing (document-masked flash attention, positions
#     restarting per document) and without (the same model on the same rows, plain causal flash
#     attention), alternated REPS times each, one thread: tokens per CPU-second of the process
#     (user + system; the whole run, start-up included), best of the REPS runs — on a shared,
#     overloaded machine CPU time is far steadier than wall time (the wall tok/s are printed too),
#   * useful (non-pad) tokens/s: packing = its tokens/s (no pad); padding = the unmasked
#     trainer's tokens/s x (1 - padding fraction): a padding trainer computes every row densely
#     at the same shape, so it runs at that speed and a padding fraction of it is waste. This
#     trainer has no padding mode: the padding figures are computed from the histogram, not run.
# Usage: bench/bench_packing.sh [BUILD_DIR] [STEPS] [REPS] (defaults build 20 5; OMP_NUM_THREADS
# defaults to 1). Prints the histogram, the runs' tokens/s and one CSV line per T.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${2:-20}; REPS=${3:-5}
GEN="$BUILD/generator/gen"
FORT=/usr/share/games/fortunes
[ -d "$FORT" ] || { echo "bench_packing: $FORT missing — apt-get install -y fortunes" >&2; exit 2; }
TMP=$(mktemp -d /tmp/hyp-bench-packing.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# every fortune file (not the .dat indexes / .u8 links), each ending with a '%' line
for f in "$FORT"/*; do
  case "$f" in *.dat|*.u8) continue ;; esac
  [ -f "$f" ] || continue
  cat "$f"; tail -c1 "$f" | grep -q . && echo; echo "%"
done > "$TMP/fortunes.txt"
"$GEN" data "$TMP/fortunes.txt" -o "$TMP/data" --val-fraction 0.02 --doc-sep % >/dev/null  # writes the .docs

# document lengths (tokens) from the train sidecar and shard header
python3 - "$TMP/data/train_000000.docs" "$TMP/data/train_000000.bin" > "$TMP/lens.txt" <<'EOF'
import struct, sys
d = open(sys.argv[1], 'rb').read(); b = open(sys.argv[2], 'rb').read(1024)
n = struct.unpack_from('<i', d, 8)[0]; ntok = struct.unpack_from('<i', b, 8)[0]
off = list(struct.unpack_from('<%dQ' % n, d, 1024)) + [ntok]
for i in range(n): print(off[i + 1] - off[i])
EOF
echo "corpus: $(wc -c < "$TMP/fortunes.txt") bytes, $(wc -l < "$TMP/lens.txt") train documents"
sort -n "$TMP/lens.txt" | awk '{a[NR]=$1; s+=$1} END {printf "document tokens: mean %.1f, p10 %d, p50 %d, p90 %d, p99 %d, max %d\n", s/NR, a[int(NR*.1)+1], a[int(NR*.5)+1], a[int(NR*.9)+1], a[int(NR*.99)+1], a[NR]}'

# tokens per CPU-second of one run (1 thread: user + system time of the process, start-up included,
# which on a shared, overloaded machine is far steadier than wall time) and its windowed wall tok/s
run() { # trainer dir, T -> "cpu_tps wall_tps"
  local TIMEFORMAT='%U %S' t out
  t=$( { time "$1/train" --data "$TMP/data" --batch 8 --seq "$2" --steps "$STEPS" --eval-every 0 --lr 1e-3 > "$TMP/out" 2>&1; } 2>&1 )
  out=$(grep -o 'last [0-9]* steps [0-9.]* tok/s' "$TMP/out" | awk '{print $4}')
  echo "$t" | awk -v n=$((STEPS * 8 * $2)) -v w="$out" '{printf "%.0f %s\n", n / ($1 + $2), w}'
}
best() { sort -g | tail -1; }

echo "T,docs_per_row,pad_fraction_padding,rows_padding,rows_packing,cpu_tps_unmasked,cpu_tps_packing,useful_tps_padding,useful_tps_packing,useful_ratio"
for T in 128 256; do
  "$GEN" specs/v2500.yaml --enable adamw,flash --model tiny --target cpu --batch 8 --seq "$T" -o "$TMP/base$T" >/dev/null 2>&1
  "$GEN" specs/v2500.yaml --enable adamw,flash,packing --model tiny --target cpu --batch 8 --seq "$T" -o "$TMP/pack$T" >/dev/null 2>&1
  : > "$TMP/b$T"; : > "$TMP/p$T"
  for _ in $(seq "$REPS"); do
    run "$TMP/base$T" "$T" >> "$TMP/b$T"
    run "$TMP/pack$T" "$T" >> "$TMP/p$T"
  done
  echo "T=$T per run (tokens/CPU-s, wall tok/s): unmasked $(tr '\n' ',' < "$TMP/b$T") packing $(tr '\n' ',' < "$TMP/p$T")"
  tb=$(cut -d' ' -f1 "$TMP/b$T" | best); tp=$(cut -d' ' -f1 "$TMP/p$T" | best)
  awk -v T="$T" -v tb="$tb" -v tp="$tp" '{len = $1; s += len; rows += int((len + T - 1) / T)} END {
      pad = 1 - s / (rows * T); packrows = int((s + T - 1) / T)
      up = tb * (1 - pad)
      printf "%d,%.2f,%.4f,%d,%d,%.0f,%.0f,%.0f,%.0f,%.2f\n", T, NR / packrows, pad, rows, packrows, tb, tp, up, tp, tp / up }' "$TMP/lens.txt"
done
echo "useful_ratio = packing's useful tokens/s over a padding trainer's (one document per row, computed from the histogram at the unmasked trainer's measured speed); seed 002 claims 1.2-1.3x"
