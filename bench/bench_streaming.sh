#!/usr/bin/env bash
# bench_streaming.sh — v2129 (issue 13): training throughput reading raw files (`train --stream`,
# tokenized in the loader thread, block shuffle of shuffle_buffer rows) vs pre-tokenized shards
# (`gen data` once, then `train --data`, with and without v2128 prefetch), side by side in one run,
# alternated ROUNDS times, for the byte tokenizer and GPT-2's BPE. Corpus: the whole KJV as .jsonl.gz
# documents of 12 verses. Reports per configuration: tokens/s (the trainer's mean), the data wait
# per step (metrics data_wait_s: median, step 1, max — a stream's step 1 waits for its first block,
# and every shuffle_buffer/B steps the loader thread reads the next one), peak RSS, and the one-off
# `gen data` time that streaming skips.
# Must never: touch data/ or out/ of the repository (all in a temp dir), need the network.
# Usage: bench/bench_streaming.sh [BUILD_DIR] [STEPS] [ROUNDS] [SHUFFLE_BUFFER]   (default build 60 2 10000)
set -euo pipefail
BUILD=${1:-build}; STEPS=${2:-60}; ROUNDS=${3:-2}; K=${4:-10000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GEN="$ROOT/$BUILD/generator/gen"; [ -x "$GEN" ] || GEN="$BUILD/generator/gen"
[ -x "$GEN" ] || { echo "bench_streaming: $GEN missing — build first (bash scripts/build.sh)"; exit 2; }
command -v bible >/dev/null || { echo "bench_streaming: bible missing — apt-get install bible-kjv"; exit 2; }
TMP=$(mktemp -d /tmp/bench-stream.XXXXXX); trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1
B=8; T=256
GPT2="$ROOT/assets/tokenizers/gpt2.tiktoken.gz"
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $STEPS steps x $ROUNDS rounds, OMP_NUM_THREADS=1, model tiny, B=$B T=$T, shuffle_buffer $K"
bible -f 'Gen1:1-Rev22:21' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' > "$TMP/kjv.txt"
awk '{ gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); d = d $0 "\\n" } NR % 12 == 0 { print "{\"text\": \"" d "\"}"; d = "" }
     END { if (d != "") print "{\"text\": \"" d "\"}" }' "$TMP/kjv.txt" | gzip > "$TMP/kjv.jsonl.gz"
echo "corpus: kjv.jsonl.gz $(stat -c %s "$TMP/kjv.jsonl.gz") bytes ($(wc -c < "$TMP/kjv.txt") bytes of text, $(zcat "$TMP/kjv.jsonl.gz" | wc -l) documents)"

secs() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null 2>&1; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" "BEGIN {printf \"%.2f\", b - a}"; }
for tk in byte gpt2; do
  tkf=byte; sel=adamw; set=()
  [ $tk = gpt2 ] && tkf="$GPT2" && sel=adamw,bpe && set=(--set "v2125.data=$GPT2")
  s=$(secs "$GEN" data "$TMP/kjv.jsonl.gz" -o "$TMP/d_$tk" --val-fraction 0 --tokenizer "$tkf")
  echo "$tk: gen data (the preprocessing pass streaming skips): $s s, $(du -sb "$TMP/d_$tk" | cut -f1) bytes on disk"
  G=(--model tiny --target cpu --batch $B --seq $T)
  "$GEN" "$ROOT/specs/v2500.yaml" --enable $sel ${set[@]+"${set[@]}"} "${G[@]}" -o "$TMP/o_${tk}_shard" > /dev/null 2>&1
  "$GEN" "$ROOT/specs/v2500.yaml" --enable $sel,prefetch ${set[@]+"${set[@]}"} "${G[@]}" -o "$TMP/o_${tk}_pf" > /dev/null 2>&1
  "$GEN" "$ROOT/specs/v2500.yaml" --enable $sel,streaming --set "v2129.shuffle_buffer=$K" ${set[@]+"${set[@]}"} "${G[@]}" -o "$TMP/o_${tk}_stream" > /dev/null 2>&1
done

run() { # run NAME TRAINER-ARGS... -> appends "tok/s median_wait step1_wait max_wait rss" to $TMP/NAME.res
  local n=$1; shift
  local out
  out=$("$@" --steps "$STEPS" --eval-every 0 --log-every 1000 --metrics "$TMP/$n.jsonl" --memory-profile "$TMP/$n.svg" 2>&1)
  local tps rss
  tps=$(printf '%s\n' "$out" | grep -o 'mean [0-9.]* tok/s' | cut -d' ' -f2)
  rss=$(printf '%s\n' "$out" | grep -o 'peak RSS [0-9.]*' | cut -d' ' -f3)
  grep -o '"data_wait_s":[^,}]*' "$TMP/$n.jsonl" | cut -d: -f2 > "$TMP/$n.w"
  local med first max
  med=$(sort -g "$TMP/$n.w" | awk '{v[NR] = $1} END {printf "%.3f", 1000 * v[int((NR + 1) / 2)]}')
  first=$(head -1 "$TMP/$n.w" | awk '{printf "%.1f", 1000 * $1}')
  max=$(sort -g "$TMP/$n.w" | tail -1 | awk '{printf "%.1f", 1000 * $1}')
  echo "$tps $med $first $max $rss" >> "$TMP/$n.res"
  rm -f "$TMP/$n.jsonl"
}
for r in $(seq "$ROUNDS"); do
  for tk in byte gpt2; do
    tkarg=(); [ $tk = gpt2 ] && tkarg=(--tokenizer "$GPT2")
    run "${tk}_shard" "$TMP/o_${tk}_shard/train" --data "$TMP/d_$tk"
    run "${tk}_pf" "$TMP/o_${tk}_pf/train" --data "$TMP/d_$tk"
    run "${tk}_stream" "$TMP/o_${tk}_stream/train" --stream "$TMP/kjv.jsonl.gz" ${tkarg[@]+"${tkarg[@]}"}
  done
done
echo
echo "| tokenizer | data | tokens/s (mean of $ROUNDS) | data wait per step: median ms | step 1 ms | max ms | peak RSS MiB |"
echo "|---|---|---|---|---|---|---|"
for tk in byte gpt2; do
  for c in shard pf stream; do
    case $c in shard) what="shards (gen data)";; pf) what="shards + prefetch 2";; stream) what="--stream kjv.jsonl.gz (buffer $K)";; esac
    awk -v tk=$tk -v w="$what" '{t += $1; m += $2; f += $3; x = $4 > x ? $4 : x; r = $5 > r ? $5 : r; n++}
      END {printf "| %s | %s | %.0f | %.3f | %.1f | %.1f | %.1f |\n", tk, w, t / n, m / n, f / n, x, r}' "$TMP/${tk}_$c.res"
  done
done
