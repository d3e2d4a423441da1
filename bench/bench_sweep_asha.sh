#!/usr/bin/env bash
# Successive halving (the synchronous form of ASHA, v2188 `method: halving`) against random search
# at equal compute: the best validation loss each finds for tiny (cpu, B=4, T=32, 100 steps) over
# the learning rate (log-uniform 1e-4 .. 3e-2), for 3 sweep seeds. Budgets in trainer steps:
#   random:  4 trials x 100 steps                                  = 400 steps
#   halving: 8 trials to 25, the best 4 on to 50, the best 2 to 100 = 8x25 + 4x25 + 2x50 = 400 steps
# Also each sweep's wall seconds: trials run one at a time (parallel: 1) on one thread each, so on a
# quiet machine that is the compute spent (the trial processes are not the script's children:
# gen sweep starts them detached, so their CPU time cannot be read from here).
# Usage: bench/bench_sweep_asha.sh [BUILD_DIR]   (about 10 minutes on 2 quiet cores)
# Prints a markdown table (docs/scaling.md shows one run of it). Never run by ctest.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
GEN="$BUILD/generator/gen"
TMP=$(mktemp -d /tmp/hyp-asha.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=1
cat "$ROOT"/specs/*/*.yaml > "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
sweep() { # sweep NAME METHOD SEED
  local extra="trials: 4"
  [ "$2" = halving ] && extra=$'trials: 8\nhalving: {min_steps: 25, eta: 2}'
  cat > "$TMP/$1.yaml" <<YAML
gen: [--enable, "adamw,clip", --model, tiny, --target, cpu, --batch, "4", --seq, "32"]
train: [--data, $TMP/data, --sample, "0", --eval-every, "25", --eval-batches, "4"]
steps: 100
metric: val_loss
method: $2
seed: $3
parallel: 1
$extra
space:
  lr: {flag: --lr, log_uniform: [1.0e-4, 3.0e-2]}
YAML
  local t0 t1
  t0=$(date +%s)
  ( cd "$ROOT" && "$GEN" sweep "$TMP/$1.yaml" -o "$TMP/$1" > "$TMP/$1.log" 2>&1 )
  t1=$(date +%s)
  python3 - "$TMP/$1/results.json" "$((t1 - t0))" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
best = min((t for t in r["trials"] if t.get("metric") is not None and t["steps"] == 100), key=lambda t: t["metric"])
lr = best["config"]["lr"]
print(f"{best['metric']:.4f} {lr} {sys.argv[2]}")
PY
}
echo "| sweep seed | random: best val loss (lr) | wall s | halving: best val loss (lr) | wall s |"
echo "|---|---|---|---|---|"
for seed in 1 2 3; do
  read -r rv rlr rc <<< "$(sweep "random_$seed" random $seed)"
  read -r hv hlr hc <<< "$(sweep "halving_$seed" halving $seed)"
  printf "| %d | %s (%.2e) | %s | %s (%.2e) | %s |\n" "$seed" "$rv" "$rlr" "$rc" "$hv" "$hlr" "$hc"
done
