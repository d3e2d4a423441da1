#!/usr/bin/env bash
# Hugging Face weights in and out through the CLIs: `gen export CKPT -o DIR` (the plan found
# beside the checkpoint, staged + renamed, refusals with exit 2 and nothing written) and
# `train --init-from` (an exported HF directory, our checkpoint from another plan of the same
# shape, refusals naming the key), the round trip export -> init-from (lr 0) -> export giving
# identical tensors (also through ZeRO-3 on 2 ranks and its sharded checkpoint), and `--resume`
# refusing to train into a directory that holds other files.
# The numerics against transformers are in tests/unit/test_hf_io.c (same fixtures).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
ST_DIFF="$BUILD/tests/st_diff"

head -c 200000 "$ROOT/specs/SCHEMA.md" > "$TMP/corpus.txt"
cat "$ROOT"/specs/*/*.yaml >> "$TMP/corpus.txt"
expect gen_data 0 "wrote shards" -- "$GEN" data "$TMP/corpus.txt" -o "$TMP/data" --val-fraction 0.1
expect gen_trainer 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny --target cpu --batch 2 --seq 32 -o "$TMP/t"
COMMON=(--data "$TMP/data" --batch 2 --seq 32 --sample 0)
expect train_3_steps 0 "done: 3 steps" -- "$TMP/t/train" "${COMMON[@]}" --steps 3 --ckpt-dir "$TMP/t/ck"

# export: the plan is found above the checkpoint; an HF directory comes out
expect export_gpt2 0 "exported .* to" -- "$GEN" export "$TMP/t/ck" -o "$TMP/hf"
check export_has_hf_files test -s "$TMP/hf/config.json" -a -s "$TMP/hf/model.safetensors" -a -s "$TMP/hf/generation_config.json"
check export_config_is_gpt2 grep -q '"GPT2LMHeadModel"' "$TMP/hf/config.json"
check export_no_staging_left sh -c "! ls -d '$TMP'/hf.tmp-* 2>/dev/null"
expect export_step_dir_with_plan 0 "exported" -- "$GEN" export "$TMP/t/ck/step_00000003" -o "$TMP/hf_step" --plan "$TMP/t/plan.json"
expect export_step_dir_same_tensors 0 "" -- "$ST_DIFF" "$TMP/hf/model.safetensors" "$TMP/hf_step/model.safetensors" 0

# export refusals: exit 2, one line, nothing written
expect export_refuses_existing 2 "already exists" -- "$GEN" export "$TMP/t/ck" -o "$TMP/hf"
expect export_refuses_non_checkpoint 2 "not a Hyperion checkpoint" -- "$GEN" export "$TMP/hf" -o "$TMP/x1" --plan "$TMP/t/plan.json"
check export_non_checkpoint_wrote_nothing test ! -e "$TMP/x1"
expect export_refuses_missing 2 "not a directory" -- "$GEN" export "$TMP/nope" -o "$TMP/x2"
expect export_needs_o 2 "needs -o" -- "$GEN" export "$TMP/t/ck"
# a checkpoint saved before checkpoints carried their plan (no plan.json, no "plan_json" record),
# away from its trainer: the plan must be named (test_ckpt_plan.sh covers checkpoints with a copy)
mkdir -p "$TMP/lonely/ck" && cp -r "$TMP/t/ck/." "$TMP/lonely/ck/"
rm "$TMP/lonely/ck/step_00000003/plan.json"
python3 -c "import json,sys; p=sys.argv[1]; j=json.load(open(p)); del j['plan_json']; json.dump(j, open(p, 'w'))" "$TMP/lonely/ck/step_00000003/state.json"
expect export_needs_plan 2 "no plan.json .* --plan" -- "$GEN" export "$TMP/lonely/ck" -o "$TMP/x3"
cp -r "$TMP/t/ck" "$TMP/t/ckbad"
printf 'garbage' > "$TMP/t/ckbad/step_00000003/model.safetensors"
expect export_refuses_corrupt 2 "model.safetensors" -- "$GEN" export "$TMP/t/ckbad" -o "$TMP/x4"
check export_corrupt_wrote_nothing test ! -e "$TMP/x4"

# --init-from the export, lr 0 for one step: the re-export is identical (round trip)
expect init_from_hf 0 "initial weights: Hugging Face GPT2LMHeadModel" -- "$TMP/t/train" "${COMMON[@]}" --steps 1 --lr 0 --init-from "$TMP/hf" --ckpt-dir "$TMP/t/ck2"
expect export_again 0 "exported" -- "$GEN" export "$TMP/t/ck2" -o "$TMP/hf2"
expect roundtrip_identical 0 "" -- "$ST_DIFF" "$TMP/hf/model.safetensors" "$TMP/hf2/model.safetensors" 0
# the first step from the imported weights has the loss the checkpoint's weights give
l_hf=$("$TMP/t/train" "${COMMON[@]}" --steps 1 --lr 0 --init-from "$TMP/hf" | grep -o 'loss [0-9.]*' | head -1)
l_ck=$("$TMP/t/train" "${COMMON[@]}" --steps 1 --lr 0 --init-from "$TMP/t/ck" | grep -o 'loss [0-9.]*' | head -1)
check init_from_hf_equals_init_from_checkpoint test -n "$l_hf" -a "$l_hf" = "$l_ck"

# our checkpoint of another plan with the same model shape: --init-from yes, --resume no
expect gen_other_plan 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip --model tiny --target cpu --batch 2 --seq 32 -o "$TMP/t2"
expect init_from_other_plans_checkpoint 0 "initial weights: Hyperion checkpoint" -- "$TMP/t2/train" "${COMMON[@]}" --steps 1 --init-from "$TMP/t/ck"
expect resume_other_plans_checkpoint_refused 2 "plan" -- "$TMP/t2/train" "${COMMON[@]}" --steps 4 --ckpt-dir "$TMP/t/ck" --resume

# refusals of --init-from: another model (names the key and both values), not a model at all
expect init_from_other_model 2 "model_type is 'qwen3', this trainer's plan is a gpt2 model" -- "$TMP/t/train" "${COMMON[@]}" --steps 1 --init-from "$ROOT/tests/fixtures/hf_qwen3_tiny"
expect init_from_other_dims 2 "vocab_size is 64, this trainer's plan has 256" -- "$TMP/t/train" "${COMMON[@]}" --steps 1 --init-from "$ROOT/tests/fixtures/hf_gpt2_tiny"
expect init_from_missing 2 "not a directory" -- "$TMP/t/train" "${COMMON[@]}" --steps 1 --init-from "$TMP/nope"
expect init_from_unrelated_dir 2 "neither a Hyperion checkpoint" -- "$TMP/t/train" "${COMMON[@]}" --steps 1 --init-from "$TMP/data/.."

# ZeRO-3 on 2 ranks: --init-from scatters the weights to the shards, the sharded checkpoint
# (v2181) exports the same tensors (lr 0)
if command -v mpirun >/dev/null; then
  expect gen_zero3 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp,zero3 --model tiny --target cpu --batch 2 --seq 32 -o "$TMP/z3"
  expect zero3_np2_init_from_hf 0 "initial weights: Hugging Face" -- env OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z3/train" "${COMMON[@]}" --batch 1 --steps 1 --lr 0 --init-from "$TMP/hf" --ckpt-dir "$TMP/z3/ck"
  check zero3_np2_checkpoint_is_sharded test -s "$TMP/z3/ck/step_00000001/shard_00001.safetensors"
  expect export_sharded 0 "exported" -- "$GEN" export "$TMP/z3/ck" -o "$TMP/hf_z3"
  expect export_sharded_identical 0 "" -- "$ST_DIFF" "$TMP/hf/model.safetensors" "$TMP/hf_z3/model.safetensors" 0
fi

# --resume into a directory with other files (an HF save_pretrained dir) refuses, writes nothing
cp -r "$TMP/hf" "$TMP/hfcopy"
before=$(ls -A "$TMP/hfcopy" | tr '\n' ' ')
expect resume_refuses_foreign_dir 2 "no checkpoint of ours here, but other files .*--init-from" -- "$TMP/t/train" "${COMMON[@]}" --steps 2 --ckpt-dir "$TMP/hfcopy" --resume
check resume_foreign_dir_untouched test "$before" = "$(ls -A "$TMP/hfcopy" | tr '\n' ' ')"
expect resume_fresh_dir_starts 0 "no checkpoint in .* yet: starting from step 0" -- "$TMP/t/train" "${COMMON[@]}" --steps 1 --ckpt-dir "$TMP/fresh" --resume
finish
