#!/usr/bin/env bash
# test_post_train.sh — post-training end to end on the cpu (docs/post-training.md):
#   v2193 SFT: gen data --chat writes shards + S.mask; the assistant-token loss falls from the
#     first step's by > 1 nat on held-out conversations after 40 steps; refusals (unmasked data,
#     bad JSONL with file:line).
#   v2195 DPO, v2196 ORPO, v2197 SimPO, v2198 KTO: 12 steps each from random weights on a learnable
#     preference: held-out accuracy >= 0.9 and the reward margin up by > 0.1 from the starting
#     weights' evaluation; the
#     metrics JSONL holds pref_accuracy, reward_margin, kl, logps_chosen/rejected, val_*.
#   Resume of a preference run is bit-exact (reference log-probs read back from the checkpoint dir).
#   v2195/v2198 reference online (a frozen copy run each step) = the precomputed pass, bit-exact;
#     its resume (the frozen copy read back from reference_model.bin) = the straight run, bit-exact.
#   v2149 distillation: alpha = 0 equals the plain trainer (the CE half of the loss path); the KL
#     half against torch is in test_post_training; a Hugging Face teacher (gen export of the
#     teacher checkpoint) gives the checkpoint teacher's losses exactly.
#   Refusals: conflicting objectives at gen time, odd --batch, KTO on pair data, no teacher.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
TRAIN="$BUILD/runtime/hyperion-train"

bash "$ROOT/scripts/post_corpus.sh" "$ROOT/tests/fixtures/recipe/kjv_180k.txt" "$TMP/sets" 160 3 >/dev/null
check "post_corpus_made_sets" test -s "$TMP/sets/pref.jsonl" -a -s "$TMP/sets/chat.jsonl" -a -s "$TMP/sets/kto.jsonl"

# ---- v2193 SFT ----
expect "v2193_gen_data_chat" 0 "loss masks" -- "$GEN" data --chat "$TMP/sets/chat.jsonl" -o "$TMP/sft"
check "v2193_mask_sidecars" test -s "$TMP/sft/train_000000.mask" -a -s "$TMP/sft/val_000000.mask" -a -s "$TMP/sft/train_000000.docs"
printf '{"messages": [{"role": "user", "content": "hi"}]}\n' > "$TMP/noasst.jsonl"
expect "v2193_refuses_conversation_without_assistant" 2 "noasst.jsonl:1: .*no assistant" -- "$GEN" data --chat "$TMP/noasst.jsonl" -o "$TMP/x1"
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\nnot json\n' > "$TMP/bad.jsonl"
expect "v2193_refuses_bad_json_line" 2 "bad.jsonl:2: " -- "$GEN" data --chat "$TMP/bad.jsonl" -o "$TMP/x2"
check "v2193_no_partial_output" test ! -e "$TMP/x2"
expect "v2193_gen_sft" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,sft --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/sftt"
expect "v2193_sft_trains" 0 "done" -- "$TMP/sftt/train" --data "$TMP/sft" --steps 40 --lr 3e-3 --eval-every 10 --eval-batches 4 --sample 0 --metrics "$TMP/sft.jsonl"
# the first step's loss is the random weights' loss on assistant tokens (~ln 256); the last
# validation loss is the held-out conversations' assistant-token loss after 40 steps
v0=$(first_metric "$TMP/sft.jsonl" loss); v1=$(metric "$TMP/sft.jsonl" val_loss | tail -1)
check "v2193_assistant_token_loss_falls ($v0 at step 1 -> val $v1)" awk -v a="$v0" -v b="$v1" 'BEGIN { exit !(b < a - 1.0) }'
"$GEN" data "$ROOT/tests/fixtures/recipe/kjv_180k.txt" -o "$TMP/plain" >/dev/null
expect "v2193_refuses_unmasked_data" 2 "no loss masks .*gen data --chat" -- "$TMP/sftt/train" --data "$TMP/plain" --steps 1 --sample 0

# ---- preference objectives ----
# a learnable preference (a fixed polite answer over a fixed rude one): each objective must move
# the held-out reward margin up from 0 and rank every held-out pair right — a sign or scale error
# in a loss's backward does not
for i in $(seq 1 60); do
  echo "{\"prompt\": \"Question $i: is it good?\", \"chosen\": \" yes, it is good.\", \"rejected\": \" no, never bad!\"}" >> "$TMP/syn.jsonl"
  echo "{\"prompt\": \"Question $i: is it good?\", \"completion\": \" yes, it is good.\", \"label\": true}" >> "$TMP/synk.jsonl"
  echo "{\"prompt\": \"Question $i: is it good?\", \"completion\": \" no, never bad!\", \"label\": false}" >> "$TMP/synk.jsonl"
done
expect "v2195_gen_data_pref" 0 "preference examples" -- "$GEN" data --pref "$TMP/syn.jsonl" -o "$TMP/pref"
expect "v2198_gen_data_pref_kto" 0 "preference examples" -- "$GEN" data --pref "$TMP/synk.jsonl" -o "$TMP/kto"
expect "gen_data_pref_corpus" 0 "preference examples" -- "$GEN" data --pref "$TMP/sets/pref.jsonl" -o "$TMP/prefc"
printf '{"prompt": "a", "chosen": "b"}\n' > "$TMP/badpref.jsonl"
expect "v2195_refuses_incomplete_pair" 2 "badpref.jsonl:1: expected" -- "$GEN" data --pref "$TMP/badpref.jsonl" -o "$TMP/x3"
expect "v2195_v2196_conflict_refused_at_gen" 2 "conflicts with v2196" -- "$GEN" specs/v2500.yaml --enable adamw,dpo,orpo --model tiny --target cpu -o "$TMP/x4"
declare -A ID=([dpo]=v2195 [orpo]=v2196 [simpo]=v2197 [kto]=v2198)
for o in dpo orpo simpo kto; do
  expect "gen_$o" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,$o --model tiny --target cpu --batch 8 --seq 48 -o "$TMP/t_$o"
  d="$TMP/pref"; [ $o = kto ] && d="$TMP/kto"
  "$TMP/t_$o/train" --data "$d" --steps 12 --lr 2e-3 --eval-every 12 --metrics "$TMP/$o.jsonl" > "$TMP/$o.log" 2>&1
  check "${ID[$o]}_${o}_trains" grep -q "done: 12 $o steps" "$TMP/$o.log"
  m0=$(sed -n 's/^eval step 0 .*reward_margin \([-0-9.e]*\).*/\1/p' "$TMP/$o.log") # the starting weights
  acc=$(last_metric "$TMP/$o.jsonl" val_pref_accuracy); mar=$(last_metric "$TMP/$o.jsonl" val_reward_margin)
  check "${ID[$o]}_${o}_heldout_accuracy_and_margin_rise (accuracy $acc, margin ${m0:-?} -> $mar)" \
    awk -v a="$acc" -v m="$mar" -v m0="${m0:-nan}" 'BEGIN { exit !(a >= 0.9 && m > m0 + 0.1) }'
  check "${ID[$o]}_${o}_losses_finite" awk '/"loss":null/ { bad = 1 } END { exit bad }' "$TMP/$o.jsonl"
done
for k in pref_accuracy reward_margin kl logps_chosen logps_rejected val_pref_accuracy val_reward_margin val_kl; do
  check "v2195_metrics_has_$k" grep -q "\"$k\":" "$TMP/dpo.jsonl"
done
expect "v2193_pref_data_through_chat_template" 0 "preference examples" -- "$GEN" data --pref "$TMP/syn.jsonl" --template chatml -o "$TMP/preft"
check "v2193_pref_meta_names_template" grep -q '"template":.*"chatml"' "$TMP/preft/meta.json"
expect "v2195_dpo_runs_on_templated_pairs" 0 "done: 2 dpo steps" -- "$TMP/t_dpo/train" --data "$TMP/preft" --steps 2
expect "v2195_dpo_runs_on_corpus_pairs" 0 "done: 2 dpo steps" -- "$TMP/t_dpo/train" --data "$TMP/prefc" --steps 2
expect "v2195_refuses_odd_batch" 2 "even --batch" -- "$TMP/t_dpo/train" --data "$TMP/pref" --steps 1 --batch 3
expect "v2198_refuses_pair_data" 2 "KTO examples" -- "$TMP/t_kto/train" --data "$TMP/pref" --steps 1
expect "v2195_refuses_chat_data" 2 "no preference examples here" -- "$TMP/t_dpo/train" --data "$TMP/sft" --steps 1
# v2195 resume: 6 steps straight vs 3 + resume from step 3 (reference log-probs read back, not
# recomputed from the resumed weights): the last 3 steps' losses are identical
"$TMP/t_dpo/train" --data "$TMP/pref" --steps 6 --metrics "$TMP/straight.jsonl" >/dev/null 2>&1
"$TMP/t_dpo/train" --data "$TMP/pref" --steps 6 --ckpt-dir "$TMP/ck" --ckpt-every 3 >/dev/null 2>&1
rm -rf "$TMP/ck/step_00000006"; echo step_00000003 > "$TMP/ck/latest"
expect "v2195_resume_reads_reference" 0 "read from .*reference_logps.bin" -- "$TMP/t_dpo/train" --data "$TMP/pref" --steps 6 --ckpt-dir "$TMP/ck" --resume --metrics "$TMP/resumed.jsonl"
check "v2195_resume_bit_exact" test "$(losses "$TMP/straight.jsonl" | tail -3)" = "$(losses "$TMP/resumed.jsonl")" -a -n "$(losses "$TMP/resumed.jsonl")"
rm -f "$TMP/ck/reference_logps.bin"
expect "v2195_resume_refuses_without_reference" 2 "needs the reference log-probs" -- "$TMP/t_dpo/train" --data "$TMP/pref" --steps 6 --ckpt-dir "$TMP/ck" --resume
# v2195 / v2198 reference online: a frozen copy of the starting weights runs forward on each
# step's rows; 4 steps (val evaluated at 2 and 4) give bit-identical metrics (loss, reward margin,
# kl, val_*: every reference-dependent number) to the precomputed pass. A reference that moved
# with the policy would differ from step 2 on.
for o in dpo kto; do
  id=${ID[$o]}; d="$TMP/pref"; [ $o = kto ] && d="$TMP/kto"
  expect "${id}_gen_reference_online" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,$o --set $id.reference=online --model tiny --target cpu --batch 8 --seq 48 -o "$TMP/on_$o"
  check "${id}_audit_names_online_reference" grep -q "reference online: a frozen copy" "$TMP/on_$o/audit.md"
  expect "${id}_online_reference_trains" 0 "reference online: a frozen copy" -- "$TMP/on_$o/train" --data "$d" --steps 4 --eval-every 2 --metrics "$TMP/on_$o.jsonl"
  "$TMP/t_$o/train" --data "$d" --steps 4 --eval-every 2 --metrics "$TMP/pre_$o.jsonl" >/dev/null 2>&1
  check "${id}_online_reference_equals_precomputed (4 steps, metrics bit-identical)" \
    test "$(untimed "$TMP/on_$o.jsonl")" = "$(untimed "$TMP/pre_$o.jsonl")" -a -s "$TMP/on_$o.jsonl"
done
# v2195 / v2198 reference online resume: the start writes the frozen copy's weights once to
# CKPT_DIR/reference_model.bin (checksummed); 4 steps checkpointed at 2, the step-4 checkpoint
# dropped, resumed from 2: steps 3-4 give the straight run's metrics bit for bit (every
# reference-dependent number: a frozen copy rebuilt from the resumed weights would differ)
for o in dpo kto; do
  id=${ID[$o]}; d="$TMP/pref"; [ $o = kto ] && d="$TMP/kto"
  "$TMP/on_$o/train" --data "$d" --steps 4 --eval-every 2 --ckpt-dir "$TMP/ckon_$o" --ckpt-every 2 >/dev/null 2>&1
  check "${id}_online_reference_saved" test -s "$TMP/ckon_$o/reference_model.bin"
  rm -rf "$TMP/ckon_$o/step_00000004"; echo step_00000002 > "$TMP/ckon_$o/latest"
  expect "${id}_online_reference_resume_reads_frozen_copy" 0 "read from reference_model.bin" -- "$TMP/on_$o/train" --data "$d" --steps 4 --eval-every 2 --ckpt-dir "$TMP/ckon_$o" --resume --metrics "$TMP/onr_$o.jsonl"
  check "${id}_online_reference_resume_bit_exact (steps 3-4, all metrics)" \
    test "$(untimed "$TMP/on_$o.jsonl" | tail -2)" = "$(untimed "$TMP/onr_$o.jsonl")" -a -s "$TMP/onr_$o.jsonl"
done
cp "$TMP/ckon_dpo/reference_model.bin" "$TMP/refm.bin"
printf 'X' | dd of="$TMP/ckon_dpo/reference_model.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
expect "v2195_online_reference_resume_refuses_corrupt_copy" 2 "reference_model.bin: the frozen reference weights are truncated, corrupt" -- "$TMP/on_dpo/train" --data "$TMP/pref" --steps 4 --ckpt-dir "$TMP/ckon_dpo" --resume
rm -f "$TMP/ckon_dpo/reference_model.bin"
expect "v2195_online_reference_resume_refuses_missing_copy" 2 "reference_model.bin: a resumed run with reference online needs the frozen weights" -- "$TMP/on_dpo/train" --data "$TMP/pref" --steps 4 --ckpt-dir "$TMP/ckon_dpo" --resume
# ---- v2149 distillation ----
"$GEN" data "$ROOT/tests/fixtures/recipe/kjv_180k.txt" -o "$TMP/rd" >/dev/null
expect "gen_teacher" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny --target cpu --batch 8 --seq 48 -o "$TMP/teacher"
expect "v2149_teacher_trains" 0 "done" -- "$TMP/teacher/train" --data "$TMP/rd" --steps 20 --lr 3e-3 --ckpt-dir "$TMP/teacher/ck" --sample 0
TCH="$TMP/teacher/ck/step_00000020"
expect "v2149_refuses_without_teacher" 2 "needs a teacher checkpoint" -- "$GEN" specs/v2500.yaml --enable adamw,distill --model tiny --target cpu -o "$TMP/x5"
expect "v2149_refuses_with_dpo" 2 "both replace the loss" -- "$GEN" specs/v2500.yaml --enable adamw,distill,dpo --set v2149.teacher="$TCH" --model tiny --target cpu -o "$TMP/x6"
expect "gen_distill" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TCH" --model tiny --target cpu --batch 8 --seq 48 -o "$TMP/dist"
expect "gen_distill_alpha0" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TCH" --set v2149.alpha=0 --model tiny --target cpu --batch 8 --seq 48 -o "$TMP/dist0"
expect "v2149_distill_trains" 0 "distillation \\(v2149\\): teacher" -- "$TMP/dist/train" --data "$TMP/rd" --steps 6 --sample 0 --metrics "$TMP/dist.jsonl"
"$TMP/dist0/train" --data "$TMP/rd" --steps 6 --sample 0 --metrics "$TMP/dist0.jsonl" >/dev/null 2>&1
"$TMP/teacher/train" --data "$TMP/rd" --steps 6 --sample 0 --metrics "$TMP/plain.jsonl" >/dev/null 2>&1
# alpha = 0: the distillation loss path (teacher forward, double-precision row) is the plain cross-entropy
# (1e-5 relative: the student's forward and backward are the same kernels in the same order; only the
# loss row differs, double vs fp32, <= 2u per logit gradient, which AdamW's sign flips of near-zero
# coordinates carry into later losses: docs/test-tolerances.md E3, <= 1e-5 over <= 8 steps of tiny;
# a teacher term left in at alpha 0 moves the loss by >= 1e-2)
check "v2149_alpha0_equals_plain_trainer (6 steps, 1e-5 relative)" awk 'NR == FNR { a[FNR] = $1; next } { d = a[FNR] - $1; if (d < 0) d = -d; if (d > 1e-5 * $1) bad = 1; n++ } END { exit bad || n != 6 }' \
  <(losses "$TMP/dist0.jsonl") <(losses "$TMP/plain.jsonl")
check "v2149_distill_loss_differs_from_plain" test "$(losses "$TMP/dist.jsonl" | tail -1)" != "$(losses "$TMP/plain.jsonl" | tail -1)"
# v2149 teacher from a Hugging Face directory: the teacher checkpoint exported by gen export
# (GPT2LMHeadModel, F32) gives the same 6 losses as the checkpoint itself, read with the student's
# plan (same shape) or with the teacher's own plan named by teacher_plan; another shape is refused
# naming the config key
expect "v2149_export_teacher_hf" 0 "exported" -- "$GEN" export "$TMP/teacher/ck" -o "$TMP/thf"
expect "gen_distill_hf" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TMP/thf" --model tiny --target cpu --batch 8 --seq 48 -o "$TMP/disthf"
expect "v2149_hf_teacher_trains" 0 "teacher .*the student's plan" -- "$TMP/disthf/train" --data "$TMP/rd" --steps 6 --sample 0 --metrics "$TMP/disthf.jsonl"
check "v2149_hf_teacher_equals_checkpoint_teacher (6 losses identical)" test "$(losses "$TMP/disthf.jsonl")" = "$(losses "$TMP/dist.jsonl")" -a -n "$(losses "$TMP/dist.jsonl")"
expect "gen_distill_hf_plan" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TMP/thf" --set v2149.teacher_plan="$TMP/teacher/plan.json" --model tiny --target cpu --batch 8 --seq 48 -o "$TMP/disthfp"
"$TMP/disthfp/train" --data "$TMP/rd" --steps 6 --sample 0 --metrics "$TMP/disthfp.jsonl" >/dev/null 2>&1
check "v2149_hf_teacher_with_teacher_plan_equals_checkpoint_teacher" test "$(losses "$TMP/disthfp.jsonl")" = "$(losses "$TMP/dist.jsonl")" -a -n "$(losses "$TMP/dist.jsonl")"
expect "gen_distill_hf_other_shape" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TMP/thf" --model tiny-llama --target cpu --batch 8 --seq 48 -o "$TMP/disthfx"
expect "v2149_hf_teacher_of_another_shape_refused" 2 "config.json.*teacher_plan" -- "$TMP/disthfx/train" --data "$TMP/rd" --steps 1 --sample 0
expect "gen_distill_missing_teacher_plan" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TMP/thf" --set v2149.teacher_plan="$TMP/nope.json" --model tiny --target cpu --batch 8 --seq 48 -o "$TMP/disthfn"
expect "v2149_missing_teacher_plan_refused" 2 "teacher's plan does not exist" -- "$TMP/disthfn/train" --data "$TMP/rd" --steps 1 --sample 0
finish
