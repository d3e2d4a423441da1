#!/usr/bin/env bash
# test_post_train_sim.sh — the post-training objectives on the sim backend (README "Post-training"):
#   v2195 DPO, v2196 ORPO, v2197 SimPO, v2198 KTO: the same 3 steps of tiny from the same seed on
#     the cpu and on sim (per-token log-probs from the device's loss op, the backward through the
#     device's crossentropy_fused_ext with per-token weights): every step's loss, gradient norm,
#     chosen/rejected log-probs and reward margin agree within 1e-5 relative (fp32 on both; the
#     measured differences are ~1e-6), and on sim the train pref_accuracy rises from step 1 to
#     step 3 and the held-out reward margin rises from the starting weights'.
#   v2149 distillation: a cpu-trained teacher, student 3 steps on cpu and on sim (the KL + CE in
#     the device's fused-loss kernel): losses and gradient norms within 1e-5 relative.
#   With NVRTC: the sm_90 DPO trainer compiles the kernel with zero spills (cuda: not run, no GPU).
#   A DPO run on sim stopped at step 2 and resumed gives the straight run's step 3 loss exactly.
#   A sim trainer whose kernels.json lacks the variant is refused (exit 2, one line, no checkpoint).
#   The kernel itself against the cpu ops row by row: tests/unit/test_kernels_sim.c
#   (test_v2195_crossentropy_fused_ext, test_v2149_distill_ext).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1

# near(A.jsonl, B.jsonl, keys, tol): every line's keys agree, |a - b| <= tol * max(|a|, 1e-3)
near() {
  awk -v keys="$3" -v tol="$4" '
    function val(line, k) { if (match(line, "\"" k "\":[-0-9.e+]+")) return substr(line, RSTART + length(k) + 3, RLENGTH - length(k) - 3); return "x" }
    NR == FNR { a[FNR] = $0; next }
    { n = split(keys, K, ",")
      for (i = 1; i <= n; i++) {
        x = val(a[FNR], K[i]); y = val($0, K[i])
        if (x == "x" || y == "x") { missing++; continue }
        d = x - y; if (d < 0) d = -d; s = x < 0 ? -x : x; r = d / (s > 1e-3 ? s : 1e-3)
        if (r > worst) { worst = r; wk = K[i] " at step " FNR }
      }
      lines++ }
    END { printf "    %d steps, worst relative difference %.3g (%s)\n", lines, worst, wk
          exit (missing || lines != nl || worst > tol) }' nl="$5" "$1" "$2"
}

# a learnable preference the random starting weights get wrong (they find the rejected answer
# likelier per token), so that even the reference-free objectives start at accuracy 0
for i in $(seq 1 12); do
  echo "{\"prompt\": \"Question $i: is it bad?\", \"chosen\": \" no, never bad!\", \"rejected\": \" yes, it is good.\"}" >> "$TMP/syn.jsonl"
  echo "{\"prompt\": \"Question $i: is it bad?\", \"completion\": \" no, never bad!\", \"label\": true}" >> "$TMP/synk.jsonl"
  echo "{\"prompt\": \"Question $i: is it bad?\", \"completion\": \" yes, it is good.\", \"label\": false}" >> "$TMP/synk.jsonl"
done
"$GEN" data --pref "$TMP/syn.jsonl" -o "$TMP/pref" >/dev/null
"$GEN" data --pref "$TMP/synk.jsonl" -o "$TMP/kto" >/dev/null
declare -A ID=([dpo]=v2195 [orpo]=v2196 [simpo]=v2197 [kto]=v2198)
for o in dpo orpo simpo kto; do
  d="$TMP/pref"; [ $o = kto ] && d="$TMP/kto"
  for tg in cpu sim; do
    expect "gen_${o}_$tg" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,$o --model tiny --target $tg --batch 2 --seq 48 -o "$TMP/${o}_$tg"
    "$TMP/${o}_$tg/train" --data "$d" --steps 3 --lr 2e-3 --eval-every 3 --metrics "$TMP/${o}_$tg.jsonl" > "$TMP/${o}_$tg.log" 2>&1
    check "${ID[$o]}_${o}_trains_on_$tg" grep -q "done: 3 $o steps" "$TMP/${o}_$tg.log"
  done
  check "${ID[$o]}_${o}_sim_runs_the_device_loss" grep -q "backend: sim" "$TMP/${o}_sim.log"
  check "${ID[$o]}_${o}_sim_equals_cpu (loss, grad norm, logps, margin; 3 steps, 1e-5 relative)" \
    near "$TMP/${o}_cpu.jsonl" "$TMP/${o}_sim.jsonl" loss,grad_norm,logps_chosen,logps_rejected,reward_margin 1e-5 3
  a0=$(sed -n 's/^eval step 0 | val pref_accuracy \([-0-9.e]*\).*/\1/p' "$TMP/${o}_sim.log")
  m0=$(sed -n 's/^eval step 0 .*reward_margin \([-0-9.e]*\).*/\1/p' "$TMP/${o}_sim.log")
  a3=$(last_metric "$TMP/${o}_sim.jsonl" val_pref_accuracy); m3=$(last_metric "$TMP/${o}_sim.jsonl" val_reward_margin)
  check "${ID[$o]}_${o}_sim_pref_accuracy_rises (held-out accuracy ${a0:-?} -> $a3, margin ${m0:-?} -> $m3)" \
    awk -v a="${a0:-nan}" -v b="$a3" -v m="$m3" -v m0="${m0:-nan}" 'BEGIN { exit !(b > a && m > m0) }'
done

# v2195 resume on sim: checkpoints come from the device (sync_host); stopped at step 2 and resumed,
# step 3's loss is the straight run's to the last digit
"$TMP/dpo_sim/train" --data "$TMP/pref" --steps 3 --lr 2e-3 --eval-every 3 --ckpt-dir "$TMP/ck" --ckpt-every 2 >/dev/null 2>&1
rm -rf "$TMP/ck/step_00000003"; echo step_00000002 > "$TMP/ck/latest"
expect "v2195_sim_resume_reads_reference" 0 "read from .*reference_logps.bin" -- "$TMP/dpo_sim/train" --data "$TMP/pref" --steps 3 --lr 2e-3 --eval-every 3 --ckpt-dir "$TMP/ck" --resume --metrics "$TMP/resumed.jsonl"
check "v2195_sim_resume_bit_exact" test "$(losses "$TMP/dpo_sim.jsonl" | tail -1)" = "$(losses "$TMP/resumed.jsonl")" -a -n "$(losses "$TMP/resumed.jsonl")"

# a trainer whose kernels predate the fused loss's variant: one line naming the fix, exit 2, no output
cp -r "$TMP/dpo_sim" "$TMP/stale"
sed -i 's/"crossentropy_fused_ext":/"crossentropy_fused_gone":/' "$TMP/stale/kernels/kernels.json"
expect "v2195_sim_refuses_kernels_without_the_weighted_loss" 2 "no crossentropy_fused_ext launch .* regenerate the trainer" -- \
  "$TMP/stale/train" --data "$TMP/pref" --steps 1 --ckpt-dir "$TMP/stale_ck"
check "v2195_sim_refusal_leaves_no_checkpoint" test ! -e "$TMP/stale_ck"

# the cuda path of the same kernels: a DPO trainer for sm_90 compiles crossentropy_fused_ext with
# NVRTC without register spills (where this gen has NVRTC; it cannot run without a GPU)
out=$(HYPERION_CACHE="$TMP/cache" "$GEN" specs/v2500.yaml --enable adamw,dpo --model tiny --target sm_90 --batch 2 --seq 48 -o "$TMP/dpo_sm90" 2>&1)
if printf '%s' "$out" | grep -q "without NVRTC"; then
  echo "skipped: v2195_sm90_compile (this gen was built without NVRTC)"
else
  check "v2195_sm90_crossentropy_fused_ext_compiles_without_spills" awk '/"kernel":/ { k = ($0 ~ /"crossentropy_fused_ext"/) }
    k && /"spills":/ { s = $0; gsub(/[^0-9]/, "", s); seen = 1; if (s + 0 > 0) bad = 1 } END { exit !seen || bad }' "$TMP/dpo_sm90/kernels/resources.json"
fi

# ---- v2149 distillation ----
"$GEN" data "$ROOT/README.md" -o "$TMP/rd" >/dev/null
expect "gen_teacher" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny --target cpu --batch 2 --seq 32 -o "$TMP/teacher"
expect "v2149_teacher_trains" 0 "done" -- "$TMP/teacher/train" --data "$TMP/rd" --steps 10 --lr 3e-3 --ckpt-dir "$TMP/teacher/ck" --sample 0
TCH="$TMP/teacher/ck/step_00000010"
for tg in cpu sim; do
  expect "gen_distill_$tg" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TCH" --model tiny --target $tg --batch 2 --seq 32 -o "$TMP/dist_$tg"
  expect "v2149_distill_trains_on_$tg" 0 "distillation \\(v2149\\): teacher" -- "$TMP/dist_$tg/train" --data "$TMP/rd" --steps 3 --sample 0 --eval-every 0 --metrics "$TMP/dist_$tg.jsonl"
done
check "v2149_distill_sim_equals_cpu (loss, grad norm; 3 steps, 1e-5 relative)" near "$TMP/dist_cpu.jsonl" "$TMP/dist_sim.jsonl" loss,grad_norm 1e-5 3
"$TMP/teacher/train" --data "$TMP/rd" --steps 3 --sample 0 --eval-every 0 --metrics "$TMP/plain.jsonl" >/dev/null 2>&1
check "v2149_distill_sim_loss_is_not_plain_ce" test "$(first_metric "$TMP/dist_sim.jsonl" loss)" != "$(first_metric "$TMP/plain.jsonl" loss)"
finish
