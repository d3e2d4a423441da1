#!/usr/bin/env bash
# test_grpo_sim_v2194.sh — v2194 GRPO through the one training loop on the sim backend: the
# policy's per-token log-probs from the device's loss op (token_losses) and the backward through
# the device's crossentropy_fused_ext with each token's GRPO weight (weighted_backward), sampling
# on the host executor with the device weights. The same 3 steps of tiny from the same seed on the
# cpu and on sim:
#   - reward and val_reward equal exactly: step 1 samples from the same starting weights on the
#     host executor in both runs (bit-identical), later steps from weights that differ by a few
#     fp32 rounding steps (~1e-7 relative), which changes a sampled token only when a uniform draw
#     lands within that distance of a cumulative-probability boundary (~1e-7 per token, ~1e-5 for
#     the 72 tokens sampled here);
#   - loss, grad_norm and kl within 2e-5 relative (1e-3 absolute floor for the loss, a sum of
#     advantages that cancels to ~1e-16 at step 1): fp32 on both, the device kernels summing in
#     another order; the longest reduction feeding a logit is the softmax over V = 256, whose
#     worst-case relative error is n x eps_fp32 = 256 x 6e-8 = 1.5e-5.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
for i in $(seq 1 16); do
  echo "{\"prompt\": \"Question $i: say something.\", \"chosen\": \" ok\", \"rejected\": \" no\"}" >> "$TMP/p.jsonl"
done
expect "v2194_gen_data_prompts" 0 "preference examples" -- "$GEN" data --pref "$TMP/p.jsonl" -o "$TMP/pr" --val-fraction 0.25
for tg in cpu sim; do
  expect "v2194_gen_grpo_$tg" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,grpo --set v2194.max_new_tokens=6 --model tiny --target $tg --batch 4 --seq 16 -o "$TMP/g_$tg"
  expect "v2194_grpo_trains_on_$tg" 0 "done: 3 grpo steps" -- "$TMP/g_$tg/train" --data "$TMP/pr" --steps 3 --lr 3e-3 --eval-every 3 --metrics "$TMP/$tg.jsonl"
done
check "v2194_grpo_sim_runs_the_device_loss" grep -q '"crossentropy_fused_ext"' "$TMP/g_sim/kernels/kernels.json"
# near A B KEY TOL FLOOR: every step's KEY within TOL x max(|a|, FLOOR)
near() {
  paste <(metric "$1" "$3") <(metric "$2" "$3") | awk -v tol="$4" -v floor="$5" -v k="$3" '
    { n++; d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1; if (a < floor) a = floor
      if (d > tol * a) { bad = 1; print "    " k " step " NR ": " $1 " vs " $2 } }
    END { exit bad || n != 3 }'
}
for k in reward val_reward; do
  check "v2194_grpo_sim_${k}_equals_cpu (3 steps, exact)" test "$(metric "$TMP/cpu.jsonl" $k)" = "$(metric "$TMP/sim.jsonl" $k)" -a -n "$(metric "$TMP/sim.jsonl" $k)"
done
check "v2194_grpo_sim_loss_equals_cpu (3 steps, 2e-5 relative)" near "$TMP/cpu.jsonl" "$TMP/sim.jsonl" loss 2e-5 1e-3
check "v2194_grpo_sim_grad_norm_equals_cpu (3 steps, 2e-5 relative)" near "$TMP/cpu.jsonl" "$TMP/sim.jsonl" grad_norm 2e-5 1e-3
check "v2194_grpo_sim_kl_equals_cpu (3 steps, 2e-5 relative)" near "$TMP/cpu.jsonl" "$TMP/sim.jsonl" kl 2e-5 1e-6
# the policy moved: a sim run at lr 0 keeps step 1's gradient norm but not steps 2-3's (the check can fail)
"$TMP/g_sim/train" --data "$TMP/pr" --steps 3 --lr 0 --eval-every 0 --metrics "$TMP/sim0.jsonl" >/dev/null 2>&1
check "v2194_grpo_sim_updates_the_weights (step 3 norm differs at lr 0)" \
  test "$(metric "$TMP/sim0.jsonl" grad_norm | sed -n 3p)" != "$(metric "$TMP/sim.jsonl" grad_norm | sed -n 3p)"
finish
