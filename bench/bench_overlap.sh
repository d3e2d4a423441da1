#!/usr/bin/env bash
# bench_overlap.sh — v2168 (issue 23): the cpu trainer's gradient all-reduce after backward (plain
# dp) against v2168's helper threads (per-layer buckets all-reduced while backward runs), mpirun -np
# 2, tiny, the same data and seed, B x T per rank. Per run, steps 2..STEPS: the mean step time and
# the trainer's grad_comm_total_s (all-reduce time in flight) and grad_comm_exposed_s (the time the
# step waited for it) metrics. PAIRS alternating plain / v2168 pairs per link, for each LINKS value:
# "none" = shared memory as it is, a number = HYP_COLL_LINK_GBPS (coll.h: each all-reduce lasts at
# least its ring-model bytes / that many Gbit/s, the rest slept: an emulated slow link, not a network
# model). Prints one row per run and the medians per link and variant. Wall clock on a shared
# machine where both ranks, their helpers and OpenMP share the cores: indicative only.
# Never: a result without its run; it fails when a run fails.
# Usage: bench/bench_overlap.sh [BUILD_DIR]   (STEPS=20 B=4 T=64 PAIRS=3 LINKS="none 2" STREAMS=1)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${STEPS:-20}; B=${B:-4}; T=${T:-64}; PAIRS=${PAIRS:-3}; LINKS=${LINKS:-none 2}; STREAMS=${STREAMS:-1}
GEN="$BUILD/generator/gen"
command -v mpirun >/dev/null || { echo "bench_overlap: mpirun not found — scripts/install-deps.sh installs openmpi-bin" >&2; exit 2; }
command -v bible >/dev/null || { echo "bench_overlap: bible not found — scripts/install-deps.sh installs bible-kjv" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/hyp-bench-overlap.XXXXXX); trap 'rm -rf "$TMP"' EXIT
set +o pipefail # head ends the pipe early: bible and sed see SIGPIPE
bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 400000 > "$TMP/corpus.txt"
set -o pipefail
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target cpu --batch "$B" --seq "$T")
"$GEN" specs/v2500.yaml --enable adamw,dp "${SHAPE[@]}" -o "$TMP/plain" >/dev/null 2>&1
"$GEN" specs/v2500.yaml --enable adamw,dp,overlap --set v2168.comm_streams="$STREAMS" "${SHAPE[@]}" -o "$TMP/v2168" >/dev/null 2>&1
mean() { grep -o "\"$2\":[^,}]*" "$1" | cut -d: -f2 | tail -n +2 | awk '{ s += $1; n++ } END { printf "%.3f", 1e3 * s / n }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
echo "tiny B=$B T=$T per rank, np 2, $STEPS steps (means over steps 2..$STEPS), comm_streams=$STREAMS"
printf "%-6s %-6s %4s %10s %12s %12s %12s\n" link variant pair "step ms" "in flight ms" "exposed ms" "hidden ms"
for link in $LINKS; do
  for p in $(seq "$PAIRS"); do
    for v in plain v2168; do
      env_link=(); [ "$link" != none ] && env_link=(HYP_COLL_LINK_GBPS="$link")
      env "${env_link[@]}" mpirun -np 2 -x OMP_NUM_THREADS ${env_link:+-x HYP_COLL_LINK_GBPS} "$TMP/$v/train" --data "$TMP/data" --steps "$STEPS" \
        --eval-every 0 --lr 3e-3 --metrics "$TMP/m.jsonl" > "$TMP/out.txt" 2>&1 || { cat "$TMP/out.txt" >&2; exit 1; }
      st=$(mean "$TMP/m.jsonl" step_s) tot=$(mean "$TMP/m.jsonl" grad_comm_total_s) ex=$(mean "$TMP/m.jsonl" grad_comm_exposed_s)
      printf "%-6s %-6s %4d %10s %12s %12s %12s\n" "$link" "$v" "$p" "$st" "$tot" "$ex" "$(awk -v a="$tot" -v b="$ex" 'BEGIN { printf "%.3f", a - b }')"
      echo "$link $v $st $tot $ex" >> "$TMP/rows"
    done
  done
done
echo "medians:"
for link in $LINKS; do
  for v in plain v2168; do
    row() { awk -v l="$link" -v w="$v" -v c="$1" '$1 == l && $2 == w { print $c }' "$TMP/rows" | median; }
    printf "  link %-5s %-6s step %8.3f ms, all-reduce %8.3f ms in flight, %8.3f ms exposed\n" "$link" "$v" "$(row 3)" "$(row 4)" "$(row 5)"
  done
done
