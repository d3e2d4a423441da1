#!/usr/bin/env bash
# test_posttrain_recipe.sh — v2199 best practices as a recipe (advisory spec; presets finetune-sft
# and finetune-dpo): docs/post-training.md's "Fine-tune a model: the recommended recipe" block is extracted and
# its tiny-scale line run as written (output directory moved under $TMP): tokenizer -> base model
# -> SFT (preset finetune-sft) -> DPO (preset finetune-dpo). Measured: the SFT stage lowers the
# held-out assistant-token loss by > 0.2 nats; the DPO stage runs from the SFT checkpoint; both
# presets are what the stages were generated with; bad arguments are refused with exit 2. The
# tiny line's corpus is a committed KJV slice (tests/fixtures/recipe/kjv_180k.txt), so editing the
# documentation cannot move the SFT drop across the 0.2 bound.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 GEN

block=$(awk '/^## Fine-tune a model: the recommended recipe/ { s = 1 } s && /^```sh/ { b = 1; next } b && /^```/ { exit } b' "$ROOT/docs/post-training.md")
check "v2199_recipe_guide_block_found" test -n "$block"
line=$(printf '%s\n' "$block" | grep -E '^scripts/posttrain_recipe\.sh .* tiny( |$)' | head -1)
check "v2199_recipe_guide_has_tiny_line" test -n "$line"
cmd=${line%%#*}
cmd=${cmd//out\/recipe-tiny/$TMP/recipe}
expect "v2199_recipe_guide_runs_as_written" 0 "recipe: wrote .*recipe.json" -- bash -c "cd '$ROOT' && $cmd"
R="$TMP/recipe/recipe.json"
val() { grep -o "\"$1\": [-0-9.e]*" "$R" | awk '{ print $2 }'; }
b=$(val sft_val_loss_before); a=$(val sft_val_loss_after)
check "v2199_sft_stage_lowers_heldout_assistant_loss ($b -> $a)" awk -v b="$b" -v a="$a" 'BEGIN { exit !(a != "" && a < b - 0.2) }'
# DPO at this scale: 12 held-out pairs and a 40-step base, so its held-out accuracy / margin are
# noise (measured 0 -> +0.011 and 0 -> -0.002 on two corpora); they are reported, not
# asserted. The DPO effect is measured at the full scale (docs/post-training.md, 60 held-out pairs).
m0=$(val dpo_val_margin_before); m1=$(val dpo_val_margin_after)
check "v2199_dpo_stage_ran_from_the_sft_checkpoint (held-out margin $m0 -> $m1, not asserted)" \
  grep -q -- "dpo/train .*--init-from $TMP/recipe/sft/ck/step_00000030 " "$TMP/recipe/commands.txt"
check "v2199_dpo_stage_done" grep -q "done: 12 dpo steps" "$TMP/recipe/all.log"
check "v2199_stages_use_the_presets" grep -q "finetune-sft.*finetune-dpo" <(tr '\n' ' ' < "$TMP/recipe/commands.txt")
post() { tr -d ' \n\t' < "$1/plan.json" | grep -o '"objective":"[a-z]*"'; }
check "v2199_plans_sft_then_dpo" test "$(post "$TMP/recipe/sft") $(post "$TMP/recipe/dpo")" = '"objective":"sft" "objective":"dpo"'
expect "v2199_recipe_refuses_missing_corpus" 2 "missing or empty corpus" -- bash "$ROOT/scripts/posttrain_recipe.sh" "$TMP/nope.txt" "$TMP/r2" tiny
expect "v2199_recipe_refuses_existing_out" 2 "exists" -- bash "$ROOT/scripts/posttrain_recipe.sh" "$ROOT/tests/fixtures/recipe/kjv_180k.txt" "$TMP/recipe" tiny
expect "v2199_recipe_refuses_unknown_size" 2 "unknown size" -- bash "$ROOT/scripts/posttrain_recipe.sh" "$ROOT/tests/fixtures/recipe/kjv_180k.txt" "$TMP/r3" huge
finish
