#!/usr/bin/env bash
# v2188 `gen sweep`: hyperparameter search over gen + train processes (tiny cpu trainers):
# - successive halving (4 trials, rungs at 10 and 20 steps, eta 2, full budget 40): every trial
#   reaches step 10, the best 2 by val_loss at step 10 go on to 20, the best of those to 40;
# - a trial stopped at each rung and resumed from its checkpoint trains exactly as a straight run
#   of the same configuration (losses equal to the last printed digit: resume is bit-exact);
# - population-based training (v2189): exploited members continue from the donor's checkpoint
#   (their next loss equals the donor's bit for bit) with perturbed hyperparameters;
# - architecture/technique search (v2190): model-file fields and --enable choices per trial;
# - --resume runs nothing twice; grid = the product of the value lists; random draws are the same
#   for the same seed; bad sweep files refused with exit 2.
source "$(dirname "$0")/lib.sh" "$1"
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/corpus.txt"
expect data 0 "" -- "$GEN" data "$TMP/corpus.txt" -o "$TMP/data"
GENL='[--enable, "adamw,clip", --model, tiny, --target, cpu, --batch, "4", --seq, "32"]'
TRAINL="[--data, $TMP/data, --sample, \"0\", --eval-every, \"10\", --eval-batches, \"2\"]"
cat > "$TMP/halving.yaml" <<YAML
gen: $GENL
train: $TRAINL
steps: 40
metric: val_loss
method: halving
trials: 4
seed: 3
parallel: 2
halving: {min_steps: 10, eta: 2}
space:
  lr: {flag: --lr, log_uniform: [1.0e-4, 1.0e-2]}
  clip: {set: v2133.max_norm, values: [0.5, 1.0]}
YAML
expect sweep_halving 0 "best: trial" -- "$GEN" sweep "$TMP/halving.yaml" -o "$TMP/h"
check test_v2188_halving_keeps_the_best python3 - "$TMP/h/state.json" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
t = st["trials"]
def m(x, r): return x["rungs"].get(str(r), {}).get("metric")
at10 = sorted((m(x, 10), x["id"]) for x in t)
top2 = {i for _, i in at10[:2]}
reached20 = {x["id"] for x in t if m(x, 20) is not None}
at20 = sorted((m(x, 20), x["id"]) for x in t if x["id"] in reached20)
reached40 = {x["id"] for x in t if m(x, 40) is not None}
ok = len(t) == 4 and all(m(x, 10) is not None for x in t) and reached20 == top2 and reached40 == {at20[0][1]}
print(f"    step 10: {[(round(a, 4), i) for a, i in at10]}; to 20: {sorted(reached20)}; to 40: {sorted(reached40)}")
sys.exit(0 if ok else 1)
PY
# the winner trained straight to 40 with the same configuration: the same losses
read -r BEST LR CLIP < <(python3 -c "
import json; r = json.load(open('$TMP/h/results.json'))['best']; print(r['id'], '%.6g' % r['config']['lr'], '%.6g' % r['config']['clip'])")
expect gen_straight 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip --set "v2133.max_norm=$CLIP" --model tiny --target cpu --batch 4 --seq 32 -o "$TMP/straight"
expect train_straight 0 "done: 40 steps" -- "$TMP/straight/train" --data "$TMP/data" --sample 0 --eval-every 10 --eval-batches 2 --steps 40 --lr "$LR" --metrics "$TMP/straight.jsonl"
check test_v2188_rungs_resume_bit_exact same_losses "$TMP/h/trials/$BEST/metrics.jsonl" "$TMP/straight.jsonl" 40
cp "$TMP/h/results.json" "$TMP/results.before"
"$GEN" sweep "$TMP/halving.yaml" -o "$TMP/h" --resume > "$TMP/resume.out" 2>&1
check test_v2188_resume_runs_nothing sh -c "grep -q 'best: trial' '$TMP/resume.out' && ! grep -q 'gen sweep: trial' '$TMP/resume.out'"
check test_v2188_resume_same_results cmp -s "$TMP/results.before" "$TMP/h/results.json"

# grid: the product of the lists
cat > "$TMP/grid.yaml" <<YAML
gen: $GENL
train: $TRAINL
steps: 10
method: grid
parallel: 2
space:
  lr: {flag: --lr, values: [1.0e-3, 3.0e-3]}
  clip: {set: v2133.max_norm, values: [0.5, 1.0]}
YAML
expect sweep_grid 0 "grid search, 4 trials" -- "$GEN" sweep "$TMP/grid.yaml" -o "$TMP/g"
check test_v2188_grid_product python3 -c "
import json, sys; r = json.load(open('$TMP/g/results.json'))
c = sorted((t['config']['clip'], t['config']['lr']) for t in r['trials'])
sys.exit(0 if c == [(0.5, 1e-3), (0.5, 3e-3), (1.0, 1e-3), (1.0, 3e-3)] and all(t['metric'] for t in r['trials']) else 1)"

# random draws: the same for the same seed
sed 's/method: halving/method: random/; s/steps: 40/steps: 2/' "$TMP/halving.yaml" > "$TMP/rand.yaml"
expect sweep_random_a 0 "random search, 4 trials" -- "$GEN" sweep "$TMP/rand.yaml" -o "$TMP/ra"
expect sweep_random_b 0 "random search, 4 trials" -- "$GEN" sweep "$TMP/rand.yaml" -o "$TMP/rb"
check test_v2188_random_reproducible python3 -c "
import json, sys; a, b = (json.load(open(p))['trials'] for p in ('$TMP/ra/state.json', '$TMP/rb/state.json'))
sys.exit(0 if [t['config'] for t in a] == [t['config'] for t in b] and len({t['config']['lr'] for t in a}) == 4 else 1)"

# v2189 population-based training: the worst quarter continues from a copy of the best quarter's
# checkpoint with its hyperparameters perturbed. The loss at the step after an exploit is computed
# before that step's update, from the copied weights and the copied data position: it must equal
# the donor's loss at that step bit for bit; the new lr is the donor's times a listed factor.
sed 's/method: halving/method: pbt/; s/^halving:.*/pbt: {interval: 10, quantile: 0.25, factors: [0.8, 1.2]}/; /^  clip:/d' "$TMP/halving.yaml" > "$TMP/pbt.yaml"
expect sweep_pbt 0 "pbt search, 4 trials" -- "$GEN" sweep "$TMP/pbt.yaml" -o "$TMP/p"
check test_v2189_pbt_exploit_copies_explore_perturbs python3 - "$TMP/p" <<'PY'
import json, sys
d = sys.argv[1]
st = json.load(open(f"{d}/state.json"))
def loss_at(i, step):
    for l in open(f"{d}/trials/{i}/metrics.jsonl"):
        r = json.loads(l)
        if r["step"] == step: return r["loss"]
n = 0; ok = True
for t in st["trials"]:
    for h in t.get("history", []):
        n += 1
        s, j = h["step"], h["from"]
        ratio = h["config"]["lr"] / h["from_config"]["lr"]
        same = loss_at(t["id"], s + 1) == loss_at(j, s + 1)
        fac = any(abs(ratio - f) < 1e-12 for f in (0.8, 1.2)) or h["config"]["lr"] in (1e-4, 1e-2)
        print(f"    step {s}: trial {t['id']} <- trial {j}: loss at {s + 1} {loss_at(t['id'], s + 1)} vs donor {loss_at(j, s + 1)}; lr x{ratio:.3f}")
        ok = ok and same and fac
sys.exit(0 if ok and n == 3 else 1)
PY
printf 'gen: []\ntrain: []\nsteps: 10\nmethod: pbt\nspace:\n  c: {set: v2133.max_norm, values: [1]}\n' > "$TMP/b6.yaml"
expect bad_pbt_set 2 "must be a train flag" -- "$GEN" sweep "$TMP/b6.yaml" -o "$TMP/x6"

# v2190 architecture and technique search: a model field and an --enable choice per trial; each
# trial's trainer has the chosen depth and optimizer in its plan
cat > "$TMP/nas.yaml" <<YAML
gen: [--model, tiny, --target, cpu, --batch, "4", --seq, "32"]
train: $TRAINL
steps: 4
method: grid
parallel: 2
space:
  depth: {model: n_layers, values: [2, 3]}
  opt: {enable: true, values: [adamw, lion]}
YAML
expect sweep_nas 0 "grid search, 4 trials" -- "$GEN" sweep "$TMP/nas.yaml" -o "$TMP/n"
check test_v2190_trials_have_their_shape_and_technique python3 - "$TMP/n" <<'PY'
import json, sys
d = sys.argv[1]
st = json.load(open(f"{d}/state.json"))
ok = len(st["trials"]) == 4
for t in st["trials"]:
    key = f"n_layers={t['config']['depth']}_opt={t['config']['opt']}"
    plan = json.load(open(f"{d}/trainers/{key}/plan.json"))
    good = plan["model"]["L"] == t["config"]["depth"] and plan["optimizer"]["kind"] == t["config"]["opt"]
    print(f"    trial {t['id']}: {key}: L {plan['model']['L']}, optimizer {plan['optimizer']['kind']}")
    ok = ok and good
sys.exit(0 if ok else 1)
PY

# bad sweep files
printf 'gen: []\ntrain: []\nsteps: 10\nmethod: grid\nspace:\n  lr: {flag: --lr, uniform: [0.001, 0.01]}\n' > "$TMP/b1.yaml"
printf 'gen: []\ntrain: []\nsteps: 10\nmethod: bayes\nspace:\n  lr: {flag: --lr, values: [1]}\n' > "$TMP/b2.yaml"
printf 'gen: []\ntrain: [--steps, "5"]\nsteps: 10\nspace:\n  lr: {flag: --lr, values: [1]}\n' > "$TMP/b3.yaml"
printf 'gen: []\ntrain: []\nsteps: 10\n' > "$TMP/b4.yaml"
printf 'gen: []\ntrain: []\nsteps: 10\nspace:\n  lr: {flag: --lr, set: v2131.x, values: [1]}\n' > "$TMP/b5.yaml"
expect bad_grid_range 2 "grid search needs values" -- "$GEN" sweep "$TMP/b1.yaml" -o "$TMP/x1"
expect bad_method 2 "method 'bayes' is not grid, random, halving or pbt" -- "$GEN" sweep "$TMP/b2.yaml" -o "$TMP/x2"
expect bad_train_steps 2 "train sets --steps itself" -- "$GEN" sweep "$TMP/b3.yaml" -o "$TMP/x3"
expect bad_no_space 2 "no search space" -- "$GEN" sweep "$TMP/b4.yaml" -o "$TMP/x4"
expect bad_flag_and_set 2 "exactly one of flag" -- "$GEN" sweep "$TMP/b5.yaml" -o "$TMP/x5"
expect bad_existing 2 "already exists" -- "$GEN" sweep "$TMP/grid.yaml" -o "$TMP/g"
cp "$TMP/grid.yaml" "$TMP/grid2.yaml"; echo "seed: 9" >> "$TMP/grid2.yaml"
expect bad_resume_changed 2 "differs from the file the sweep" -- "$GEN" sweep "$TMP/grid2.yaml" -o "$TMP/g" --resume
check no_partial_output test ! -e "$TMP/x1" -a ! -e "$TMP/x2" -a ! -e "$TMP/x3" -a ! -e "$TMP/x4" -a ! -e "$TMP/x5"
echo "sweep: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
