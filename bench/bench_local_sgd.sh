#!/usr/bin/env bash
# bench_local_sgd.sh — v2173 (issue 23 Measure): synchronous data parallelism against local SGD
# (parameter averaging every H steps) and DiLoCo (outer Nesterov, lr 0.7, momentum 0.9 on the
# averaged delta; Douillard et al. 2023) on the cpu trainer, mpirun -np 2, the same model (tiny),
# data (the KJV, Gen-Deu, as tests/gen/lib.sh's tests read it), seed, batch (2 rows x T per rank)
# and number of steps, so every run sees the same tokens. Per run: bytes this rank sent per step and
# collectives per step (the coll layer's ring-model count on the data-parallel communicator, the
# trainer's comm_bytes / comm_calls metrics), the parameter-sized all-reduces per step (gradient or
# delta), the median training loss of the last 20 steps and the validation loss after the last
# step (every run ends on a synchronization, so it evaluates the averaged parameters).
# Not a timed benchmark: on one machine the ranks talk through shared memory.
# One row per mode and seed (the seed sets the initialization and the data order), then the mean
# over seeds per mode: escaping tiny's ~3.0 unigram plateau within 200 steps is a chance event, so
# one seed is not a comparison.
# Usage: bench/bench_local_sgd.sh [BUILD_DIR]   (STEPS=200 H=8 T=64 EVAL_BATCHES=32 SEEDS="1337 1 2")
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${STEPS:-200}; H=${H:-8}; T=${T:-64}; EB=${EVAL_BATCHES:-32}; SEEDS=${SEEDS:-1337 1 2}
GEN="$BUILD/generator/gen"
[ $((STEPS % H)) -eq 0 ] || { echo "bench_local_sgd: STEPS=$STEPS is not a multiple of H=$H — the last step must synchronize" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench_local_sgd: mpirun not found — scripts/install-deps.sh installs openmpi-bin" >&2; exit 2; }
command -v bible >/dev/null || { echo "bench_local_sgd: bible not found — scripts/install-deps.sh installs bible-kjv" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/hyp-bench-lsgd.XXXXXX); trap 'rm -rf "$TMP"' EXIT
set +o pipefail # head ends the pipe early: bible and sed see SIGPIPE
bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 400000 > "$TMP/corpus.txt"
set -o pipefail
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target cpu --batch 4 --seq "$T")
"$GEN" specs/v2500.yaml --enable dp "${SHAPE[@]}" -o "$TMP/sync" >/dev/null 2>&1
"$GEN" specs/v2500.yaml --enable dp,v2173 --set v2173.sync_every="$H" "${SHAPE[@]}" -o "$TMP/local" >/dev/null 2>&1
"$GEN" specs/v2500.yaml --enable dp,v2173 --set v2173.sync_every="$H" --set v2173.outer=nesterov "${SHAPE[@]}" -o "$TMP/diloco" >/dev/null 2>&1
metric() { grep -o "\"$2\":[^,}]*" "$1" | cut -d: -f2; }
printf "tiny, np=2, %d steps x 2 ranks x 2 rows x %d tokens (AdamW inner, lr 2e-3 constant), seeds %s\n" "$STEPS" "$T" "$SEEDS"
printf "%-28s %6s %12s %11s %17s %11s %10s\n" mode seed bytes/step colls/step param-allreduces train-loss eval-loss
for seed in $SEEDS; do
  for m in sync local diloco; do
    mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/$m/train" --data "$TMP/data" --batch 2 --seq "$T" --steps "$STEPS" \
      --seed "$seed" --eval-every "$STEPS" --eval-batches "$EB" --metrics "$TMP/$m.$seed.jsonl" > "$TMP/$m.log" 2>&1 ||
      { echo "bench_local_sgd: the $m run failed:" >&2; tail -5 "$TMP/$m.log" >&2; exit 1; }
    case $m in sync) name="sync dp (all-reduce/step)";; local) name="local SGD (average, H=$H)";; diloco) name="DiLoCo (nesterov, H=$H)";; esac
    f="$TMP/$m.$seed.jsonl"
    bytes=$(metric "$f" comm_bytes | awk '{ s += $1; n++ } END { printf "%.0f", s / n }')
    calls=$(metric "$f" comm_calls | awk '{ s += $1; n++ } END { printf "%.3f", s / n }')
    big=$(metric "$f" comm_bytes | awk '{ if ($1 > 1e5) k++; n++ } END { printf "%.3f", k / n }')
    train=$(metric "$f" loss | tail -20 | sort -g | awk '{ a[NR] = $1 } END { n = NR; printf "%.4f", n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }')
    val=$(metric "$f" val_loss | grep -v null | tail -1)
    printf "%-28s %6s %12s %11s %17s %11s %10.4f\n" "$name" "$seed" "$bytes" "$calls" "$big" "$train" "$val"
    printf "%s\t%s\t%s\n" "$name" "$train" "$val" >> "$TMP/rows"
  done
done
echo "mean over seeds:"
awk -F'\t' '{ if (!($1 in n)) ord[++k] = $1; t[$1] += $2; s[$1] += $3; n[$1]++ }
  END { for (i = 1; i <= k; i++) { m = ord[i]; printf "%-28s train-loss %.4f  eval-loss %.4f  (%d seeds)\n", m, t[m] / n[m], s[m] / n[m], n[m] } }' "$TMP/rows"
