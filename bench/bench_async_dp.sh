#!/usr/bin/env bash
# bench_async_dp.sh — v2174 (issue 23 Measure): synchronous data parallelism against bounded-
# staleness async dp (the gradient all-reduce of step t applied at step t + s) for s = 0, 1, 2, 4 on
# the cpu trainer, mpirun -np 2, the same model (tiny), data (the KJV, Gen-Deu, as tests/gen/lib.sh's
# tests read it), seed, batch (2 rows x T per rank) and number of steps, so every run sees the same
# tokens (async s applies STEPS - s updates). Per run: bytes this rank sent per step and collectives
# per step (the coll layer's ring-model count, the trainer's comm_bytes / comm_calls metrics), the
# gradient reduction's exposed time per step (the v2184 profile's grad_reduce_norm phase on rank 0,
# steps 21..STEPS: the blocking all-reduce, or for async starting step t's and waiting for step
# t - s's, plus the norm) and the two blocking 8-byte all-reduces every step still has (token count
# and loss: allreduce_token_count + allreduce_loss, where a slower rank is waited for), the mean
# step time, the median training loss of the last 20 steps and the validation loss after the last
# step. Times are wall clock on a shared machine where the ranks talk through shared memory:
# indicative only. NOPROGRESS="1" adds staleness 1 without the progress thread (HYP_ASYNC_PROGRESS=0:
# the reduction moves only inside the step's other MPI calls). Then the mean over seeds.
# Never: a result without its run; it fails when a run fails.
# Usage: bench/bench_async_dp.sh [BUILD_DIR]   (STEPS=200 T=64 EVAL_BATCHES=32 SEEDS="1337 1 2" STALENESS="0 1 2 4")
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${STEPS:-200}; T=${T:-64}; EB=${EVAL_BATCHES:-32}; SEEDS=${SEEDS:-1337 1 2}; STALE=${STALENESS:-0 1 2 4}; NOPROG=${NOPROGRESS-1}
GEN="$BUILD/generator/gen"
command -v mpirun >/dev/null || { echo "bench_async_dp: mpirun not found — scripts/install-deps.sh installs openmpi-bin" >&2; exit 2; }
command -v bible >/dev/null || { echo "bench_async_dp: bible not found — scripts/install-deps.sh installs bible-kjv" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/hyp-bench-async.XXXXXX); trap 'rm -rf "$TMP"' EXIT
set +o pipefail # head ends the pipe early: bible and sed see SIGPIPE
bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 400000 > "$TMP/corpus.txt"
set -o pipefail
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target cpu --batch 4 --seq "$T")
"$GEN" specs/v2500.yaml --enable dp "${SHAPE[@]}" -o "$TMP/sync" >/dev/null 2>&1
MODES=sync
for s in $STALE; do
  "$GEN" specs/v2500.yaml --enable dp,v2174 --set v2174.staleness="$s" "${SHAPE[@]}" -o "$TMP/s$s" >/dev/null 2>&1
  MODES="$MODES s$s"
done
for s in $NOPROG; do
  [ -d "$TMP/s$s" ] || "$GEN" specs/v2500.yaml --enable dp,v2174 --set v2174.staleness="$s" "${SHAPE[@]}" -o "$TMP/s$s" >/dev/null 2>&1
  ln -s "s$s" "$TMP/n$s"
  MODES="$MODES n$s"
done
metric() { grep -o "\"$2\":[^,}]*" "$1" | cut -d: -f2; }
mean() { awk '{ s += $1; n++ } END { printf "%.'"$1"'f", s / n }'; }
printf "tiny, np=2, %d steps x 2 ranks x 2 rows x %d tokens (AdamW, lr 2e-3 constant), seeds %s\n" "$STEPS" "$T" "$SEEDS"
printf "%-26s %6s %12s %11s %13s %13s %9s %11s %10s\n" mode seed bytes/step colls/step grad-reduce-ms scalar-ar-ms step-ms train-loss eval-loss
for seed in $SEEDS; do
  for m in $MODES; do
    prog=1; case $m in n*) prog=0;; esac
    HYP_ASYNC_PROGRESS=$prog mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS -x HYP_ASYNC_PROGRESS "$TMP/$m/train" --data "$TMP/data" --batch 2 --seq "$T" --steps "$STEPS" \
      --seed "$seed" --eval-every "$STEPS" --eval-batches "$EB" --metrics "$TMP/$m.$seed.jsonl" \
      --profile "$TMP/$m.trace.json" --profile-steps "21:$STEPS" > "$TMP/$m.log" 2>&1 ||
      { echo "bench_async_dp: the $m run failed:" >&2; tail -5 "$TMP/$m.log" >&2; exit 1; }
    case $m in sync) name="sync dp (blocking)";; n*) name="async s=${m#n}, no progress thr";; *) name="async dp, staleness ${m#s}";; esac
    f="$TMP/$m.$seed.jsonl"
    bytes=$(metric "$f" comm_bytes | mean 0)
    calls=$(metric "$f" comm_calls | mean 3)
    comm=$(awk '$1 == "grad_reduce_norm" { printf "%.2f", $6 }' "$TMP/$m.log")
    scal=$(awk '$1 == "allreduce_token_count" || $1 == "allreduce_loss" { s += $6 } END { printf "%.2f", s }' "$TMP/$m.log")
    stepms=$(metric "$f" step_s | awk '{ print 1e3 * $1 }' | mean 1)
    train=$(metric "$f" loss | tail -20 | sort -g | awk '{ a[NR] = $1 } END { n = NR; printf "%.4f", n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }')
    val=$(metric "$f" val_loss | grep -v null | tail -1)
    printf "%-26s %6s %12s %11s %13s %13s %9s %11s %10.4f\n" "$name" "$seed" "$bytes" "$calls" "$comm" "$scal" "$stepms" "$train" "$val"
    printf "%s\t%s\t%s\t%s\t%s\n" "$name" "$train" "$val" "$comm" "$scal" >> "$TMP/rows"
  done
done
echo "mean over seeds:"
awk -F'\t' '{ if (!($1 in n)) ord[++k] = $1; t[$1] += $2; s[$1] += $3; c[$1] += $4; b[$1] += $5; n[$1]++ }
  END { for (i = 1; i <= k; i++) { m = ord[i]; printf "%-26s train-loss %.4f  eval-loss %.4f  grad reduce %.2f ms/step  scalar all-reduces %.2f ms/step  (%d seeds)\n", m, t[m] / n[m], s[m] / n[m], c[m] / n[m], b[m] / n[m], n[m] } }' "$TMP/rows"
