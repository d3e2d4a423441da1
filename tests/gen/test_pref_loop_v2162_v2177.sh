#!/usr/bin/env bash
# test_pref_loop_v2162_v2177.sh — a preference objective (v2195 DPO) runs in the one training loop
# (runtime/train/objective.h), so it gets the loop's v2162 loss scaling and v2177 preemption, which
# the preference trainer's own loop did not have. Tiny model, B=8 x T=48, one thread, ~30 s.
#   v2162 (with v2102 bf16 storage, whose fused loss now applies the per-token weights): DPO at loss scale 2^16 gives the unscaled run's losses, gradient
#     norms and reward margins bit for bit over 4 steps: the scale is a power of two, so the
#     per-token weights x S, every product and sum of the backward and the bf16 roundings carry
#     it exactly, and the unscaling x 2^-16 is exact (no value here comes near fp32's overflow
#     or its subnormal range). With v2102 fp16 and init_scale 2^23 the first steps overflow fp16
#     (the DPO logit gradients x S pass 65504 above S = 2^20 at the starting weights): they are skipped (SKIPPED in the log, skipped_overflow 1), the scale backs off, and every
#     row of the metrics obeys the GradScaler state machine (backoff 0.5; growth 2 after 3 clean
#     steps).
#   v2177: SIGTERM mid-run stops the DPO trainer after the step in flight with exit status 3 and
#     a checkpoint holding the loss scaler's state beside the reference log-probs; --resume
#     continues to the straight run's losses, scales and reward margins bit for bit.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
unset HYP_FAULT_INJECT
for i in $(seq 1 60); do
  echo "{\"prompt\": \"Question $i: is it good?\", \"chosen\": \" yes, it is good.\", \"rejected\": \" no, never bad!\"}" >> "$TMP/syn.jsonl"
done
expect gen_data_pref 0 "preference examples" -- "$GEN" data --pref "$TMP/syn.jsonl" -o "$TMP/pref"
G=(specs/v2500.yaml --model tiny --target cpu --batch 8 --seq 48)
expect gen_dpo_bf16 0 "wrote" -- "$GEN" "${G[@]}" --enable adamw,dpo,v2102 -o "$TMP/base"
expect gen_dpo_bf16_v2162 0 "wrote" -- "$GEN" "${G[@]}" --enable adamw,dpo,v2102,v2162 -o "$TMP/ls"
expect gen_dpo_fp16_v2162_overflow 0 "wrote" -- "$GEN" "${G[@]}" --enable adamw,dpo,v2102,v2162 --set v2102.dtype=fp16 \
  --set v2162.init_scale=8388608 --set v2162.growth_interval=3 -o "$TMP/h"
C=(--data "$TMP/pref" --lr 2e-3)

# loss scaling is exact for a power-of-two scale
expect v2195_dpo_unscaled 0 "done: 4 dpo steps" -- "$TMP/base/train" "${C[@]}" --steps 4 --eval-every 4 --metrics "$TMP/base.jsonl"
expect v2162_v2195_dpo_scaled 0 "done: 4 dpo steps" -- "$TMP/ls/train" "${C[@]}" --steps 4 --eval-every 4 --metrics "$TMP/ls.jsonl"
for k in loss grad_norm reward_margin val_reward_margin; do
  check "test_v2162_v2195_dpo_scaled_equals_unscaled_$k (4 steps, bit for bit)" \
    test "$(metric "$TMP/base.jsonl" $k)" = "$(metric "$TMP/ls.jsonl" $k)" -a -n "$(metric "$TMP/ls.jsonl" $k)"
done
# the bf16-storage path weights each token as the fp32 one does: step 1 (the same starting weights)
# gives the fp32 trainer's gradient norm within 5% — each bf16 rounding moves a value by at most
# 2^-9 relative, and a gradient passes about 16 of them in tiny's 2 layers (<= 3.2%); a fused
# loss that dropped the per-token weights gives the summed cross-entropy's norm, ~100x larger
expect gen_dpo_fp32 0 "wrote" -- "$GEN" "${G[@]}" --enable adamw,dpo -o "$TMP/f32"
expect v2195_dpo_fp32 0 "done: 1 dpo steps" -- "$TMP/f32/train" "${C[@]}" --steps 1 --eval-every 0 --metrics "$TMP/f32.jsonl"
check "test_v2102_v2195_bf16_storage_weights_tokens (step-1 norm $(first_metric "$TMP/base.jsonl" grad_norm) vs fp32 $(first_metric "$TMP/f32.jsonl" grad_norm), 5%)" \
  awk -v a="$(first_metric "$TMP/base.jsonl" grad_norm)" -v b="$(first_metric "$TMP/f32.jsonl" grad_norm)" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 0.05 * b) }'
check test_v2162_v2195_dpo_runs_at_scale_65536 test "$(metric "$TMP/ls.jsonl" loss_scale | sort -u)" = 65536

# fp16 overflow: skipped steps, backoff, growth
expect v2162_v2195_dpo_overflow_skips 0 "SKIPPED: inf/NaN gradients at loss scale 8.38861e\+06" -- \
  "$TMP/h/train" "${C[@]}" --steps 12 --eval-every 6 --metrics "$TMP/h.jsonl"
n_skip=$(grep -c '"skipped_overflow":1' "$TMP/h.jsonl")
echo "    overflow-skipped DPO steps: $n_skip of 12; scales: $(metric "$TMP/h.jsonl" loss_scale | tr '\n' ' ')"
check test_v2162_v2195_first_step_skipped bash -c "head -1 '$TMP/h.jsonl' | grep -q '\"skipped_overflow\":1'"
check test_v2162_v2195_trains_after_the_skips test "$n_skip" -lt 12
sm() {
  paste -d' ' <(metric "$1" loss_scale) <(metric "$1" skipped_overflow) | awk '
    NR > 1 && $1 != want { print "    row " NR ": scale " $1 ", expected " want; bad = 1 }
    { if ($2 == 1) { want = $1 * 0.5; good = 0 } else if (++good == 3) { want = $1 * 2; good = 0 } else want = $1 }
    END { exit bad || NR != 12 }'
}
check test_v2162_v2195_state_machine_every_row sm "$TMP/h.jsonl"
check test_v2162_v2195_overflow_steps_counted test "$(last_metric "$TMP/h.jsonl" overflow_steps)" = "$n_skip"
check test_v2162_v2195_last_loss_finite awk -v l="$(last_metric "$TMP/h.jsonl" loss)" 'BEGIN { exit !(l == l + 0 && l < 1) }'

# v2177: SIGTERM mid-run, then --resume
"$TMP/h/train" "${C[@]}" --steps 12 --eval-every 6 --metrics "$TMP/p.jsonl" --ckpt-dir "$TMP/ck" > "$TMP/p.out" 2>&1 &
pid=$!
for _ in $(seq 3000); do grep -q '"step":4,' "$TMP/p.jsonl" 2>/dev/null && break; sleep 0.01; done
kill -TERM $pid
wait $pid
rc=$?
s=$(grep -oE "after step [0-9]+" "$TMP/p.out" | grep -oE "[0-9]+$" | head -1)
echo "    SIGTERM: exit $rc, stopped after step ${s:-?} of 12"
check test_v2177_v2195_sigterm_exit_status_3 test "$rc" = 3
check test_v2177_v2195_says_stopped grep -q "stopped by SIGTERM after step $s" "$TMP/p.out"
check test_v2177_v2195_stopped_mid_run test "${s:-0}" -ge 4 -a "${s:-99}" -lt 12
check test_v2177_v2195_checkpoint_at_that_step test "$(cat "$TMP/ck/latest" 2>/dev/null)" = "$(printf 'step_%08d' "${s:-0}")"
check test_v2162_v2177_checkpoint_holds_loss_scale grep -q '"loss_scale"' "$TMP/ck/$(printf 'step_%08d' "${s:-0}")/state.json"
check test_v2177_v2195_reference_logps_saved test -s "$TMP/ck/reference_logps.bin"
expect v2177_v2195_resume 0 "resumed from .* at step $s" -- "$TMP/h/train" "${C[@]}" --steps 12 --eval-every 6 --metrics "$TMP/p.jsonl" --ckpt-dir "$TMP/ck" --resume
fields() { grep -oE '"(step|loss|loss_scale|skipped_overflow|reward_margin|val_reward_margin)":[^,}]*' "$1" | tr '\n' ' '; }
check "test_v2162_v2177_v2195_resume_equals_straight_run (12 steps: loss, scale, skips, margins bit for bit)" \
  test "$(fields "$TMP/p.jsonl")" = "$(fields "$TMP/h.jsonl")"
finish
