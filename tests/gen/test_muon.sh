#!/usr/bin/env bash
# v2138 Muon through the whole trainer: `gen --enable muon` makes the plan's optimizer kind muon
# (hidden matrices in group "muon" with rule muon, embeddings/gains/biases in decay/no_decay with
# rule adamw, shard "matrix"); gen refuses it with another optimizer (lion) and with ZeRO-3 (the sim
# device: tests/gen/test_muon_dev.sh; ZeRO-1/2: test_muon_zero.sh); on the cpu backend it trains (the loss falls), np=2 plain data parallelism gives
# np=1's losses and weights, a run stopped and resumed from its checkpoint continues bit for bit,
# and the optimizer-state bytes per parameter are read off the trainer's own memory line.
# (Equivalence with the reference update rule, every weight after every step: test_reference,
# reference_v2138_*.)
#
# Tolerances: np=2 sums gradients in another order than np=1, and Newton-Schulz turns a rounding
# difference in the momentum into one spread over the whole matrix: losses 2e-5 relative (as
# test_dp: E2 + E3, docs/test-tolerances.md), weights 1e-4 absolute after 8 steps at lr 2e-3:
# Newton-Schulz maps a relative momentum difference delta ~ 1e-6 to <= ~25 delta of an update of
# size lr (E4: 8 x 2e-3 x 2.5e-5 = 4e-7); the AdamW-stepped tensors (embeddings, biases, norms)
# carry the zero-gradient noise of test_optim_zero.sh, < lr/160 per step. A missing rank moves
# weights by ~lr.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
spec_data
COMMON=(--data "$TMP/data" --seq 64 --eval-every 0)
json() { python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
close() { # close FILE_A FILE_B: every loss within 2e-5 relative
  paste <(losses "$1") <(losses "$2") | awk 'BEGIN { n = 0 } { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5 * $1) bad = 1 } END { exit bad || n < 4 }'
}

# --- gen: the plan's optimizer section, refusals ---------------------------------------------------
expect gen_muon 0 "muon_optimizer is partial" -- "$GEN" specs/v2500.yaml --enable muon,adamw --set v2132.weight_decay=0.1 --model tiny --target cpu -o "$TMP/plain"
check test_v2138_plan_optimizer_kind_is_muon_sharded_by_matrix test "$(json "$TMP/plain/plan.json" "p['optimizer']['kind'] + ' ' + p['optimizer']['shard']")" = "muon matrix"
check test_v2138_plan_hyper test "$(json "$TMP/plain/plan.json" "sorted(p['optimizer']['hyper'].items())")" = "[('beta1', 0.9), ('beta2', 0.95), ('eps', 1e-08), ('match_adamw', 1), ('momentum', 0.95), ('nesterov', 1), ('ns_steps', 5)]"
check test_v2138_groups_name_their_rule test "$(json "$TMP/plain/plan.json" "[(g['name'], g['rule'], g['weight_decay'], len(g['params'])) for g in p['optimizer']['groups']]")" = "[('muon', 'muon', 0.1, 16), ('decay', 'adamw', 0.1, 2), ('no_decay', 'adamw', 0.0, 34)]"
check test_v2138_muon_group_holds_only_hidden_matrices test "$(json "$TMP/plain/plan.json" "sorted(set(n.split('.')[-2] + '.' + n.split('.')[-1] for n in p['optimizer']['groups'][0]['params']))")" = "['c_attn.weight', 'c_fc.weight', 'c_proj.weight']"
check test_v2138_embeddings_stay_on_adamw test "$(json "$TMP/plain/plan.json" "p['optimizer']['groups'][1]['params']")" = "['transformer.wte.weight', 'transformer.wpe.weight']"
expect test_v2138_audit_says_what_muon_set 0 "optimizer kind muon: momentum 0.95 \(Nesterov\), 5 quintic Newton-Schulz steps" -- "$GEN" audit "$TMP/plain"
expect gen_muon_spectral 0 "wrote" -- "$GEN" specs/v2500.yaml --enable muon --set v2138.scale=spectral --set v2138.lr_mult=20 --model tiny --target cpu -o "$TMP/spec"
check test_v2138_spectral_scale_and_lr_mult test "$(json "$TMP/spec/plan.json" "(p['optimizer']['hyper']['match_adamw'], p['optimizer']['groups'][0]['lr_mult'])")" = "(0, 20.0)"
expect test_v2138_conflicts_with_lion 2 "conflicts with" -- "$GEN" specs/v2500.yaml --enable lion,muon --model tiny --target cpu -o "$TMP/x1"
expect test_v2138_refuses_zero3 2 "Muon updates whole matrices, and ZeRO stage 3 shards" -- "$GEN" specs/v2500.yaml --enable muon,dp,zero3 --model tiny --target cpu -o "$TMP/x2"
check test_v2138_refusal_leaves_no_output test ! -e "$TMP/x2/plan.json"
# a plan whose group names a rule its kind does not have is refused by the trainer
python3 - "$TMP/plain/plan.json" "$TMP/bad.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p['optimizer']['groups'][0]['rule'] = 'shampoo'
json.dump(p, open(sys.argv[2], 'w'))
PY
expect test_v2138_unknown_rule_refused 2 "asks for rule 'shampoo', which optimizer 'muon' does not have" -- "$TMP/plain/train" --plan "$TMP/bad.json" "${COMMON[@]}" --steps 1 --batch 4

# --- cpu: it trains; np=1 vs np=2 plain data parallelism; checkpoint resume ----------------------
expect gen_muon_dp 0 "wrote" -- "$GEN" specs/v2500.yaml --enable muon,adamw,dp --set v2132.weight_decay=0.1 --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/dp"
expect np1 0 "done: 8 steps" -- "$TMP/dp/train" "${COMMON[@]}" --steps 8 --batch 4 --metrics "$TMP/np1.jsonl" --ckpt-dir "$TMP/ck1"
check test_v2138_loss_falls awk -v a="$(losses "$TMP/np1.jsonl" | head -1)" -v b="$(losses "$TMP/np1.jsonl" | tail -1)" 'BEGIN { exit !(b < a - 0.3) }'
expect np2 0 "done: 8 steps" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/dp/train" "${COMMON[@]}" --steps 8 --batch 2 --metrics "$TMP/np2.jsonl" --ckpt-dir "$TMP/ck2"
check test_v2138_dp_np2_losses_equal_np1 close "$TMP/np1.jsonl" "$TMP/np2.jsonl"
expect test_v2138_dp_np2_weights_equal_np1 0 "max" -- "$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/ck2/step_00000008/model.safetensors" 1e-4
"$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/ck2/step_00000008/model.safetensors" 1 | tail -1
expect first_4 0 "done: 4 steps" -- "$TMP/dp/train" "${COMMON[@]}" --steps 8 --stop-after 4 --batch 4 --metrics "$TMP/r1.jsonl" --ckpt-dir "$TMP/rk"
expect resumes 0 "resumed from" -- "$TMP/dp/train" "${COMMON[@]}" --steps 8 --batch 4 --metrics "$TMP/r1.jsonl" --ckpt-dir "$TMP/rk" --resume
check test_v2138_resume_losses_bit_exact test "$(losses "$TMP/r1.jsonl")" = "$(losses "$TMP/np1.jsonl")"
expect test_v2138_resume_weights_bit_exact 0 "max" -- "$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/rk/step_00000008/model.safetensors" 0
check test_v2138_checkpoint_holds_momentum_of_a_matrix grep -qa "transformer.h.0.mlp.c_fc.weight.exp_avg\"" "$TMP/rk/step_00000008/optimizer.safetensors"
expect np2_first_4 0 "done: 4 steps" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/dp/train" "${COMMON[@]}" --steps 8 --stop-after 4 --batch 2 --metrics "$TMP/r2.jsonl" --ckpt-dir "$TMP/rk2"
expect np2_resumes 0 "resumed from" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/dp/train" "${COMMON[@]}" --steps 8 --batch 2 --metrics "$TMP/r2.jsonl" --ckpt-dir "$TMP/rk2" --resume
check test_v2138_np2_resume_losses_bit_exact test "$(losses "$TMP/r2.jsonl")" = "$(losses "$TMP/np2.jsonl")"
expect test_v2138_np2_resume_weights_bit_exact 0 "max" -- "$DIFF" "$TMP/ck2/step_00000008/model.safetensors" "$TMP/rk2/step_00000008/model.safetensors" 0

# --- optimizer-state bytes per parameter, from the trainer's memory line --------------------------
expect gen_adamw 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/a1"
nparams=$(json "$TMP/dp/plan.json" "sum(q['numel'] for q in p['params'])")
bpp() { grep "rank 0/1 memory" "$1" | grep -oE "optimizer [0-9]+ B" | grep -oE "[0-9]+" | awk -v n="$nparams" '{ printf "%.2f", $1 / n }'; }
"$TMP/dp/train" "${COMMON[@]}" --steps 1 --batch 4 > "$TMP/mem_muon.txt" 2>&1
"$TMP/a1/train" "${COMMON[@]}" --steps 1 --batch 4 > "$TMP/mem_adamw.txt" 2>&1
m=$(bpp "$TMP/mem_muon.txt"); a=$(bpp "$TMP/mem_adamw.txt")
# m for every parameter, v only for the AdamW tensors (packed layout, 16-float aligned)
want=$(json "$TMP/dp/plan.json" "round(4 + 4 * sum(q['numel'] for q in p['params'] if q['group'] != 'muon') / sum(q['numel'] for q in p['params']), 3)")
echo "optimizer-state bytes per parameter ($nparams params, tiny, np=1): Muon $m (m everywhere, v on the AdamW tensors: $want), AdamW $a"
within() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 * b) }'; }
check test_v2138_muon_state_bytes_per_param_m_plus_adamw_v within "$m" "$want"
check test_v2138_adamw_state_8_bytes_per_param within "$a" 8
# the plan's packed v layout is checked against the optimizer's own count
python3 - "$TMP/dp/plan.json" "$TMP/badn.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); i = [q['group'] for q in p['params']].index('muon'); p['optimizer']['state'][1]['numel'][i] = 7
json.dump(p, open(sys.argv[2], 'w'))
PY
expect test_v2138_wrong_packed_layout_refused 2 "keeps 7 floats of .*, optimizer 'muon' keeps 0" -- "$TMP/dp/train" --plan "$TMP/badn.json" "${COMMON[@]}" --steps 1 --batch 4
python3 - "$TMP/dp/plan.json" "$TMP/badn2.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p['optimizer']['state'][1]['numel'] = p['optimizer']['state'][1]['numel'][:3]
json.dump(p, open(sys.argv[2], 'w'))
PY
expect test_v2138_short_packed_layout_refused 2 "optimizer.state\[1\].numel' must list one count per parameter" -- "$TMP/dp/train" --plan "$TMP/badn2.json" "${COMMON[@]}" --steps 1 --batch 4
finish
