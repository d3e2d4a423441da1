#!/usr/bin/env bash
# v2135 Sophia-G through the whole trainer: `gen --enable sophia` makes the plan's optimizer kind
# sophia (beta1/beta2/rho/hess_every, f32 states m and h, the decay group's weight decay from
# Sophia's own param); conflicts with the other optimizers are refused at gen time with the
# reason (the sim device: test_sophia_dev.sh); on the cpu backend the Gauss-Newton-Bartlett pass (labels sampled from the
# model's softmax, every hessian_interval steps) fills h (zero without a refresh) and changes the
# run; np=2 ZeRO-1 gives np=1's losses and weights (ZeRO-3: losses); a run stopped between two
# refreshes resumes bit for bit (np=1 and np=2: the sampled labels come from a stateless stream);
# and the optimizer-state bytes per parameter of Sophia and AdamW are read off the trainer's own
# memory line (np=1 and np=2 ZeRO-1). The 10-step equivalence with SophiaG's equations is
# test_reference (reference_v2135_*), the sampler test_gnb.
#
# Tolerances. Sophia moves a coordinate by lr * sign(m) * min(|m| / (rho h), 1): where it is clipped
# (every coordinate before the first refresh, h = 0) a coordinate whose m is within rounding of 0
# can flip between two summation orders of the same gradients (np=2 sums per rank, then across
# ranks) and land 2*lr away, as Lion's. Losses: 2e-5 relative (as test_dp). Weights: 8 steps x 2 x
# lr absolute (lr 3e-4: 4.8e-3) plus rounding: 5e-3. The c_attn key biases (true gradient 0, the
# gradient is rounding noise) reach that bound; the printed max shows where.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
spec_data
COMMON=(--data "$TMP/data" --seq 64 --eval-every 0 --lr 3e-4)
K3=(--set v2135.hessian_interval=3)
json() { python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
close() { # close FILE_A FILE_B: every loss within 2e-5 relative
  paste <(losses "$1") <(losses "$2") | awk 'BEGIN { n = 0 } { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5 * $1) bad = 1 } END { exit bad || n < 4 }'
}
# hmax FILES...: the largest |value| of every "*.hessian" tensor in the safetensors files
hmax() {
  python3 - "$@" <<'PY'
import json, struct, sys
best = 0.0
for path in sys.argv[1:]:
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    for k, v in hdr.items():
        if k.endswith(".hessian"):
            s, e = v["data_offsets"]
            xs = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
            best = max(best, max(abs(x) for x in xs))
print("%.6g" % best)
PY
}

# --- gen: the plan's optimizer section, conflicts, device targets ---------------------------------
expect gen_sophia 0 "sophia_optimizer is partial" -- "$GEN" specs/v2500.yaml --enable sophia --model tiny --target cpu -o "$TMP/plain"
check test_v2135_plan_optimizer_kind_is_sophia test "$(json "$TMP/plain/plan.json" "p['optimizer']['kind']")" = sophia
check test_v2135_plan_hyper test "$(json "$TMP/plain/plan.json" "sorted(p['optimizer']['hyper'].items())")" = "[('beta1', 0.965), ('beta2', 0.99), ('hess_every', 10), ('rho', 0.04)]"
check test_v2135_plan_f32_states_m_h test "$(json "$TMP/plain/plan.json" "[(s['name'], s['dtype']) for s in p['optimizer']['state']]")" = "[('m', 'f32'), ('h', 'f32')]"
check test_v2135_decay_group_takes_sophia_weight_decay test "$(json "$TMP/plain/plan.json" "[(g['name'], g['weight_decay']) for g in p['optimizer']['groups']]")" = "[('decay', 0.1), ('no_decay', 0.0)]"
expect test_v2135_audit_says_what_sophia_set 0 "optimizer kind sophia: beta1 = 0.965, beta2 = 0.99, rho = 0.04" -- "$GEN" audit "$TMP/plain"
expect test_v2135_audit_says_when_the_hessian_refreshes 0 "every 10 steps: one extra forward/backward .* labels sampled from the model's softmax" -- "$GEN" audit "$TMP/plain"
expect test_v2135_conflicts_with_lion 2 "conflicts with" -- "$GEN" specs/v2500.yaml --enable sophia,lion --model tiny -o "$TMP/x1"
expect test_v2135_conflicts_with_muon 2 "conflicts with" -- "$GEN" specs/v2500.yaml --enable sophia,muon --model tiny -o "$TMP/x2"
expect test_v2135_conflicts_with_adam_mini 2 "conflicts with" -- "$GEN" specs/v2500.yaml --enable sophia,adam-mini --model tiny -o "$TMP/x3"
check test_v2135_refusal_writes_nothing test ! -e "$TMP/x4"
expect test_v2135_bad_interval_refused 2 "hessian_interval" -- "$GEN" specs/v2500.yaml --enable sophia --set v2135.hessian_interval=0 --model tiny -o "$TMP/x5"
# a damaged plan: the trainer refuses it in one line, exit 2
cp -r "$TMP/plain" "$TMP/bad"
python3 -c "import json,sys; f=sys.argv[1]; p=json.load(open(f)); p['optimizer']['hyper']['rho']=0; json.dump(p, open(f, 'w'))" "$TMP/bad/plan.json"
expect test_v2135_trainer_refuses_rho_0 2 "optimizer.hyper.rho = 0 must be > 0 — regenerate" -- "$TMP/bad/train" "${COMMON[@]}" --steps 1
python3 -c "import json,sys; f=sys.argv[1]; p=json.load(open(f)); p['optimizer']['hyper']['rho']=0.04; del p['optimizer']['hyper']['hess_every']; json.dump(p, open(f, 'w'))" "$TMP/bad/plan.json"
expect test_v2135_trainer_refuses_missing_interval 2 "Sophia needs optimizer.hyper.hess_every — regenerate" -- "$TMP/bad/train" "${COMMON[@]}" --steps 1

# --- cpu: the GNB pass fills h and changes the run -----------------------------------------------
expect gen_sophia_zero1 0 "wrote" -- "$GEN" specs/v2500.yaml --enable sophia,memory-planning,dp,zero1 "${K3[@]}" --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/z1"
expect gen_sophia_never 0 "wrote" -- "$GEN" specs/v2500.yaml --enable sophia,memory-planning,dp,zero1 --set v2135.hessian_interval=1000 --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/never"
expect np1 0 "done: 8 steps" -- "$TMP/z1/train" "${COMMON[@]}" --steps 8 --batch 4 --metrics "$TMP/np1.jsonl" --ckpt-dir "$TMP/ck1"
expect np1_never 0 "done: 8 steps" -- "$TMP/never/train" "${COMMON[@]}" --steps 8 --batch 4 --metrics "$TMP/never.jsonl" --ckpt-dir "$TMP/ckn"
h_on=$(hmax "$TMP"/ck1/step_00000008/*.safetensors); h_off=$(hmax "$TMP"/ckn/step_00000008/*.safetensors)
echo "    max h after 8 steps: $h_on with a refresh every 3 steps, $h_off with none"
check test_v2135_gnb_pass_fills_h awk -v a="$h_on" 'BEGIN { exit !(a > 0) }'
check test_v2135_no_refresh_leaves_h_zero test "$h_off" = 0
paste <(losses "$TMP/np1.jsonl") <(losses "$TMP/never.jsonl") | sed 's/^/    k=3 vs none: /'
check test_v2135_first_3_steps_same_without_refresh test "$(losses "$TMP/np1.jsonl" | head -3)" = "$(losses "$TMP/never.jsonl" | head -3)"
check test_v2135_refresh_changes_step_4_on test "$(losses "$TMP/np1.jsonl" | sed -n 5,8p)" != "$(losses "$TMP/never.jsonl" | sed -n 5,8p)"
check test_v2135_checkpoint_holds_m_as_exp_avg grep -qa "transformer.wte.weight.exp_avg\"" "$TMP/ck1/step_00000008/optimizer.safetensors"

# --- np=2 ZeRO-1 and ZeRO-3 equal np=1; resume across a refresh is bit-exact ---------------------
expect np1_first_4 0 "done: 4 steps" -- "$TMP/z1/train" "${COMMON[@]}" --steps 8 --stop-after 4 --batch 4 --metrics "$TMP/r1.jsonl" --ckpt-dir "$TMP/rk1"
expect np1_resumes 0 "resumed from" -- "$TMP/z1/train" "${COMMON[@]}" --steps 8 --batch 4 --metrics "$TMP/r1.jsonl" --ckpt-dir "$TMP/rk1" --resume
check test_v2135_resume_losses_bit_exact test "$(losses "$TMP/r1.jsonl")" = "$(losses "$TMP/np1.jsonl")"
expect test_v2135_resume_weights_bit_exact 0 "max" -- "$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/rk1/step_00000008/model.safetensors" 0
expect np2 0 "rank 1/2 memory \(ZeRO stage 1\)" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z1/train" "${COMMON[@]}" --steps 8 --batch 2 --metrics "$TMP/np2.jsonl" --ckpt-dir "$TMP/ck2"
paste <(losses "$TMP/np1.jsonl") <(losses "$TMP/np2.jsonl") | sed 's/^/    np=1 vs np=2: /'
check test_v2135_zero1_np2_losses_equal_np1 close "$TMP/np1.jsonl" "$TMP/np2.jsonl"
expect test_v2135_zero1_np2_weights_equal_np1 0 "max" -- "$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/ck2/step_00000008" 5e-3
"$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/ck2/step_00000008" 1 | tail -1
expect np2_first_4 0 "done: 4 steps" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z1/train" "${COMMON[@]}" --steps 8 --stop-after 4 --batch 2 --metrics "$TMP/r2.jsonl" --ckpt-dir "$TMP/rk"
expect np2_resumes 0 "resumed from" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z1/train" "${COMMON[@]}" --steps 8 --batch 2 --metrics "$TMP/r2.jsonl" --ckpt-dir "$TMP/rk" --resume
check test_v2135_zero1_np2_resume_losses_bit_exact test "$(losses "$TMP/r2.jsonl")" = "$(losses "$TMP/np2.jsonl")"
expect test_v2135_zero1_np2_resume_weights_bit_exact 0 "max" -- "$DIFF" "$TMP/ck2/step_00000008" "$TMP/rk/step_00000008" 0
check test_v2135_zero1_checkpoint_holds_h_as_hessian grep -qa "transformer.wte.weight.hessian\"" "$TMP/rk/step_00000008/shard_00000.safetensors"
expect gen_sophia_zero3 0 "wrote" -- "$GEN" specs/v2500.yaml --enable sophia,memory-planning,dp,zero3 "${K3[@]}" --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/z3"
expect np2_zero3 0 "rank 1/2 memory \(ZeRO stage 3\)" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z3/train" "${COMMON[@]}" --steps 8 --batch 2 --metrics "$TMP/np2z3.jsonl"
check test_v2135_zero3_np2_losses_equal_np1 close "$TMP/np1.jsonl" "$TMP/np2z3.jsonl"

# --- optimizer-state bytes per parameter, from the trainer's memory line --------------------------
expect gen_adamw_zero1 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,memory-planning,dp,zero1 --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/a1"
nparams=$(json "$TMP/z1/plan.json" "sum(q['numel'] for q in p['params'])")
bpp() { grep "rank 0/$2 memory" "$1" | grep -oE "optimizer [0-9]+ B" | grep -oE "[0-9]+" | awk -v n="$nparams" '{ printf "%.2f", $1 / n }'; }
"$TMP/z1/train" "${COMMON[@]}" --steps 1 --batch 4 > "$TMP/mem_s1.txt" 2>&1
"$TMP/a1/train" "${COMMON[@]}" --steps 1 --batch 4 > "$TMP/mem_a1.txt" 2>&1
mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/z1/train" "${COMMON[@]}" --steps 1 --batch 2 > "$TMP/mem_s2.txt" 2>&1
s1=$(bpp "$TMP/mem_s1.txt" 1); a1=$(bpp "$TMP/mem_a1.txt" 1); s2=$(bpp "$TMP/mem_s2.txt" 2)
echo "optimizer-state bytes per parameter ($nparams params, tiny): np=1 Sophia $s1, AdamW $a1; np=2 ZeRO-1 per rank Sophia $s2"
within() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * b) }'; }
check test_v2135_sophia_state_8_bytes_per_param within "$s1" 8
check test_v2135_sophia_equals_adamw_state within "$s1" "$a1"
check test_v2135_sophia_zero1_np2_state_4_bytes_per_param_per_rank within "$s2" 4
finish
