#!/usr/bin/env bash
# v2101 activation checkpointing (a forward replay of each checkpointed layer right before its
# backward): the losses and the trained weights are bit-identical to the same trainer
# without recompute (tolerance 0) on cpu for GPT-2 tiny and tiny-llama (every layer, every 2nd
# layer, flash attention's LSE, accumulation, ZeRO-3 over 2 ranks in fp32; the bf16 policy), and on
# --target sim (with and without v2166 fusion); the plan's activation arena shrinks
# (at B=8, T=256 every layer checkpointed: at most 30% of the arena without recompute for gpt2-124m,
# 35% for tiny, whose 4 layers weigh less beside the logits; equal to
# `gen size --recompute full`'s activation peak within 1%); the trainer's memory line reports the
# plan's arena; policy budget picks the fewest layers whose activation peak fits (or refuses a
# budget below every layer's); FP8 with recompute is refused at gen time with the reason.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=2 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
DIFF="$BUILD/tests/st_diff"
T="$ROOT/specs/v2500.yaml"
kjv_corpus "$TMP/c.txt" 50000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null

PAIR_SPEC=v2101 PAIR_ENABLE=recompute

# --- (a) cpu, fp32: bit-identical ---------------------------------------------------------------
recompute_pair cpu_gpt2_all cpu tiny 5 adamw,clip,memory-planning
recompute_pair cpu_llama_all cpu tiny-llama 5 adamw,clip,memory-planning
recompute_pair cpu_gpt2_every2 cpu tiny 5 adamw,clip,memory-planning --set v2101.policy=every_k --set v2101.k=2
recompute_pair cpu_llama_first1_flash cpu tiny-llama 5 adamw,clip,memory-planning,flash --set v2101.policy=first_n --set v2101.n_layers=1
BOTH=(--set v2103.steps=2)
recompute_pair cpu_gpt2_accum2 cpu tiny 3 adamw,clip,memory-planning,accum
BOTH=()
recompute_pair cpu_llama_bf16 cpu tiny-llama 3 adamw,clip,memory-planning,bf16
# ZeRO-3 over 2 ranks: each replay runs inside its layer's gathered parameters
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  for v in base rc; do
    sel=adamw,clip,memory-planning,dp,zero3; [ $v = rc ] && sel=$sel,recompute
    "$GEN" "$T" --enable $sel --model tiny --target cpu --batch 2 --seq 32 -o "$TMP/z3.$v" >/dev/null 2>&1
    OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z3.$v/train" --data "$TMP/data" --steps 3 --eval-every 0 \
      --lr 3e-3 --metrics "$TMP/z3.$v.jsonl" --ckpt-dir "$TMP/z3.$v.ck" > "$TMP/z3.$v.log" 2>&1
  done
  check test_v2101_zero3_np2_losses_bit_identical same_losses "$TMP/z3.base.jsonl" "$TMP/z3.rc.jsonl" 3
  expect test_v2101_zero3_np2_weights_bit_identical 0 "max \|a-b\| = 0 " -- "$DIFF" "$TMP/z3.base.ck/step_00000003" "$TMP/z3.rc.ck/step_00000003" 0
fi
OMP_NUM_THREADS=2
grep -q "activations $(act_bytes "$TMP/cpu_gpt2_all.rc") B" "$TMP/cpu_gpt2_all.rc.log"
check test_v2101_trainer_memory_line_reports_the_plan_arena test $? = 0

# --- (b) sim: the generated kernels, bit-identical too -------------------------------------------
recompute_pair sim_gpt2_all sim tiny 2 adamw,clip,memory-planning
recompute_pair sim_llama_all sim tiny-llama 2 adamw,clip,memory-planning
recompute_pair sim_gpt2_fusion sim tiny 2 adamw,clip,memory-planning,fusion

# --- (c) activation memory: the plan against gen size ------------------------------------------
declare -A AT_MOST=([tiny]=0.35 [gpt2-124m]=0.30) # tiny: 4 layers, the logits weigh more
for m in tiny gpt2-124m; do
  "$GEN" "$T" --enable adamw,memory-planning --model $m --target cpu --batch 8 --seq 256 -o "$TMP/m_$m.none" >/dev/null 2>&1
  "$GEN" "$T" --enable adamw,memory-planning,recompute --model $m --target cpu --batch 8 --seq 256 -o "$TMP/m_$m.all" >/dev/null 2>&1
  "$GEN" "$T" --enable adamw,memory-planning,recompute --set v2101.policy=every_k --set v2101.k=2 --model $m --target cpu --batch 8 --seq 256 -o "$TMP/m_$m.every2" >/dev/null 2>&1
  none=$(act_bytes "$TMP/m_$m.none"); all=$(act_bytes "$TMP/m_$m.all"); ev2=$(act_bytes "$TMP/m_$m.every2")
  full=$("$GEN" size --model $m --batch 8 --seq 256 --hw host-cpu --dtype fp32 --recompute full --json |
    tr -d ' \n\t' | grep -oE '"activations":[0-9.e+]+' | head -1 | cut -d: -f2)
  echo "    $m B=8 T=256: act_bytes none $none, every 2nd layer $ev2, every layer $all; gen size --recompute full $full"
  check "test_v2101_${m}_every_layer_at_most_${AT_MOST[$m]}" awk -v a="$all" -v b="$none" -v r="${AT_MOST[$m]}" 'BEGIN { exit !(a <= r * b) }'
  check "test_v2101_${m}_every_2nd_layer_between" awk -v a="$all" -v e="$ev2" -v b="$none" 'BEGIN { exit !(a < e && e < 0.75 * b) }'
  check "test_v2101_${m}_arena_matches_gen_size_full" awk -v a="$all" -v f="$full" 'BEGIN { d = a - f; if (d < 0) d = -d; exit !(d <= 0.01 * f) }'
done

# --- policy budget: the fewest layers (from the first) whose activation peak fits ------------------
peak() { tr -d ' \n\t' < "$1/plan.json" | grep -oE '"act_bytes_peak_live":[0-9]+' | cut -d: -f2; }
expect gen_budget 0 "wrote" -- "$GEN" "$T" --enable adamw,memory-planning,recompute --set v2101.policy=budget --set v2101.budget_gb=0.04 \
  --model tiny --target cpu --batch 8 --seq 256 -o "$TMP/b004"
expect test_v2101_budget_picks_3_layers 0 "v2101.layers → 3: policy budget" -- "$GEN" audit "$TMP/b004"
"$GEN" "$T" --enable adamw,memory-planning,recompute --set v2101.policy=first_n --set v2101.n_layers=2 --model tiny --target cpu \
  --batch 8 --seq 256 -o "$TMP/first2" >/dev/null 2>&1
echo "    budget 0.04 GiB: peak $(peak "$TMP/b004") B with 3 layers, $(peak "$TMP/first2") B with 2"
check test_v2101_budget_peak_fits awk -v a="$(peak "$TMP/b004")" 'BEGIN { exit !(a <= 0.04 * 1073741824) }'
check test_v2101_budget_one_layer_fewer_does_not_fit awk -v a="$(peak "$TMP/first2")" 'BEGIN { exit !(a > 0.04 * 1073741824) }'
expect test_v2101_budget_below_every_layer_refused 2 "v2101 gradient_checkpointing: budget_gb 0.01 GiB is below the activation peak with every layer checkpointed" \
  -- "$GEN" "$T" --enable recompute --set v2101.policy=budget --set v2101.budget_gb=0.01 --model tiny --batch 8 --seq 256 -o "$TMP/budget"

# --- refusals ------------------------------------------------------------------------------------
expect test_v2101_with_fp8_refused 2 "v2101 gradient_checkpointing: cannot replay FP8 layers" \
  -- "$GEN" "$T" --enable recompute,fp8 --model tiny --target cpu -o "$TMP/fp8"
check test_v2101_refusals_write_nothing test ! -e "$TMP/budget" -a ! -e "$TMP/fp8"
finish
