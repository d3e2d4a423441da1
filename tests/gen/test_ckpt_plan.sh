#!/usr/bin/env bash
# A checkpoint carries the plan that trained it (runtime/ckpt/ckpt.h: step_N/plan.json, its size
# and xxh3-128 in state.json "plan_json"), so a checkpoint directory copied away from its trainer
# is enough: `gen export` (the same tensors as with --plan), `train sample` from a train program
# with no plan beside it (the same text as the trainer's own sample), `--init-from`, and `gen
# consolidate` keeps the copy. A damaged copy is refused wherever the checkpoint is read, a missing
# one where it is needed (exit 2, one line naming the file, nothing written); a checkpoint of another model is refused with the model named; an older
# checkpoint without a copy still finds the trainer's plan beside or above it.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
ST_DIFF="$BUILD/tests/st_diff"

head -c 120000 "$ROOT/specs/SCHEMA.md" > "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" --val-fraction 0.1 >/dev/null
expect gen_trainer 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny --target cpu --batch 2 --seq 32 -o "$TMP/t"
C=(--data "$TMP/data" --batch 2 --seq 32 --sample 0 --eval-every 0)
expect train_2_steps 0 "done: 2 steps" -- "$TMP/t/train" "${C[@]}" --steps 2 --ckpt-dir "$TMP/t/ck"
S="$TMP/t/ck/step_00000002"
check ckpt_carries_the_plan cmp -s "$S/plan.json" "$TMP/t/plan.json"
check state_records_plan_checksum grep -q '"plan_json"' "$S/state.json"
echo "    plan copy $(wc -c < "$S/plan.json") B beside model+optimizer $(cat "$S"/*.safetensors | wc -c) B"

# --- the checkpoint directory alone, far from the trainer (no plan.json beside or above) --------
mkdir -p "$TMP/far" && cp -r "$TMP/t/ck" "$TMP/far/ck"
expect export_from_copy 0 "exported .*\(tiny\)" -- "$GEN" export "$TMP/far/ck" -o "$TMP/hf"
expect export_with_plan 0 "exported" -- "$GEN" export "$TMP/t/ck" -o "$TMP/hf_plan" --plan "$TMP/t/plan.json"
expect export_same_tensors 0 "" -- "$ST_DIFF" "$TMP/hf/model.safetensors" "$TMP/hf_plan/model.safetensors" 0
expect export_step_dir_alone 0 "exported" -- "$GEN" export "$TMP/far/ck/step_00000002" -o "$TMP/hf_step"
mkdir -p "$TMP/bin" && cp "$TMP/t/train" "$TMP/bin/train" # a train program with no plan beside it
expect sample_without_plan_refused 2 "cannot open the plan" -- "$TMP/bin/train" --data "$TMP/data" --steps 1
expect sample_from_copy 0 "" -- "$TMP/bin/train" sample --ckpt-dir "$TMP/far/ck" --sample 40 --prompt "The "
"$TMP/bin/train" sample --ckpt-dir "$TMP/far/ck" --sample 40 --prompt "The " 2>&1 | grep -av "^resumed from" > "$TMP/s_far.txt"
"$TMP/t/train" sample --ckpt-dir "$TMP/t/ck" --sample 40 --prompt "The " 2>&1 | grep -av "^resumed from" > "$TMP/s_own.txt"
check sample_same_text_as_trainer sh -c "test -s '$TMP/s_own.txt' && cmp -s '$TMP/s_far.txt' '$TMP/s_own.txt'"
expect init_from_copy 0 "initial weights: Hyperion checkpoint" -- "$TMP/t/train" "${C[@]}" --steps 1 --init-from "$TMP/far/ck"

# --- a damaged or missing copy: refused before anything is read or written ----------------------
cp -r "$TMP/far/ck" "$TMP/far/bad"
printf ' ' >> "$TMP/far/bad/step_00000002/plan.json"
DAMAGED="bad/step_00000002/plan.json: .* but .*state.json recorded .* plan copy is damaged"
expect export_damaged_plan 2 "$DAMAGED" -- "$GEN" export "$TMP/far/bad" -o "$TMP/x1"
check export_damaged_wrote_nothing test ! -e "$TMP/x1"
expect sample_damaged_plan 2 "$DAMAGED" -- "$TMP/bin/train" sample --ckpt-dir "$TMP/far/bad" --sample 5
expect init_from_damaged_plan 2 "$DAMAGED" -- "$TMP/t/train" "${C[@]}" --steps 1 --init-from "$TMP/far/bad"
expect resume_damaged_plan 2 "$DAMAGED" -- "$TMP/t/train" "${C[@]}" --steps 3 --ckpt-dir "$TMP/far/bad" --resume
check damaged_one_line test "$("$GEN" export "$TMP/far/bad" -o "$TMP/x1" 2>&1 | wc -l)" = 1
cp -r "$TMP/far/ck" "$TMP/far/nocopy" && rm "$TMP/far/nocopy/step_00000002/plan.json"
expect export_missing_plan_copy 2 "plan.json: missing, but .*state.json records the plan copy .*--plan" -- "$GEN" export "$TMP/far/nocopy" -o "$TMP/x2"
expect export_missing_copy_with_plan 0 "exported" -- "$GEN" export "$TMP/far/nocopy" -o "$TMP/x2" --plan "$TMP/t/plan.json"
expect init_from_missing_copy 0 "initial weights" -- "$TMP/t/train" "${C[@]}" --steps 1 --init-from "$TMP/far/nocopy"

# --- another model's checkpoint is still refused, with the difference named --------------------
expect gen_llama 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny-llama --target cpu --batch 2 --seq 32 -o "$TMP/l"
expect export_other_models_plan 2 "gen export: .*tensor 'model.embed_tokens.weight' is missing — the checkpoint is from a different model" -- "$GEN" export "$TMP/far/ck" -o "$TMP/x3" --plan "$TMP/l/plan.json"
expect init_from_other_model 2 "tensor 'model.embed_tokens.weight' is missing — the checkpoint is from a different model" -- "$TMP/l/train" "${C[@]}" --steps 1 --init-from "$TMP/far/ck"
expect sample_other_models_plan 2 "written by plan .* \(tiny on 1 rank.*\), but this trainer runs plan" -- "$TMP/l/train" sample --ckpt-dir "$TMP/far/ck" --plan "$TMP/l/plan.json" --sample 5

# --- older checkpoints (no copy, no record): the trainer's plan beside or above, as before ------
mkdir -p "$TMP/old" && cp "$TMP/t/plan.json" "$TMP/old/plan.json" && cp -r "$TMP/far/ck" "$TMP/old/ck"
rm "$TMP/old/ck/step_00000002/plan.json"
python3 -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); del j['plan_json']; json.dump(j, open(p, 'w'))" "$TMP/old/ck/step_00000002/state.json"
expect export_old_checkpoint_plan_above 0 "exported" -- "$GEN" export "$TMP/old/ck" -o "$TMP/hf_old"
expect export_old_same_tensors 0 "" -- "$ST_DIFF" "$TMP/hf/model.safetensors" "$TMP/hf_old/model.safetensors" 0
expect resume_old_checkpoint 0 "done: 1 steps" -- "$TMP/t/train" "${C[@]}" --steps 3 --ckpt-dir "$TMP/old/ck" --resume
check resumed_checkpoint_carries_plan cmp -s "$TMP/old/ck/step_00000003/plan.json" "$TMP/t/plan.json"

finish
