#!/usr/bin/env bash
# Row layouts side by side on a corpus of short documents (Debian's fortunes, one document per
# fortune; `apt-get install -y fortunes`), byte tokens, model tiny, cpu trainer, one thread,
# T in {128, 256} (tiny's context is 256), 8 x T input tokens per step (where the shape is fixed):
#   contiguous  v2126 rows = contiguous: T-token windows of the document stream (no padding,
#               documents cut at row ends, attention masked per document)
#   best-fit    v2126 rows = best-fit (default): whole documents packed by best-fit decreasing
#               into rows of T+1 tokens, the tail padded (runtime/data/pack.c)
#   padded      v2127 with buckets = 1: one document per row of T (a longer one in chunks), 8 rows
#               per batch: the fixed-batch padding trainer, actually run
#   dynamic     v2127 with buckets = 3 (T, T/2, T/4), token_budget = 8 x T: one document per row
#               padded to its bucket, 8 / 16 / 32 rows (arena planned for 32 x T)
# For each: the epoch's padding fraction (the trainer's "rows:" line; 0 for contiguous), the mean
# per-step pad_frac (metrics), loss tokens per step, and useful (loss) tokens per CPU-second: the
# loss tokens of all steps over the process's user + system time (start-up included; on a shared,
# overloaded machine CPU time is far steadier than wall time), best of REPS alternated runs; and the
# steady-state figure: the loss tokens of steps 2..STEPS over the CPU time beyond that of a 1-step run
# of the same trainer (start-up, arena allocation, first step excluded), best of the REPS runs.
# Usage: bench/bench_packing.sh [BUILD_DIR] [STEPS] [REPS] (defaults build 20 3; OMP_NUM_THREADS
# defaults to 1). Prints the histogram, then one CSV line per (T, layout).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${2:-20}; REPS=${3:-3}
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
python3 - "$TMP/data/train_000000.docs" "$TMP/data/train_000000.bin" > "$TMP/lens.txt" <<'PY'
import struct, sys
d = open(sys.argv[1], 'rb').read(); b = open(sys.argv[2], 'rb').read(1024)
n = struct.unpack_from('<i', d, 8)[0]; ntok = struct.unpack_from('<i', b, 8)[0]
off = list(struct.unpack_from('<%dQ' % n, d, 1024)) + [ntok]
for i in range(n): print(off[i + 1] - off[i])
PY
echo "corpus: $(wc -c < "$TMP/fortunes.txt") bytes, $(wc -l < "$TMP/lens.txt") train documents"
sort -n "$TMP/lens.txt" | awk '{a[NR]=$1; s+=$1} END {printf "document tokens: mean %.1f, p10 %d, p50 %d, p90 %d, p99 %d, max %d\n", s/NR, a[int(NR*.1)+1], a[int(NR*.5)+1], a[int(NR*.9)+1], a[int(NR*.99)+1], a[NR]}'

# one run: trainer dir -> "useful_tokens_per_cpu_s epoch_pad_pct mean_step_pad_frac loss_tokens_per_step steady_useful_tokens_per_cpu_s"
cpu() { # trainer dir, steps -> user + system CPU seconds of the whole process (metrics in $TMP/m.jsonl)
  local TIMEFORMAT='%U %S' t
  t=$( { time "$1/train" --data "$TMP/data" --steps "$2" --eval-every 0 --lr 1e-3 --metrics "$TMP/m.jsonl" > "$TMP/out" 2>&1; } 2>&1 )
  echo "$t" | awk '{print $1 + $2}'
}
run() {
  local c1 cn; c1=$(cpu "$1" 1); cn=$(cpu "$1" "$STEPS")
  local pad; pad=$({ grep -o 'padding [0-9.]*%' "$TMP/out" || echo 0; } | grep -o '[0-9.]*' | head -1)
  local lts; lts=$({ grep -o '"loss_tokens":[0-9.e+]*' "$TMP/m.jsonl" || true; } | cut -d: -f2)
  local lt; lt=$(echo "$lts" | awk '{s += $1} END {print s + 0}')
  local l1; l1=$(echo "$lts" | head -1 | awk '{print $1 + 0}')
  local pf; pf=$({ grep -o '"pad_frac":[0-9.e+-]*' "$TMP/m.jsonl" || true; } | cut -d: -f2 | awk '{s += $1} END {print NR ? s / NR : 0}')
  # steady state: steps 2..STEPS over the CPU time the run spent beyond a 1-step run (start-up,
  # arena allocation and the first step cancel)
  awk -v lt="$lt" -v l1="$l1" -v pad="$pad" -v pf="$pf" -v n="$STEPS" -v c1="$c1" -v cn="$cn" \
    'BEGIN {printf "%.0f %s %.4f %.0f %.0f\n", lt / cn, pad, pf, lt / n, (cn > c1 ? (lt - l1) / (cn - c1) : 0)}'
}

echo "T,layout,epoch_padding_pct,mean_step_pad_frac,loss_tokens_per_step,useful_tokens_per_cpu_s,vs_padded,steady_useful_tokens_per_cpu_s,vs_padded_steady"
for T in 128 256; do
  B=8; BUD=$((8 * T))
  "$GEN" specs/v2500.yaml --enable adamw,flash,packing --set v2126.rows=contiguous --model tiny --target cpu --batch $B --seq "$T" -o "$TMP/contiguous$T" >/dev/null 2>&1
  "$GEN" specs/v2500.yaml --enable adamw,flash,packing --model tiny --target cpu --batch $B --seq "$T" -o "$TMP/best-fit$T" >/dev/null 2>&1
  "$GEN" specs/v2500.yaml --enable adamw,flash,dynamic-batching --set v2127.buckets=1 --set v2127.token_budget=$BUD --model tiny --target cpu --batch $B --seq "$T" -o "$TMP/padded$T" >/dev/null 2>&1
  "$GEN" specs/v2500.yaml --enable adamw,flash,dynamic-batching --set v2127.buckets=3 --set v2127.token_budget=$BUD --model tiny --target cpu --batch 32 --seq "$T" -o "$TMP/dynamic$T" >/dev/null 2>&1
  for L in contiguous best-fit padded dynamic; do : > "$TMP/r.$L.$T"; done
  for _ in $(seq "$REPS"); do
    for L in contiguous best-fit padded dynamic; do run "$TMP/$L$T" >> "$TMP/r.$L.$T"; done
  done
  pbest=$(sort -g "$TMP/r.padded.$T" | tail -1 | cut -d' ' -f1)
  pwall=$(cut -d' ' -f5 "$TMP/r.padded.$T" | sort -g | tail -1)
  for L in contiguous best-fit padded dynamic; do
    echo "# T=$T $L runs (useful tok/CPU-s, epoch pad %, step pad, loss tok/step, steady useful tok/CPU-s): $(tr '\n' ';' < "$TMP/r.$L.$T")"
    w=$(cut -d' ' -f5 "$TMP/r.$L.$T" | sort -g | tail -1)
    sort -g "$TMP/r.$L.$T" | tail -1 | awk -v T="$T" -v L="$L" -v p="$pbest" -v w="$w" -v pw="$pwall" '{printf "%d,%s,%s,%.4f,%d,%d,%.2f,%d,%.2f\n", T, L, $2, $3, $4, $1, $1 / p, w, w / pw}'
  done
done
echo "vs_padded = useful tokens per CPU-second over the fixed-batch padding trainer's (one document per row of T, 8 rows); seed 002 claims 1.2-1.3x for packing"
