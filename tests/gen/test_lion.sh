#!/usr/bin/env bash
# v2134 Lion through the whole trainer: `gen --enable lion` makes the plan's optimizer kind lion
# (beta1/beta2, one f32 state m, the decay group's weight decay from Lion's own param); on the
# cpu backend np=2 ZeRO-1 gives np=1's losses and weights (ZeRO-3: losses), a run stopped and resumed from its
# checkpoint continues bit for bit; the sim backend (the lion_step kernel) trains like the cpu,
# alone and under mpirun with ZeRO-1 (np=2 equals np=1, resume bit for bit);
# and the optimizer-state bytes per parameter of Lion and AdamW are read off the trainer's own
# memory line (np=1 and np=2 ZeRO-1).
#
# Tolerances. Lion moves each coordinate by exactly lr times the sign of beta1*m + (1-beta1)*g, so
# a coordinate whose c is within rounding of 0 can flip between two summation orders of the same
# gradients (np=2 sums per rank, then across ranks) and land 2*lr away. Losses: 2e-5 relative (as
# test_dp). Weights: 8 steps x 2 x lr absolute (lr 3e-4: 4.8e-3), the bound of sign updates; the
# coordinates with a real gradient agree far closer (see the printed max).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
spec_data
COMMON=(--data "$TMP/data" --seq 64 --eval-every 0 --lr 3e-4)
json() { python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
close() { # close FILE_A FILE_B: every loss within 2e-5 relative
  paste <(losses "$1") <(losses "$2") | awk 'BEGIN { n = 0 } { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5 * $1) bad = 1 } END { exit bad || n < 4 }'
}

# --- gen: the plan's optimizer section -----------------------------------------------------------
expect gen_lion 0 "partial: .*never run on a GPU" -- "$GEN" specs/v2500.yaml --enable lion --model tiny --target cpu -o "$TMP/plain"
check test_v2134_plan_optimizer_kind_is_lion test "$(json "$TMP/plain/plan.json" "p['optimizer']['kind']")" = lion
check test_v2134_plan_hyper_is_beta1_beta2 test "$(json "$TMP/plain/plan.json" "sorted(p['optimizer']['hyper'].items())")" = "[('beta1', 0.9), ('beta2', 0.99)]"
check test_v2134_plan_one_f32_state_m test "$(json "$TMP/plain/plan.json" "[(s['name'], s['dtype']) for s in p['optimizer']['state']]")" = "[('m', 'f32')]"
check test_v2134_decay_group_takes_lion_weight_decay test "$(json "$TMP/plain/plan.json" "[(g['name'], g['weight_decay']) for g in p['optimizer']['groups']]")" = "[('decay', 1.0), ('no_decay', 0.0)]"
check test_v2134_default_lr_is_a_tenth test "$(json "$TMP/plain/plan.json" "p['train']['lr']")" = 0.0002
expect test_v2134_audit_says_what_lion_set 0 "optimizer kind lion: beta1 = 0.9, beta2 = 0.99" -- "$GEN" audit "$TMP/plain"
expect gen_lion_wd 0 "wrote" -- "$GEN" specs/v2500.yaml --enable lion --set v2134.weight_decay=0.3 --set v2100.lr=1e-3 --model tiny --target cpu -o "$TMP/wd"
check test_v2134_weight_decay_param_reaches_the_decay_group test "$(json "$TMP/wd/plan.json" "p['optimizer']['groups'][0]['weight_decay']")" = 0.3
check test_v2134_explicit_lr_is_kept test "$(json "$TMP/wd/plan.json" "p['train']['lr']")" = 0.001
# with v2132 also active: still Lion, v2132's exclude picks the no-decay tensors, Lion's wd decays
expect gen_lion_adamw 0 "wrote" -- "$GEN" specs/v2500.yaml --enable lion,adamw --set v2132.exclude=norms_biases_embeddings --model tiny --target cpu -o "$TMP/both"
check test_v2134_with_v2132_still_lion test "$(json "$TMP/both/plan.json" "p['optimizer']['kind'] + ' ' + str(p['optimizer']['groups'][0]['weight_decay']) + ' ' + str('transformer.wte.weight' in p['optimizer']['groups'][1]['params'])")" = "lion 1.0 True"
expect test_v2134_conflicts_with_muon 2 "conflicts with" -- "$GEN" specs/v2500.yaml --enable lion,muon --allow-planned --model tiny -o "$TMP/x"

# --- cpu: np=1 vs np=2 ZeRO-1, checkpoint resume -------------------------------------------------
expect gen_lion_zero1 0 "wrote" -- "$GEN" specs/v2500.yaml --enable lion,memory-planning,dp,zero1 --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/z1"
expect np1 0 "done: 8 steps" -- "$TMP/z1/train" "${COMMON[@]}" --steps 8 --batch 4 --metrics "$TMP/np1.jsonl" --ckpt-dir "$TMP/ck1"
expect np2 0 "rank 1/2 memory \(ZeRO stage 1\)" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z1/train" "${COMMON[@]}" --steps 8 --batch 2 --metrics "$TMP/np2.jsonl" --ckpt-dir "$TMP/ck2"
check test_v2134_zero1_np2_losses_equal_np1 close "$TMP/np1.jsonl" "$TMP/np2.jsonl"
expect test_v2134_zero1_np2_weights_equal_np1 0 "max" -- "$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/ck2/step_00000008" 4.8e-3
"$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/ck2/step_00000008" 1 | tail -1
expect np2_first_4 0 "done: 4 steps" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z1/train" "${COMMON[@]}" --steps 8 --stop-after 4 --batch 2 --metrics "$TMP/r2.jsonl" --ckpt-dir "$TMP/rk"
expect np2_resumes 0 "resumed from" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z1/train" "${COMMON[@]}" --steps 8 --batch 2 --metrics "$TMP/r2.jsonl" --ckpt-dir "$TMP/rk" --resume
check test_v2134_zero1_np2_resume_losses_bit_exact test "$(losses "$TMP/r2.jsonl")" = "$(losses "$TMP/np2.jsonl")"
expect test_v2134_zero1_np2_resume_weights_bit_exact 0 "max" -- "$DIFF" "$TMP/ck2/step_00000008" "$TMP/rk/step_00000008" 0
check test_v2134_checkpoint_holds_m_as_exp_avg grep -qa "transformer.wte.weight.exp_avg\"" "$TMP/rk/step_00000008/shard_00000.safetensors"
check test_v2134_checkpoint_has_no_adam_v bash -c "! cat '$TMP'/rk/step_00000008/*.safetensors | grep -qa exp_avg_sq"
# ZeRO-3 (parameters sharded too): np=2 equals np=1
expect gen_lion_zero3 0 "wrote" -- "$GEN" specs/v2500.yaml --enable lion,memory-planning,dp,zero3 --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/z3"
expect np2_zero3 0 "rank 1/2 memory \(ZeRO stage 3\)" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z3/train" "${COMMON[@]}" --steps 8 --batch 2 --metrics "$TMP/np2z3.jsonl"
check test_v2134_zero3_np2_losses_equal_np1 close "$TMP/np1.jsonl" "$TMP/np2z3.jsonl"

# --- optimizer-state bytes per parameter, from the trainer's memory line --------------------------
expect gen_adamw_zero1 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,memory-planning,dp,zero1 --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/a1"
nparams=$(json "$TMP/z1/plan.json" "sum(q['numel'] for q in p['params'])")
bpp() { grep "rank 0/$2 memory" "$1" | grep -oE "optimizer [0-9]+ B" | grep -oE "[0-9]+" | awk -v n="$nparams" '{ printf "%.2f", $1 / n }'; }
"$TMP/z1/train" "${COMMON[@]}" --steps 1 --batch 4 > "$TMP/mem_lion1.txt" 2>&1
"$TMP/a1/train" "${COMMON[@]}" --steps 1 --batch 4 > "$TMP/mem_adamw1.txt" 2>&1
mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z1/train" "${COMMON[@]}" --steps 1 --batch 2 > "$TMP/mem_lion2.txt" 2>&1
mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/a1/train" "${COMMON[@]}" --steps 1 --batch 2 > "$TMP/mem_adamw2.txt" 2>&1
l1=$(bpp "$TMP/mem_lion1.txt" 1); a1=$(bpp "$TMP/mem_adamw1.txt" 1); l2=$(bpp "$TMP/mem_lion2.txt" 2); a2=$(bpp "$TMP/mem_adamw2.txt" 2)
echo "optimizer-state bytes per parameter ($nparams params, tiny): np=1 Lion $l1, AdamW $a1; np=2 ZeRO-1 per rank Lion $l2, AdamW $a2"
grep "rank 0/1 memory" "$TMP/mem_lion1.txt" "$TMP/mem_adamw1.txt"
# the arena has alignment padding (param_floats > numel sum): 4 B/param within 2%
within() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * b) }'; }
check test_v2134_lion_state_4_bytes_per_param within "$l1" 4
check test_v2134_adamw_state_8_bytes_per_param within "$a1" 8
check test_v2134_lion_zero1_np2_state_2_bytes_per_param_per_rank within "$l2" 2

# --- sim: the lion_step kernel trains like the cpu step -----------------------------------------
expect gen_lion_sim 0 "lion.cu|wrote" -- "$GEN" specs/v2500.yaml --enable lion,memory-planning --model tiny --target sim --batch 4 --seq 64 -o "$TMP/sim"
check test_v2134_sim_kernel_rendered test -s "$TMP/sim/kernels/lion.cu" -a ! -e "$TMP/sim/kernels/adamw.cu"
expect gen_lion_cpu 0 "wrote" -- "$GEN" specs/v2500.yaml --enable lion,memory-planning --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/cpu"
expect sim_run 0 "done: 4 steps" -- "$TMP/sim/train" "${COMMON[@]}" --steps 4 --batch 4 --metrics "$TMP/sim.jsonl"
expect cpu_run 0 "done: 4 steps" -- "$TMP/cpu/train" "${COMMON[@]}" --steps 4 --batch 4 --metrics "$TMP/cpu.jsonl"
paste <(losses "$TMP/cpu.jsonl") <(losses "$TMP/sim.jsonl")
check test_v2134_sim_losses_equal_cpu close "$TMP/cpu.jsonl" "$TMP/sim.jsonl"
# sim under mpirun: ZeRO-1 shards m on the device (2 B/param per rank), np=2 equals np=1, and a
# stopped np=2 run resumes bit for bit
expect gen_lion_sim_zero1 0 "wrote" -- "$GEN" specs/v2500.yaml --enable lion,memory-planning,dp,zero1 --model tiny --target sim --batch 4 --seq 64 -o "$TMP/simz"
expect sim_np2 0 "rank 1/2 sim device memory \(ZeRO stage 1\): .*optimizer 1717760 B" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/simz/train" "${COMMON[@]}" --steps 4 --batch 2 --metrics "$TMP/simz2.jsonl"
check test_v2134_sim_zero1_np2_losses_equal_np1 close "$TMP/sim.jsonl" "$TMP/simz2.jsonl"
expect sim_np2_first_2 0 "done: 2 steps" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/simz/train" "${COMMON[@]}" --steps 4 --stop-after 2 --batch 2 --metrics "$TMP/simr.jsonl" --ckpt-dir "$TMP/simck"
expect sim_np2_resumes 0 "resumed from" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/simz/train" "${COMMON[@]}" --steps 4 --batch 2 --metrics "$TMP/simr.jsonl" --ckpt-dir "$TMP/simck" --resume
check test_v2134_sim_zero1_np2_resume_bit_exact test "$(losses "$TMP/simr.jsonl")" = "$(losses "$TMP/simz2.jsonl")"
finish
