#!/usr/bin/env bash
# v2111 selective activation recompute (Korthikanti et al. 2022; the attention probabilities, the
# MLP activation and optionally the block norms replayed right before their layer's backward, the
# GEMM inputs kept): losses and trained weights bit-identical (tolerance 0) to the same trainer
# without recompute on cpu (tiny GPT-2, tiny-llama, every target, together with v2101 every 2nd
# layer, bf16 and fp8 policies) and --target sim; the plan's activation arena of gpt2-124m at B=8, T=256 with the
# attention target equals `gen size --recompute selective` (within 1%), attention + MLP activation
# is smaller still; flash attention is warned (nothing to recompute there).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=2 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
DIFF="$BUILD/tests/st_diff"
T="$ROOT/specs/v2500.yaml"
kjv_corpus "$TMP/c.txt" 50000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null

PAIR_SPEC=v2111 PAIR_ENABLE=selective-recompute

# --- cpu, fp32 ------------------------------------------------------------------------------------
recompute_pair cpu_gpt2 cpu tiny 5 adamw,clip,memory-planning
recompute_pair cpu_llama cpu tiny-llama 5 adamw,clip,memory-planning
recompute_pair cpu_gpt2_all cpu tiny 3 adamw,clip,memory-planning --set v2111.targets=all
recompute_pair cpu_llama_norms cpu tiny-llama 3 adamw,clip,memory-planning --set v2111.targets=norms
recompute_pair cpu_gpt2_with_v2101 cpu tiny 3 adamw,clip,memory-planning --enable recompute --set v2101.policy=every_k --set v2101.k=2
# bf16 and fp8 policies: the attention probabilities are recomputed (the MLP GEMM reads a rounded
# copy, which is not); the replayed op has no state, so fp8's amax history is untouched
recompute_pair cpu_gpt2_bf16 cpu tiny 2 adamw,clip,memory-planning,bf16
recompute_pair cpu_gpt2_fp8 cpu tiny 2 adamw,clip,memory-planning,fp8
expect test_v2111_with_v2101_leaves_checkpointed_layers 0 "v2111.with_v2101 → 2: 2 layer" -- "$GEN" audit "$TMP/cpu_gpt2_with_v2101.rc"
expect test_v2111_audit_names_targets 0 "selective recompute \(attention \+ mlp_act\) in 4 of 4 layers" -- "$GEN" audit "$TMP/cpu_gpt2.rc"

# --- sim: the generated kernels ------------------------------------------------------------------
recompute_pair sim_gpt2 sim tiny 2 adamw,clip,memory-planning
recompute_pair sim_llama sim tiny-llama 2 adamw,clip,memory-planning

# --- flash attention: nothing to recompute for the attention target --------------------------------
expect test_v2111_flash_attention_warned 0 "v2111 activation_recomputation: flash attention saves only the log-sum-exp" \
  -- "$GEN" "$T" --enable adamw,memory-planning,flash,selective-recompute --set v2111.targets=attention --model tiny --target cpu -o "$TMP/flash"
expect test_v2111_flash_attention_decision 0 "v2111 warning → partial" -- "$GEN" audit "$TMP/flash"

# --- activation memory: the plan against gen size --recompute selective ---------------------------
m=gpt2-124m
"$GEN" "$T" --enable adamw,memory-planning --model $m --target cpu --batch 8 --seq 256 -o "$TMP/m.none" >/dev/null 2>&1
for t in attention attention_mlp all; do
  "$GEN" "$T" --enable adamw,memory-planning,selective-recompute --set v2111.targets=$t --model $m --target cpu --batch 8 --seq 256 -o "$TMP/m.$t" >/dev/null 2>&1
done
gsize() { "$GEN" size --model $m --batch 8 --seq 256 --hw host-cpu --dtype fp32 --recompute "$1" --json | tr -d ' \n\t' | grep -oE '"activations":[0-9.e+]+' | head -1 | cut -d: -f2; }
none=$(act_bytes "$TMP/m.none"); att=$(act_bytes "$TMP/m.attention"); am=$(act_bytes "$TMP/m.attention_mlp"); all=$(act_bytes "$TMP/m.all")
sel=$(gsize selective); gnone=$(gsize none)
echo "    $m B=8 T=256: act_bytes none $none (gen size $gnone), attention $att (gen size --recompute selective $sel), attention+mlp_act $am, all $all"
check test_v2111_attention_arena_matches_gen_size_selective awk -v a="$att" -v f="$sel" 'BEGIN { d = a - f; if (d < 0) d = -d; exit !(d <= 0.01 * f) }'
check test_v2111_attention_mlp_smaller_than_attention test "$am" -lt "$att"
check test_v2111_default_at_least_30pct_less awk -v a="$am" -v b="$none" 'BEGIN { exit !(a <= 0.70 * b) }'
check test_v2111_all_smaller_than_attention_mlp test "$all" -lt "$am"
finish
