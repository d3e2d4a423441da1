#!/usr/bin/env bash
# bench_grad_compress.sh — v2172 (issue 23 Measure): synchronous data parallelism against
# compressed gradient exchanges on the cpu trainer, mpirun -np 2, the same model (tiny), data (the
# KJV, Gen-Deu, as tests/gen/lib.sh's tests read it), seed, batch (2 rows x T per rank) and number
# of steps, so every run sees the same tokens: top-k with error feedback, top-k without it (the
# ablation), random-k with error feedback (unscaled) and random-k scaled by n/k (no error
# feedback), all at RATIO, and PowerSGD at rank RANK with error feedback. Per run: bytes this rank sent per step and collectives per step (the
# coll layer's ring-model count on the data-parallel communicator, the trainer's comm_bytes /
# comm_calls metrics), the median training loss of the last 20 steps and the validation loss
# after the last step. Then the mean over seeds per mode (the seed sets the initialization and the
# data order; tiny's escape from its ~3.0 unigram plateau is a chance event, so one seed is not a
# comparison).
# Not a timed benchmark: on one machine the ranks talk through shared memory.
# Usage: bench/bench_grad_compress.sh [BUILD_DIR]
#   (STEPS=200 RATIO=0.01 RANK=4 T=64 EVAL_BATCHES=32 SEEDS="1337 1 2"
#    MODES="sync topk topk_noef randk randk_scaled powersgd")
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${STEPS:-200}; RATIO=${RATIO:-0.01}; RANK=${RANK:-4}; T=${T:-64}; EB=${EVAL_BATCHES:-32}; SEEDS=${SEEDS:-1337 1 2}
MODES=${MODES:-sync topk topk_noef randk randk_scaled powersgd}
GEN="$BUILD/generator/gen"
command -v mpirun >/dev/null || { echo "bench_grad_compress: mpirun not found — scripts/install-deps.sh installs openmpi-bin" >&2; exit 2; }
command -v bible >/dev/null || { echo "bench_grad_compress: bible not found — scripts/install-deps.sh installs bible-kjv" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/hyp-bench-gc.XXXXXX); trap 'rm -rf "$TMP"' EXIT
set +o pipefail # head ends the pipe early: bible and sed see SIGPIPE
bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 400000 > "$TMP/corpus.txt"
set -o pipefail
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target cpu --batch 4 --seq "$T")
V=(--enable dp,v2172 --set v2172.ratio="$RATIO")
for m in $MODES; do
  case $m in
    sync) args=(--enable dp); name="sync dp (all-reduce)";;
    topk) args=("${V[@]}"); name="top-k $RATIO, EF";;
    topk_noef) args=("${V[@]}" --set v2172.error_feedback=false); name="top-k $RATIO, no EF";;
    randk) args=("${V[@]}" --set v2172.method=randk); name="random-k $RATIO, EF";;
    randk_scaled) args=("${V[@]}" --set v2172.method=randk --set v2172.error_feedback=false); name="random-k $RATIO, scaled n/k";;
    powersgd) args=(--enable dp,v2172 --set v2172.method=powersgd --set v2172.rank="$RANK"); name="PowerSGD rank $RANK, EF";;
    *) echo "bench_grad_compress: unknown mode '$m' — use sync topk topk_noef randk randk_scaled powersgd" >&2; exit 2;;
  esac
  printf "%s\n" "$name" > "$TMP/$m.name"
  "$GEN" specs/v2500.yaml "${args[@]}" "${SHAPE[@]}" -o "$TMP/$m" >/dev/null 2>&1 ||
    { echo "bench_grad_compress: gen for $m failed" >&2; exit 1; }
done
metric() { grep -o "\"$2\":[^,}]*" "$1" | cut -d: -f2; }
printf "tiny, np=2, %d steps x 2 ranks x 2 rows x %d tokens (AdamW, lr 2e-3 constant), seeds %s\n" "$STEPS" "$T" "$SEEDS"
printf "%-28s %6s %12s %11s %11s %10s\n" mode seed bytes/step colls/step train-loss eval-loss
for seed in $SEEDS; do
  for m in $MODES; do
    mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/$m/train" --data "$TMP/data" --batch 2 --seq "$T" --steps "$STEPS" \
      --seed "$seed" --eval-every "$STEPS" --eval-batches "$EB" --metrics "$TMP/$m.$seed.jsonl" > "$TMP/$m.log" 2>&1 ||
      { echo "bench_grad_compress: the $m run failed:" >&2; tail -5 "$TMP/$m.log" >&2; exit 1; }
    name=$(cat "$TMP/$m.name")
    f="$TMP/$m.$seed.jsonl"
    bytes=$(metric "$f" comm_bytes | awk '{ s += $1; n++ } END { printf "%.0f", s / n }')
    calls=$(metric "$f" comm_calls | awk '{ s += $1; n++ } END { printf "%.3f", s / n }')
    train=$(metric "$f" loss | tail -20 | sort -g | awk '{ a[NR] = $1 } END { n = NR; printf "%.4f", n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }')
    val=$(metric "$f" val_loss | grep -v null | tail -1)
    printf "%-28s %6s %12s %11s %11s %10.4f\n" "$name" "$seed" "$bytes" "$calls" "$train" "$val"
    printf "%s\t%s\t%s\t%s\n" "$name" "$train" "$val" "$bytes" >> "$TMP/rows"
  done
done
echo "mean over seeds:"
awk -F'\t' '{ if (!($1 in n)) ord[++k] = $1; t[$1] += $2; s[$1] += $3; b[$1] = $4; n[$1]++ }
  END { for (i = 1; i <= k; i++) { m = ord[i]; printf "%-28s bytes/step %9d  train-loss %.4f  eval-loss %.4f  (%d seeds)\n", m, b[m], t[m] / n[m], s[m] / n[m], n[m] } }' "$TMP/rows"
