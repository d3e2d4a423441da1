#!/usr/bin/env bash
# v2162 dynamic loss scaling with v2102's fp16 policy on cpu (GEMM operands and the activation
# gradients flowing into GEMMs rounded to IEEE fp16: op_round_fp16, checked bit for bit against
# _Float16 in tests/unit/test_fp16_v2162.c). Tiny model, B=16 x T=64, one thread, ~20 s.
# (1) underflow: without scaling (init_scale 1, no growth) a measurable share of the nonzero fp16
#     GEMM operands flushes to zero (fp16_flush_frac, per step, in the metrics); at the default
#     scale 65536 the share is over 100x smaller.
# (2) with scaling the fp16 run's losses track the fp32 run's within 0.05 over 50 steps.
# (3) a planted overflow: init_scale 2^40 overflows fp16 (dlogits x S > 65504): exactly the first
#     17 steps are skipped (grad norm inf, scale halved each time: 2^40 -> 2^23), then with
#     growth_interval 5 the scale doubles after exactly 5 clean steps; every row of the metrics obeys
#     the GradScaler state machine (skip: S x 0.5 and counter reset; 5 clean in a row: S x 2). Under
#     v2176's guard the overflow skips are not guard bad steps (skipped_steps stays 0, no rollback).
# (4) resume: a run stopped at step 20 (checkpoint holds loss_scale {scale, good_steps}) and resumed
#     to 30 reproduces the straight run's losses and scales bit for bit across the growth at 23 and
#     the backoff at 26.
# Also: --target sim gets the loss_scale section and the round_fp16 ops (the device trainer runs
# them: tests/gen/test_loss_scale_sim_v2162.sh).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
unset HYP_FAULT_INJECT
kjv_corpus "$TMP/corpus.txt" 200000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
cd "$ROOT"
G=(specs/v2500.yaml --model tiny --target cpu --batch 16 --seq 64)
SEL=adamw,clip
F16=(--enable $SEL,v2102,v2162 --set v2102.dtype=fp16)
expect gen_fp32 0 "wrote" -- "$GEN" "${G[@]}" --enable $SEL -o "$TMP/f32"
expect gen_v2162_noscale 0 "wrote" -- "$GEN" "${G[@]}" "${F16[@]}" --set v2162.init_scale=1 --set v2162.growth_interval=1000000 -o "$TMP/ns"
expect gen_v2162 0 "wrote" -- "$GEN" "${G[@]}" "${F16[@]}" -o "$TMP/s"
expect gen_v2162_huge 0 "wrote" -- "$GEN" "${G[@]}" --enable $SEL,v2102,v2162,fault-tolerance --set v2102.dtype=fp16 \
  --set v2162.init_scale=1099511627776 --set v2162.growth_interval=5 -o "$TMP/h"
check test_v2162_plan_has_round_fp16 grep -q '"round_fp16"' "$TMP/s/plan.json"
expect v2162_sim_gen 0 "wrote" -- "$GEN" specs/v2500.yaml --model tiny --target sim "${F16[@]}" -o "$TMP/sim"
check test_v2162_sim_plan_has_loss_scale_and_round_fp16 bash -c "grep -q '\"loss_scale\"' '$TMP/sim/plan.json' && grep -q '\"round_fp16\"' '$TMP/sim/plan.json'"
expect v2102_fp16_storage_bf16_refused 2 "storage bf16 with dtype fp16" -- "$GEN" "${G[@]}" "${F16[@]}" --set v2102.storage=bf16 -o "$TMP/bad"
check test_v2102_fp16_refusal_writes_nothing test ! -e "$TMP/bad"
C=(--data "$TMP/data" --seq 64 --eval-every 0 --lr 1e-3)
expect fp32_50 0 "done: 50 steps" -- "$TMP/f32/train" "${C[@]}" --steps 50 --metrics "$TMP/f32.jsonl"
expect v2162_noscale_50 0 "done: 50 steps" -- "$TMP/ns/train" "${C[@]}" --steps 50 --metrics "$TMP/ns.jsonl"
expect v2162_scaled_50 0 "done: 50 steps" -- "$TMP/s/train" "${C[@]}" --steps 50 --metrics "$TMP/s.jsonl"

# (1) underflow without scaling vs with it
mean() { metric "$1" "$2" | awk '{ s += $1; n++ } END { printf "%.3g", n ? s / n : -1 }'; }
fns=$(mean "$TMP/ns.jsonl" fp16_flush_frac); fs=$(mean "$TMP/s.jsonl" fp16_flush_frac)
echo "mean share of nonzero fp16 GEMM operands flushed to 0: scale 1 $fns, scale 65536 $fs"
check test_v2162_fp16_underflows_without_scaling awk -v a="$fns" 'BEGIN { exit !(a > 0.005) }'
check test_v2162_scaling_cuts_underflow_100x awk -v a="$fns" -v b="$fs" 'BEGIN { exit !(b >= 0 && b * 100 < a) }'
check test_v2162_no_overflow_at_65536 test "$(last_metric "$TMP/s.jsonl" overflow_steps)" = 0

# (2) fp16 + scaling tracks fp32
d=$(paste <(losses "$TMP/f32.jsonl") <(losses "$TMP/s.jsonl") | awk '{ x = $1 - $2; if (x < 0) x = -x; if (x > m) m = x } END { printf "%.4f", m }')
echo "max |loss fp16+v2162 - loss fp32| over 50 steps: $d"
check test_v2162_fp16_tracks_fp32_within_0.05 awk -v a="$d" 'BEGIN { exit !(a < 0.05) }'

# (3) planted overflow: skips, backoff, growth after the interval
expect v2162_huge_30 0 "SKIPPED: inf/NaN gradients at loss scale 1.09951e\+12, now 5.49756e\+11" -- \
  "$TMP/h/train" "${C[@]}" --steps 30 --metrics "$TMP/h.jsonl"
skips=$(grep '"skipped_overflow":1' "$TMP/h.jsonl" | grep -oE '"step":[0-9]+' | cut -d: -f2 | tr '\n' ' ')
echo "overflow-skipped steps: $skips"
check test_v2162_first_17_steps_skipped bash -c "grep '\"skipped_overflow\"' '$TMP/h.jsonl' | head -18 | grep -c '\"skipped_overflow\":1' | grep -qx 17 && sed -n 18p '$TMP/h.jsonl' | grep -q '\"skipped_overflow\":0'"
check test_v2162_backoff_to_2e23 bash -c "sed -n 18p '$TMP/h.jsonl' | grep -q '\"loss_scale\":8388608[,}]'"
check test_v2162_growth_after_5_clean_steps bash -c "sed -n 22p '$TMP/h.jsonl' | grep -q '\"loss_scale\":8388608[,}]' && sed -n 23p '$TMP/h.jsonl' | grep -q '\"loss_scale\":16777216[,}]'"
check test_v2162_skipped_steps_have_inf_norm bash -c "sed -n 1p '$TMP/h.jsonl' | grep -qE '\"grad_norm\":(null|inf)'"
# every row obeys the GradScaler state machine (backoff 0.5, growth 2, interval 5)
sm() {
  paste -d' ' <(metric "$1" loss_scale) <(metric "$1" skipped_overflow) | awk '
    NR > 1 && $1 != want { print "row " NR ": scale " $1 ", expected " want; bad = 1 }
    { if ($2 == 1) { want = $1 * 0.5; good = 0 } else if (++good == 5) { want = $1 * 2; good = 0 } else want = $1 }
    END { exit bad }'
}
check test_v2162_state_machine_every_row sm "$TMP/h.jsonl"
check test_v2162_overflow_is_not_a_guard_bad_step test "$(last_metric "$TMP/h.jsonl" skipped_steps),$(last_metric "$TMP/h.jsonl" rollbacks)" = "0,0"
check test_v2162_overflow_steps_counted test "$(last_metric "$TMP/h.jsonl" overflow_steps)" = "$(echo $skips | wc -w)"

# (4) bit-exact resume across scale changes
expect v2162_stop_at_20 0 "" -- "$TMP/h/train" "${C[@]}" --steps 30 --stop-after 20 --ckpt-dir "$TMP/ck" --ckpt-every 20 --metrics "$TMP/a.jsonl"
check test_v2162_checkpoint_holds_scale grep -q '"loss_scale"' "$TMP/ck/step_00000020/state.json"
expect v2162_resume 0 "resumed from .*step_00000020 at step 20" -- "$TMP/h/train" "${C[@]}" --steps 30 --ckpt-dir "$TMP/ck" --resume --metrics "$TMP/r.jsonl"
tail30() { grep -E '"step":(2[1-9]|30),' "$1" | grep -oE '"(loss|loss_scale|skipped_overflow)":[^,}]*' | tr '\n' ' '; }
check test_v2162_resume_bit_exact_across_scale_changes test "$(tail30 "$TMP/r.jsonl")" = "$(tail30 "$TMP/h.jsonl")"
check test_v2162_resume_window_has_a_growth_and_a_backoff bash -c "tail30 () { :; }; grep -E '\"step\":(2[1-9]|30),' '$TMP/r.jsonl' | grep -oE '\"loss_scale\":[0-9]+' | sort -u | wc -l | grep -qv '^1$'"
finish
