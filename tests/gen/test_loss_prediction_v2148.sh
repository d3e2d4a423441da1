#!/usr/bin/env bash
# v2148 loss prediction in a generated trainer (the fitter itself: tests/unit/test_losspred_v2148.c):
# - every fit_every steps the trainer prints the predicted final loss with its band and logs
#   pred_final_loss / pred_final_lo / pred_final_hi / pred_remaining at exactly those steps;
# - the prediction does not change training: losses equal to the last digit with and without it;
# - two runs of the same trainer predict the same figures (the fit is deterministic);
# - stop=true with a min_delta every fit is below: the run ends after `patience` fits, with a
#   checkpoint of that step, exit 0, early_stop in the metrics, and resumes from it;
# - a plan whose loss_prediction section is malformed is refused (exit 2).
source "$(dirname "$0")/lib.sh" "$1"
export OMP_NUM_THREADS=1
T=specs/v2500.yaml
kjv_corpus "$TMP/corpus.txt"
expect data 0 "" -- "$GEN" data "$TMP/corpus.txt" -o "$TMP/data"
RUN=(--data "$TMP/data" --steps 40 --sample 0 --eval-every 0)
expect gen_plain 0 "wrote" -- "$GEN" "$T" --enable adamw --model tiny --target cpu --batch 4 --seq 32 -o "$TMP/plain"
expect gen_pred 0 "wrote" -- "$GEN" "$T" --enable adamw,loss-prediction --set v2148.fit_every=10 --model tiny --target cpu --batch 4 --seq 32 -o "$TMP/pred"
expect audit_names_it 0 "loss prediction: every 10 steps" -- "$GEN" audit "$TMP/pred"
expect train_plain 0 "done: 40 steps" -- "$TMP/plain/train" "${RUN[@]}" --metrics "$TMP/plain.jsonl"
expect train_pred 0 "loss prediction \(v2148\) at step 30: final loss \(step 40\) [0-9.]+ \[[0-9.]+, [0-9.]+\] .*S1\^-.*S2 \(LR areas\)" -- "$TMP/pred/train" "${RUN[@]}" --metrics "$TMP/pred.jsonl"
check test_v2148_same_losses_as_without same_losses "$TMP/plain.jsonl" "$TMP/pred.jsonl" 40
check test_v2148_predictions_at_fit_steps test "$(grep '"pred_final_loss"' "$TMP/pred.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2 | tr '\n' ' ')" = "10 20 30 "
check test_v2148_band_brackets python3 - "$TMP/pred.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "pred_final_loss" in l]
ok = all(r["pred_final_lo"] <= r["pred_final_hi"] and r["pred_final_loss"] > 0 for r in rows) and len(rows) == 3
sys.exit(0 if ok else 1)
EOF
"$TMP/pred/train" "${RUN[@]}" --metrics "$TMP/pred2.jsonl" >/dev/null 2>&1
preds() { grep -o '"pred_[a-z_]*":[^,}]*' "$1"; }
check test_v2148_deterministic sh -c "[ \"\$(grep -c pred_final_loss '$TMP/pred2.jsonl')\" = 3 ] && [ \"$(preds "$TMP/pred.jsonl" | tr '\n' ' ')\" = \"$(preds "$TMP/pred2.jsonl" | tr '\n' ' ')\" ]"

# resumed: the history read back from the metrics file, so the step-30 prediction of a run stopped
# at step 20 and resumed equals the uninterrupted run's (resume is bit-exact)
expect train_first_half 0 "done: 20 steps" -- "$TMP/pred/train" "${RUN[@]}" --stop-after 20 --ckpt-dir "$TMP/ckr" --metrics "$TMP/res.jsonl"
expect train_resumed 0 "19 earlier steps' losses read back|20 earlier steps' losses read back" -- "$TMP/pred/train" "${RUN[@]}" --ckpt-dir "$TMP/ckr" --resume --metrics "$TMP/res.jsonl"
check test_v2148_resume_keeps_history test "$(preds "$TMP/res.jsonl" | tr '\n' ' ')" = "$(preds "$TMP/pred.jsonl" | tr '\n' ' ')"

# early stop: min_delta 100 (every fit expects less), patience 2 -> stops after the fit of step 20
expect gen_stop 0 "wrote" -- "$GEN" "$T" --enable adamw,loss-prediction --set v2148.fit_every=10 --set v2148.stop=true \
  --set v2148.min_delta=100 --set v2148.patience=2 --model tiny --target cpu --batch 4 --seq 32 -o "$TMP/stop"
expect train_early_stop 0 "early stop \(v2148\) after step 20 of 40: 2 fits in a row" -- "$TMP/stop/train" "${RUN[@]}" --ckpt-dir "$TMP/ck" --metrics "$TMP/stop.jsonl"
check test_v2148_early_stop_checkpoint test -d "$TMP/ck/step_00000020"
check test_v2148_early_stop_in_metrics sh -c "tail -1 '$TMP/stop.jsonl' | grep -q '\"step\":20,.*\"early_stop\":1'"
check test_v2148_losses_until_stop same_losses "$TMP/stop.jsonl" <(head -20 "$TMP/plain.jsonl") 20
expect early_stop_resumes 0 "resumed from" -- "$TMP/stop/train" "${RUN[@]}" --ckpt-dir "$TMP/ck" --resume

# a malformed section: refused at start
mkdir -p "$TMP/bad"
python3 -c "import json, sys; p = json.load(open(sys.argv[1])); p['loss_prediction']['stop'] = 'yes'; json.dump(p, open(sys.argv[2], 'w'))" "$TMP/pred/plan.json" "$TMP/bad/plan.json"
expect bad_section 2 "loss_prediction.stop' is not true or false" -- "$TMP/pred/train" --plan "$TMP/bad/plan.json" "${RUN[@]}"
python3 -c "import json, sys; p = json.load(open(sys.argv[1])); p['loss_prediction']['law'] = 'cubic'; json.dump(p, open(sys.argv[2], 'w'))" "$TMP/pred/plan.json" "$TMP/bad/plan.json"
expect bad_law 2 "loss_prediction.law' is not" -- "$TMP/pred/train" --plan "$TMP/bad/plan.json" "${RUN[@]}"
# the power law in the step (--set v2148.law=power) runs too
expect gen_power 0 "wrote" -- "$GEN" "$T" --enable adamw,loss-prediction --set v2148.fit_every=10 --set v2148.law=power --model tiny --target cpu --batch 4 --seq 32 -o "$TMP/pow"
expect train_power 0 "L\(t\) = [-0-9.e+]+ \+ [0-9.e+]+ t\^-" -- "$TMP/pow/train" "${RUN[@]}"

echo "loss prediction: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
