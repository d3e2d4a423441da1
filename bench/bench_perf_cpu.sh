#!/usr/bin/env bash
# The performance model's method checked where we can measure: a cpu trainer's per-op times from
# `train --profile` next to what `gen perf --hw host-cpu` predicts for the same plan with this
# machine's measured FMA peak (the trainer's banner: runtime/cpu/peak.c) and measured memory
# bandwidth (a STREAM triad compiled here, same thread count). Prints per op: measured ms/step,
# predicted ms/step, ratio; and the modelled ops' sum. Not a test: it times; run it on a quiet
# machine (other processes inflate the measured times and the triad). Usage:
#   bench/bench_perf_cpu.sh [BUILD_DIR] [MODEL] [B] [T] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; MODEL=${2:-tiny}; B=${3:-4}; T=${4:-64}; TH=${5:-2}
export OMP_NUM_THREADS=$TH
TMP=$(mktemp -d /tmp/hyp-bench.XXXXXX); trap 'rm -rf "$TMP"' EXIT
cat specs/*/*.yaml > "$TMP/corpus.txt"
"$BUILD/generator/gen" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
"$BUILD/generator/gen" specs/v2500.yaml --enable adamw --model "$MODEL" --target cpu --batch "$B" --seq "$T" -o "$TMP/t" >/dev/null 2>&1
# STREAM triad a = b + s*c over 3 x 64 MiB, best of 5, OpenMP threads as the trainer
cat > "$TMP/triad.c" <<'C'
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    long n = 1L << 24; double best = 0;
    float *a = malloc(4 * n), *b = malloc(4 * n), *c = malloc(4 * n);
#pragma omp parallel for
    for (long i = 0; i < n; i++) { a[i] = 0; b[i] = 1; c[i] = 2; }
    for (int r = 0; r < 5; r++) {
        double t = omp_get_wtime();
#pragma omp parallel for
        for (long i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        t = omp_get_wtime() - t;
        if (12.0 * n / t > best) best = 12.0 * n / t;
    }
    printf("%.6f\n", best / 1e12 + 0 * a[n / 2]);
    return 0;
}
C
cc -O2 -fopenmp "$TMP/triad.c" -o "$TMP/triad"
BW=$("$TMP/triad")
"$TMP/t/train" --data "$TMP/data" --steps 12 --eval-every 0 --sample 0 --profile "$TMP/tr.json" --profile-steps 4:12 > "$TMP/run.log" 2>&1
PEAK=$(grep -oE "peak [0-9.]+ GFLOP/s" "$TMP/run.log" | grep -oE "[0-9.]+" | head -1)
"$BUILD/generator/gen" perf "$TMP/t" --hw host-cpu --json --set "peak_tflops.fp32=$(python3 -c "print($PEAK/1000)")" \
  --set "hbm_tbps=$BW" > "$TMP/perf.json"
python3 - "$TMP/run.log" "$TMP/perf.json" "$PEAK" "$BW" "$MODEL" "$B" "$T" "$TH" <<'PY'
import json, re, sys
log, pj, peak, bw = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
meas = {}
for l in open(log):
    m = re.match(r"\s+(\w+)\s+(forward|backward|optimizer)\s+host\s+\d+\s+[\d.]+\s+([\d.]+)", l)
    if m: meas[m.group(1)] = meas.get(m.group(1), 0) + float(m.group(3))
r = json.load(open(pj))["predictions"][0]
pred = {}
for e in r["ops"]:
    op = {"optimizer": "optimizer_step", "grad_norm": "grad_reduce_norm"}.get(e["op"], e["op"])
    pred[op] = pred.get(op, 0) + e["time"] * 1e3
print(f"{sys.argv[5]} B={sys.argv[6]} T={sys.argv[7]} threads={sys.argv[8]}: measured peak {peak:.1f} GFLOP/s fp32, triad {bw*1e3:.1f} GB/s")
print(f"{'op':24s} {'measured ms':>12s} {'predicted ms':>13s} {'meas/pred':>10s}")
tm = tp = 0
for op in sorted(meas, key=lambda k: -meas[k]):
    if op not in pred: print(f"{op:24s} {meas[op]:12.3f} {'(not modelled)':>13s}"); continue
    tm += meas[op]; tp += pred[op]
    print(f"{op:24s} {meas[op]:12.3f} {pred[op]:13.3f} {meas[op] / pred[op] if pred[op] else float('inf'):10.2f}")
print(f"{'modelled ops':24s} {tm:12.3f} {tp:13.3f} {tm / tp:10.2f}")
if r.get("undeclared"): print("not modelled:", ", ".join(r["undeclared"]))
PY
