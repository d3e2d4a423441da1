#!/usr/bin/env bash
# Optimizer ablation (issue 14): every optimizer of the tree on the same data, model, batch and
# schedule, each at the best learning rate of a small sweep, 3 seeds, compared at equal steps and
# at equal time; the loss curves are plotted (SVG) and tabulated (markdown + CSV).
#
#   bench/bench_optim_ablation.sh [BUILD_DIR] [OUT_DIR]
#
# Protocol (everything below is an environment variable with this default):
#   MODELS="tiny bench/models/gpt2-19m.yaml"    tiny (0.86M) and a 19.1M-parameter GPT-2 (byte vocab)
#   OPTS="adamw lion sophia adam-mini schedule-free muon [shampoo]"   (shampoo when the tree has it)
#   STEPS_tiny=300 B_tiny=8 T_tiny=128; STEPS_big=150 B_big=4 T_big=128
#   SEEDS="1 2 3"; the LR sweep runs with seed 1 on each model; the best LR (lowest final val loss)
#   is then run with the other seeds. A best LR at an end of the grid extends the grid that way
#   (x2 or /2, twice at most), so no reported LR sits at the edge of what was tried.
#   BIG_FACTORS="0.5 1 2": the big model's grid as multiples of tiny's best LR.
#   LR grids: lion 1.25e-4 2.5e-4 5e-4 1e-3; all others 1e-3 2e-3 4e-3 8e-3 (Muon's rule scales its
#   update to AdamW's RMS, so it shares AdamW's grid; schedule-free is known to want larger LRs,
#   so the grid reaches 8e-3). LRSWEEP_big may narrow the big model's grid (default: the 3 grid
#   points centred on tiny's best).
#   Every run: clip (1.0), warmup 10% of the steps, cosine decay to 10% (schedule-free: warmup only,
#   it replaces the decay — the tree refuses cosine with it), weight decay 0.1 (v2132 default),
#   OMP_NUM_THREADS=1 (CPU time is then the work; a shared machine spins OpenMP barriers).
# Data: the corpus the demo trains on (KJV, Genesis-Deuteronomy, 2.0 MB) through `gen data`
#   (byte tokens, 5% held out as val). Val loss: 8 batches every 25 steps and at the end.
# Time: "equal time" compares every optimizer at the time AdamW needs for its full run, using each
#   optimizer's CPU time per step measured at the end of this bench (timing.csv: interleaved
#   S vs 2S-step runs, one thread; ratios, never figures from another machine or session) — the
#   training runs' own wall step times are kept in runs.csv but depend on the machine's load.
# REUSE=1 keeps the runs an earlier bench left in OUT_DIR (same model, optimizer, LR, seed, steps).
# Output in OUT_DIR (default bench/results/optim_ablation): runs.csv (every run's final val loss),
#   curves/*.jsonl (the metrics), ablation_<model>.svg, table.md (what docs/optimizers.md shows).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; OUT=${2:-bench/results/optim_ablation}
GEN="$BUILD/generator/gen"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
MODELS=${MODELS:-"tiny bench/models/gpt2-19m.yaml"}
SEEDS=${SEEDS:-"1 2 3"}
STEPS_tiny=${STEPS_tiny:-300}; B_tiny=${B_tiny:-8}; T_tiny=${T_tiny:-128}
STEPS_big=${STEPS_big:-150}; B_big=${B_big:-4}; T_big=${T_big:-128}
if [ -z "${OPTS:-}" ]; then
  OPTS="adamw lion sophia adam-mini schedule-free muon"
  "$GEN" specs/v2500.yaml --enable shampoo --model tiny --target cpu -o /tmp/hyp-abl-probe.$$ >/dev/null 2>&1 && OPTS="$OPTS shampoo"
  rm -rf /tmp/hyp-abl-probe.$$
fi
grid() { case $1 in lion) echo "1.25e-4 2.5e-4 5e-4 1e-3" ;; *) echo "1e-3 2e-3 4e-3 8e-3" ;; esac; }

mkdir -p "$OUT/curves"
TMP=$(mktemp -d /tmp/hyp-bench-abl.XXXXXX); trap 'rm -rf "$TMP"' EXIT
if command -v bible >/dev/null; then
  bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 2000000 > "$TMP/corpus.txt"
else
  head -c 2000000 data/kjv.txt > "$TMP/corpus.txt"
fi
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null

echo "model,optimizer,lr,seed,steps,final_val_loss,final_train_loss10,median_step_s" > "$OUT/runs.csv.new"
run() { # run MODEL_KEY MODEL OPT LR SEED STEPS B T
  local key=$1 model=$2 opt=$3 lr=$4 seed=$5 steps=$6 B=$7 T=$8
  local en="$opt,clip,warmup" sets=(--set "v2130.warmup_steps=$((steps / 10))")
  [ "$opt" != schedule-free ] && en="$en,cosine"
  local dir="$TMP/$key-$opt"
  [ -x "$dir/train" ] || "$GEN" specs/v2500.yaml --enable "$en" "${sets[@]}" --model "$model" --target cpu \
      --batch "$B" --seq "$T" -o "$dir" > "$dir.gen.log" 2>&1 || { cat "$dir.gen.log" >&2; return 1; }
  local m="$OUT/curves/$key-$opt-lr$lr-s$seed.jsonl"
  # REUSE=1: a run whose metrics and row an earlier bench run left in OUT is not run again
  # (e.g. to add an optimizer to a finished ablation); its row is carried over as it was
  if [ "${REUSE:-0}" = 1 ] && [ -s "$m" ] && [ -f "$OUT/runs.csv" ] &&
     grep -q "^$key,$opt,$lr,$seed,$steps," "$OUT/runs.csv"; then
    grep "^$key,$opt,$lr,$seed,$steps," "$OUT/runs.csv" | head -1 >> "$OUT/runs.csv.new"; return 0
  fi
  rm -f "$m"
  "$dir/train" --data "$TMP/data" --steps "$steps" --batch "$B" --seq "$T" --lr "$lr" --seed "$seed" \
      --eval-every 25 --eval-batches 8 --sample 0 --metrics "$m" --log-every 1000000 --tensorboard none \
      --profile none --memory-profile none > "$TMP/log" 2>&1 || { tail -3 "$TMP/log" >&2; echo "$key,$opt,$lr,$seed,$steps,nan,nan,nan" >> "$OUT/runs.csv.new"; return 0; }
  python3 - "$m" "$key" "$opt" "$lr" "$seed" "$steps" >> "$OUT/runs.csv.new" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
val = [r["val_loss"] for r in rows if "val_loss" in r]
tr = [r["loss"] for r in rows][-10:]
st = statistics.median(r["step_s"] for r in rows[1:])
print(f"{sys.argv[2]},{sys.argv[3]},{sys.argv[4]},{sys.argv[5]},{sys.argv[6]},{val[-1]:.5f},{sum(tr)/len(tr):.5f},{st:.6f}")
PY
  tail -1 "$OUT/runs.csv.new" >&2
}
best_lr() { # best_lr KEY OPT: the swept LR with the lowest final val loss (seed 1)
  awk -F, -v k="$1" -v o="$2" '$1 == k && $2 == o && $4 == 1 && $6 != "nan" { if (b == "" || $6 < bv) { b = $3; bv = $6 } } END { print b }' "$OUT/runs.csv.new"
}

for model in $MODELS; do
  key=$(basename "$model" .yaml)
  if [ "$key" = tiny ]; then steps=$STEPS_tiny B=$B_tiny T=$T_tiny; else steps=$STEPS_big B=$B_big T=$T_big; fi
  for opt in $OPTS; do
    lrs=$(grid "$opt")
    if [ "$key" != tiny ]; then # centre a 3-point grid on tiny's best
      tb=$(best_lr tiny "$opt"); [ -n "$tb" ] && lrs=$(python3 -c "import sys; b=float(sys.argv[1]); print(' '.join('%g' % (b * float(f)) for f in sys.argv[2].split()))" "$tb" "${BIG_FACTORS:-0.5 1 2}")
      lrs=${LRSWEEP_big:-$lrs}
    fi
    for lr in $lrs; do run "$key" "$model" "$opt" "$lr" 1 "$steps" "$B" "$T"; done
    # a best LR at an end of the grid is not a best: extend the grid that way (twice at most)
    for ext in 1 2; do
      b=$(best_lr "$key" "$opt"); [ -n "$b" ] || break
      lo=$(echo $lrs | tr ' ' '\n' | sort -g | head -1); hi=$(echo $lrs | tr ' ' '\n' | sort -g | tail -1)
      if [ "$b" = "$hi" ]; then nx=$(python3 -c "print('%g' % (2 * float('$b')))")
      elif [ "$b" = "$lo" ]; then nx=$(python3 -c "print('%g' % (float('$b') / 2))")
      else break; fi
      lrs="$lrs $nx"; run "$key" "$model" "$opt" "$nx" 1 "$steps" "$B" "$T"
    done
    b=$(best_lr "$key" "$opt")
    for s in $SEEDS; do [ "$s" = 1 ] || run "$key" "$model" "$opt" "$b" "$s" "$steps" "$B" "$T"; done
  done
done
mv "$OUT/runs.csv.new" "$OUT/runs.csv"

# Step time per optimizer for the "equal time" comparison: the training runs above share the
# machine with whatever else runs, so their wall step times are not comparable. Here each
# optimizer's trainer runs S and 2S steps, interleaved over REPS rounds (adamw, lion, ..., adamw,
# lion, ...), and its cost per step is the CPU time (user + sys, one thread) of the 2S run minus
# the S run's, over S (start-up cancels) — the method of bench/bench_optim_cpu.sh. Median of rounds.
echo "model,optimizer,rep,cpu_s_per_step" > "$OUT/timing.csv"
for model in $MODELS; do
  key=$(basename "$model" .yaml)
  if [ "$key" = tiny ]; then S=${TIMING_STEPS_tiny:-30} B=$B_tiny T=$T_tiny; else S=${TIMING_STEPS_big:-4} B=$B_big T=$T_big; fi
  for r in $(seq 1 "${REPS:-3}"); do
    for opt in $OPTS; do
      dir="$TMP/$key-$opt"; [ -x "$dir/train" ] || continue
      for n in $S $((2 * S)); do
        /usr/bin/time -f "%U %S" -o "$TMP/cpu$n" "$dir/train" --data "$TMP/data" --steps $n --batch "$B" --seq "$T" \
          --eval-every 0 --sample 0 --log-every 1000000 --tensorboard none --profile none --memory-profile none > /dev/null 2>&1
      done
      echo "$key,$opt,$r,$(awk -v S="$S" -v a="$(cat "$TMP/cpu$S")" -v b="$(cat "$TMP/cpu$((2 * S))")" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.5f", ((y[1] + y[2]) - (x[1] + x[2])) / S}')" >> "$OUT/timing.csv"
    done
  done
done
python3 bench/ablation_report.py "$OUT" $MODELS
