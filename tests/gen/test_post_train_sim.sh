#!/usr/bin/env bash
# test_post_train_sim.sh — the post-training objectives on the sim backend (docs/post-training.md):
#   v2195 DPO, v2196 ORPO, v2197 SimPO, v2198 KTO: the same 3 steps of tiny from the same seed on
#     the cpu and on sim (per-token log-probs from the device's loss op, the backward through the
#     device's crossentropy_fused_ext with per-token weights): every step's loss, gradient norm,
#     chosen/rejected log-probs and reward margin agree within 2e-5 relative (tolerance below), and on sim the train pref_accuracy rises from step 1 to
#     step 3 and the held-out reward margin rises from the starting weights'.
#   v2149 distillation: a cpu-trained teacher, student 3 steps on cpu and on sim (the KL + CE in
#     the device's fused-loss kernel): losses and gradient norms within 2e-5 relative. On sim the
#     teacher (the student's shape) runs forward on the device through the student's kernels (its
#     logits handed to the fused loss on the device): equal to the cpu trainer and to the sim host
#     teacher (HYP_TEACHER_DEVICE=0) within 2e-5, and the device memory line's "other" grows by
#     at least the teacher's parameter bytes; the same teacher exported as a Hugging Face
#     directory (read under the student's plan) gives the same losses exactly. A teacher of another shape (tiny-llama) with no sim
#     kernels falls back to the host teacher and says so; one generated for sim runs on the device
#     through its own kernels, equal to its host path within 2e-5. Data parallel: cpu np=2 equals
#     np=1 within 2e-5, and sim np=2 (a device teacher per rank) the cpu's np=1.
#   With NVRTC: the sm_90 DPO trainer compiles the kernel with zero spills (cuda: not run, no GPU).
#   A DPO run on sim stopped at step 2 and resumed gives the straight run's step 3 loss exactly.
#   A sim trainer whose kernels.json lacks the variant is refused (exit 2, one line, no checkpoint).
#   The kernel itself against the cpu ops row by row: tests/unit/test_kernels_sim.c
#   (test_v2195_crossentropy_fused_ext, test_v2149_distill_ext).
# Tolerance (docs/test-tolerances.md E2 + E3): every comparison here is the same fp32 math summed in
# two orders (sim kernels vs oneDNN/CPU ops, device vs host teacher, np=2 vs np=1): per-logit
# errors ~u*sqrt(6000 roundings) averaged over 64-128 tokens (E2, <= 3e-6), plus AdamW turning
# last-bit gradient differences into sign flips of near-zero coordinates on steps 2-3 (E3,
# <= 1e-5): 2e-5 relative on tiny over <= 4 steps. Still caught: a dropped token (~8e-3), a
# wrong beta, reference log-prob or per-token weight (>= 1e-2), a missing rank's gradient (~1e-2).
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
  check "${ID[$o]}_${o}_sim_equals_cpu (loss, grad norm, logps, margin; 3 steps, 2e-5 relative)" \
    near "$TMP/${o}_cpu.jsonl" "$TMP/${o}_sim.jsonl" loss,grad_norm,logps_chosen,logps_rejected,reward_margin 2e-5 3
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
"$GEN" data "$ROOT/tests/fixtures/recipe/kjv_180k.txt" -o "$TMP/rd" >/dev/null
expect "gen_teacher" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny --target cpu --batch 2 --seq 32 -o "$TMP/teacher"
expect "v2149_teacher_trains" 0 "done" -- "$TMP/teacher/train" --data "$TMP/rd" --steps 10 --lr 3e-3 --ckpt-dir "$TMP/teacher/ck" --sample 0
TCH="$TMP/teacher/ck/step_00000010"
for tg in cpu sim; do
  expect "gen_distill_$tg" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TCH" --model tiny --target $tg --batch 2 --seq 32 -o "$TMP/dist_$tg"
  expect "v2149_distill_trains_on_$tg" 0 "distillation \\(v2149\\): teacher" -- "$TMP/dist_$tg/train" --data "$TMP/rd" --steps 3 --sample 0 --eval-every 0 --metrics "$TMP/dist_$tg.jsonl"
done
check "v2149_distill_sim_equals_cpu (loss, grad norm; 3 steps, 2e-5 relative)" near "$TMP/dist_cpu.jsonl" "$TMP/dist_sim.jsonl" loss,grad_norm 2e-5 3
# the device teacher (the run above; its banner and memory line from one more step) against the host teacher on sim
"$TMP/dist_sim/train" --data "$TMP/rd" --steps 1 --sample 0 --eval-every 0 > "$TMP/dist_simd.log" 2>&1
HYP_TEACHER_DEVICE=0 "$TMP/dist_sim/train" --data "$TMP/rd" --steps 3 --sample 0 --eval-every 0 --metrics "$TMP/dist_simh.jsonl" > "$TMP/dist_simh.log" 2>&1
check "v2149_sim_teacher_forward_on_the_device" grep -q "teacher's forward runs on the sim device (the student's kernels (same shape)" "$TMP/dist_simd.log"
check "v2149_sim_host_teacher_when_asked" grep -q "teacher's forward runs on the host (HYP_TEACHER_DEVICE=0)" "$TMP/dist_simh.log"
check "v2149_sim_device_teacher_equals_cpu (3 steps, 2e-5 relative)" near "$TMP/dist_cpu.jsonl" "$TMP/dist_sim.jsonl" loss,grad_norm 2e-5 3
check "v2149_sim_device_teacher_equals_host_teacher (3 steps, 2e-5 relative)" near "$TMP/dist_simh.jsonl" "$TMP/dist_sim.jsonl" loss,grad_norm 2e-5 3
mem() { sed -n "s/.*sim device memory.* params \([0-9]*\) B .* other \([0-9]*\) B.*/\1 \2/p" "$1"; }
read -r pd od <<< "$(mem "$TMP/dist_simd.log")"; read -r ph oh <<< "$(mem "$TMP/dist_simh.log")"
check "v2149_sim_memory_counts_the_teacher (other ${oh:-?} -> ${od:-?} B, teacher params ${pd:-?} B)" \
  awk -v a="${oh:-0}" -v b="${od:-0}" -v p="${pd:-0}" 'BEGIN { exit !(p > 0 && b - a >= p) }'
# the same teacher as a Hugging Face directory (gen export), read under the student's plan: on the device, the same losses to the last digit
expect gen_export_teacher 0 "exported" -- "$GEN" export "$TCH" -o "$TMP/thf"
expect gen_distill_hf_sim 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TMP/thf" --model tiny --target sim --batch 2 --seq 32 -o "$TMP/dhf"
expect "v2149_sim_hf_teacher_on_the_device" 0 "teacher's forward runs on the sim device \\(the student's kernels \\(its plan\\)" -- \
  "$TMP/dhf/train" --data "$TMP/rd" --steps 3 --sample 0 --eval-every 0 --metrics "$TMP/dhf.jsonl"
check "v2149_sim_hf_teacher_equals_checkpoint_teacher (3 losses, exact)" test "$(losses "$TMP/dhf.jsonl")" = "$(losses "$TMP/dist_sim.jsonl")" -a -n "$(losses "$TMP/dhf.jsonl")"
# a teacher of another shape: tiny-llama trained on the cpu (no sim kernels: the host teacher), and
# the same checkpoint under a tiny-llama plan generated for sim (its own kernels: on the device)
expect gen_teacher_llama 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny-llama --target cpu --batch 2 --seq 32 -o "$TMP/tl"
"$TMP/tl/train" --data "$TMP/rd" --steps 2 --lr 3e-3 --ckpt-dir "$TMP/tl/ck" --ckpt-every 2 --sample 0 >/dev/null 2>&1
expect gen_distill_llama_teacher 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TMP/tl/ck/step_00000002" --model tiny --target sim --batch 2 --seq 32 -o "$TMP/dtl"
expect "v2149_sim_other_shape_teacher_on_the_host" 0 "teacher's forward runs on the host \\(no sim kernels beside its plan, and its shape is not the student's\\)" -- \
  "$TMP/dtl/train" --data "$TMP/rd" --steps 2 --sample 0 --eval-every 0 --metrics "$TMP/dtl_h.jsonl"
expect gen_teacher_llama_sim 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny-llama --target sim --batch 2 --seq 32 -o "$TMP/tls"
cp -r "$TMP/tl/ck" "$TMP/tls/ck"
expect gen_distill_llama_sim_teacher 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,distill --set v2149.teacher="$TMP/tls/ck/step_00000002" --model tiny --target sim --batch 2 --seq 32 -o "$TMP/dtls"
expect "v2149_sim_other_shape_teacher_on_the_device" 0 "teacher's forward runs on the sim device \\(the teacher's kernels" -- \
  "$TMP/dtls/train" --data "$TMP/rd" --steps 2 --sample 0 --eval-every 0 --metrics "$TMP/dtl_d.jsonl"
check "v2149_sim_other_shape_device_teacher_equals_host (2 steps, 2e-5 relative)" near "$TMP/dtl_h.jsonl" "$TMP/dtl_d.jsonl" loss,grad_norm 2e-5 2
# the teacher's kernels that cannot run its plan (a launch renamed): the host teacher, saying why
sed -i 's/"layernorm_fwd":/"layernorm_gone":/; s/"rmsnorm_fwd":/"rmsnorm_gone":/' "$TMP/tls/kernels/kernels.json"
expect "v2149_sim_teacher_kernels_unusable_falls_back_to_host" 0 "teacher's forward runs on the host \\(the teacher's kernels do not run its plan: kernels.json: plan op" -- \
  "$TMP/dtls/train" --data "$TMP/rd" --steps 1 --sample 0 --eval-every 0
# data parallelism (cpu): every rank's teacher on its own batch; np=2 at batch 2 = np=1 at batch 4
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  expect gen_teacher4 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny --target cpu --batch 4 --seq 32 -o "$TMP/teacher4"
  cp -r "$TMP/teacher/ck" "$TMP/teacher4/ck"
  expect gen_distill_dp 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp,distill --set v2149.teacher="$TMP/teacher4/ck/step_00000010" --model tiny --target cpu --batch 4 --seq 32 -o "$TMP/ddp"
  expect v2149_dp_np1 0 "done: 4 steps" -- "$TMP/ddp/train" --data "$TMP/rd" --steps 4 --batch 4 --sample 0 --eval-every 0 --metrics "$TMP/np1.jsonl"
  expect v2149_dp_np2_runs 0 "done: 4 steps" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/ddp/train" --data "$TMP/rd" --steps 4 --batch 2 --sample 0 --eval-every 0 --metrics "$TMP/np2.jsonl"
  check "v2149_dp_np2_equals_np1 (loss, grad norm; 4 steps, 2e-5 relative)" near "$TMP/np1.jsonl" "$TMP/np2.jsonl" loss,grad_norm 2e-5 4
  # the same on sim, each rank's teacher on its device: np=2 at batch 2 = the cpu's np=1 at batch 4
  expect gen_distill_dp_sim 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp,distill --set v2149.teacher="$TMP/teacher4/ck/step_00000010" --model tiny --target sim --batch 4 --seq 32 -o "$TMP/ddps"
  expect v2149_dp_sim_np2_runs 0 "done: 3 steps" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "$TMP/ddps/train" --data "$TMP/rd" --steps 3 --batch 2 --sample 0 --eval-every 0 --metrics "$TMP/snp2.jsonl"
  head -3 "$TMP/np1.jsonl" > "$TMP/np1_3.jsonl"
  check "v2149_dp_sim_np2_device_teacher_equals_cpu_np1 (loss, grad norm; 3 steps, 2e-5 relative)" near "$TMP/np1_3.jsonl" "$TMP/snp2.jsonl" loss,grad_norm 2e-5 3
else
  echo "skipped: v2149_dp_np2_equals_np1 (no mpirun)"
fi
"$TMP/teacher/train" --data "$TMP/rd" --steps 3 --sample 0 --eval-every 0 --metrics "$TMP/plain.jsonl" >/dev/null 2>&1
check "v2149_distill_sim_loss_is_not_plain_ce" test "$(first_metric "$TMP/dist_sim.jsonl" loss)" != "$(first_metric "$TMP/plain.jsonl" loss)"
finish
