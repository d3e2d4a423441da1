#!/usr/bin/env bash
# Tokens/s, MFU and peak memory of the CPU trainer for the gpt2-124m shape at B=4,T=64 and
# B=8,T=256 on $THREADS threads (default 2), CSV to stdout. If LLMC_DIR points at a directory
# where karpathy/llm.c's CPU trainer was built by the user (train_gpt2 next to a gpt2_124M.bin and
# dev/data/tinyshakespeare/*.bin), its step times are measured in the same run for comparison;
# this repository never fetches or builds llm.c itself.
# Usage: bench/bench_train_cpu.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${2:-6}; THREADS=${THREADS:-2}
GEN="$BUILD/generator/gen"
export OMP_NUM_THREADS=$THREADS
TMP=$(mktemp -d /tmp/hyp-bench.XXXXXX); trap 'rm -rf "$TMP"' EXIT
if [ ! -d data/kjv ]; then echo "run scripts/demo.sh once first (it prepares data/kjv)" >&2; exit 2; fi
echo "impl,B,T,threads,tokens_per_s,mfu_pct,peak_rss_mb"
for shape in "4 64" "8 256"; do
  set -- $shape; B=$1; T=$2
  "$GEN" specs/v2500.yaml --enable adamw,memory-planning --model gpt2-124m --target cpu --batch $B --seq $T -o "$TMP/g$B" >/dev/null
  /usr/bin/time -f "%M" -o "$TMP/rss" "$TMP/g$B/train" --data data/kjv --steps "$STEPS" --eval-every 0 > "$TMP/log" 2>&1
  tps=$(grep -o "mean [0-9]* tok/s" "$TMP/log" | grep -o "[0-9]*")
  mfu=$(grep "^step" "$TMP/log" | tail -n +2 | grep -o "MFU *[0-9.]*" | awk '{s += $2; n++} END {printf "%.1f", s / n}')
  echo "hyperion,$B,$T,$THREADS,$tps,$mfu,$(( $(cat "$TMP/rss") / 1024 ))"
  if [ -n "${LLMC_DIR:-}" ]; then
    bin="$LLMC_DIR/train_gpt2"; [ "$B" = 8 ] && bin="$LLMC_DIR/train_gpt2_b8t256"
    if [ -x "$bin" ]; then
      ( cd "$LLMC_DIR" && timeout 900 /usr/bin/time -f "%M" -o "$TMP/rss2" stdbuf -oL "$bin" > "$TMP/llmc.log" 2>&1 & 
        pid=$!; while sleep 5; do n=$(grep -c "^step" "$TMP/llmc.log" || true); [ "$n" -ge "$STEPS" ] && break; kill -0 $pid 2>/dev/null || break; done
        pkill -f "$bin" 2>/dev/null; wait 2>/dev/null ) || true
      ms=$(grep "^step" "$TMP/llmc.log" | tail -n +2 | grep -o "took [0-9.]*" | awk '{s += $2; n++} END {if (n) printf "%.1f", s / n}')
      [ -n "$ms" ] && echo "llm.c,$B,$T,$THREADS,$(awk -v ms="$ms" -v n=$((B * T)) 'BEGIN {printf "%.0f", n / (ms / 1000)}'),,"
    fi
  fi
done
