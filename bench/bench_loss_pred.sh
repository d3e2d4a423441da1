#!/usr/bin/env bash
# v2148 scored on held-out longer runs: for each run length S, a trainer with loss prediction
# fitting every S/5 steps; the predictions made at 20%, 40%, 60% and 80% of the run of the loss at step S,
# next to what the run reached (the mean training loss of its last 5% of steps: the law predicts the
# smooth curve, one step's loss is noisy), and whether it fell in the 80% band. Not a test: it
# reports how good the extrapolation is on our data, whatever that is. Usage:
#   [LAW=lr_annealing|power] bench/bench_loss_pred.sh [BUILD_DIR] [MODEL] [LENGTHS (comma list)] [B] [T]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; MODEL=${2:-tiny}; LENS=${3:-200,400,800}; B=${4:-8}; T=${5:-64}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
TMP=$(mktemp -d /tmp/hyp-bench.XXXXXX); trap 'rm -rf "$TMP"' EXIT
cat specs/*/*.yaml > "$TMP/corpus.txt"
"$BUILD/generator/gen" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
printf "%-10s %6s %5s %10s %22s %10s %8s %7s\n" model steps "at" predicted "80% band" actual "error" "in band"
for S in ${LENS//,/ }; do
  E=$((S / 5))
  "$BUILD/generator/gen" specs/v2500.yaml --enable adamw,loss-prediction --set v2148.fit_every=$E --set v2148.law=${LAW:-lr_annealing} --model "$MODEL" \
    --target cpu --batch "$B" --seq "$T" -o "$TMP/t$S" >/dev/null 2>&1
  "$TMP/t$S/train" --data "$TMP/data" --steps "$S" --sample 0 --eval-every 0 --metrics "$TMP/m$S.jsonl" >/dev/null
  python3 - "$TMP/m$S.jsonl" "$S" "$E" "$MODEL" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
S, E, model = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tail = [r["loss"] for r in rows if r["step"] > S - max(1, S // 20)]
actual = sum(tail) / len(tail)
for p in (r for r in rows if "pred_final_loss" in r):
    err = p["pred_final_loss"] - actual
    inb = p["pred_final_lo"] <= actual <= p["pred_final_hi"]
    print(f"{model:10s} {S:6d} {100 * p['step'] // S:4d}% {p['pred_final_loss']:10.4f}   [{p['pred_final_lo']:.4f}, {p['pred_final_hi']:.4f}] {actual:10.4f} {err:+8.4f} {'yes' if inb else 'no':>7s}")
PY
done
