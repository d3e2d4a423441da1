#!/usr/bin/env bash
# test_post_train_dp.sh — data parallelism for the preference objectives (v2195 DPO, v2198 KTO;
# plain dp, v2110) on the cpu under mpirun -np 2: each rank takes a disjoint half of every step's
# examples (the global set is np=1's: np=1 --batch 8 against np=2 --batch 4), the ranks' per-row
# log-probs are gathered so every rank computes the loss and statistics of the whole global
# micro-batch and weights its own rows' gradients by them (the summed gradients are np=1's).
# Every metric of 4 steps (loss, accuracy, reward margin, kl, chosen/rejected logps and rewards,
# and the val_* of the evaluations at steps 2 and 4) equals np=1 within 2e-5 relative (1e-6
# absolute near 0: the ranks sum gradients in another order, as tests/gen/test_dp.sh, E2 + E3 of
# docs/test-tolerances.md; margins and KL start at exactly 0 and grow from differences of
# log-probs of ~-100 whose E2 error is <= 2e-5 x 100 x beta 0.1 ~ 2e-4 at worst, ~1e-7 typical:
# the 1e-6 floor holds only while those errors stay at their rms — not fully derived), for the
# precomputed reference and for reference online (each rank's frozen copy runs its share).
# Rank 0 writes the checkpoint and the reference files. ZeRO stages 1-3 give the same numbers
# (sharded checkpoints); a ZeRO-3 np=2 run with reference online resumes bit-exactly.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
if ! command -v mpirun >/dev/null; then echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; fi
MPI="mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS"
for i in $(seq 1 60); do
  echo "{\"prompt\": \"Question $i: is it good?\", \"chosen\": \" yes, it is good.\", \"rejected\": \" no, never bad!\"}" >> "$TMP/syn.jsonl"
  echo "{\"prompt\": \"Question $i: is it good?\", \"completion\": \" yes, it is good.\", \"label\": true}" >> "$TMP/synk.jsonl"
  echo "{\"prompt\": \"Question $i: is it good?\", \"completion\": \" no, never bad!\", \"label\": false}" >> "$TMP/synk.jsonl"
done
expect "gen_data_pref" 0 "preference examples" -- "$GEN" data --pref "$TMP/syn.jsonl" -o "$TMP/pref"
expect "gen_data_pref_kto" 0 "preference examples" -- "$GEN" data --pref "$TMP/synk.jsonl" -o "$TMP/kto"
KEYS="loss pref_accuracy reward_margin kl logps_chosen logps_rejected rewards_chosen rewards_rejected val_loss val_pref_accuracy val_reward_margin val_kl val_logratio_accuracy"
close() { # close A.jsonl B.jsonl: every metric of every step within 2e-5 relative (1e-6 absolute)
  for k in $KEYS; do
    want=4; [ "${k#val_}" != "$k" ] && want=2 # val_* only at the evaluated steps 2 and 4
    paste <(metric "$1" $k) <(metric "$2" $k) | awk -v k=$k -v want=$want '{ n++; if ($1 == "null" || $2 == "null") { if ($1 != $2) bad = 1; next }
      d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1; if (d > 2e-5 * a + 1e-6) { bad = 1; print k, NR, $1, $2 } }
      END { exit bad || n < want }' || return 1
  done
}
declare -A ID=([dpo]=v2195 [kto]=v2198)
for o in dpo kto; do
  id=${ID[$o]}; d="$TMP/pref"; [ $o = kto ] && d="$TMP/kto"
  for ref in precomputed online; do
    t="$TMP/t_${o}_$ref"
    expect "${id}_gen_dp_$ref" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,$o,dp --set $id.reference=$ref --model tiny --target cpu --batch 8 --seq 48 -o "$t"
    expect "${id}_${ref}_np1" 0 "done: 4 $o steps" -- "$t/train" --data "$d" --steps 4 --eval-every 2 --metrics "$t/np1.jsonl"
    expect "${id}_${ref}_np2" 0 "done: 4 $o steps" -- $MPI "$t/train" --data "$d" --steps 4 --eval-every 2 --batch 4 --metrics "$t/np2.jsonl" --ckpt-dir "$t/ck"
    check "${id}_${ref}_np2_metrics_equal_np1 (4 steps, all metrics, 2e-5 relative)" close "$t/np1.jsonl" "$t/np2.jsonl"
    check "${id}_${ref}_np2_checkpoint_written" test -s "$t/ck/step_00000004/model.safetensors"
  done
done
check "v2195_np2_reference_logps_written" test -s "$TMP/t_dpo_precomputed/ck/reference_logps.bin"
check "v2198_np2_online_reference_model_written" test -s "$TMP/t_kto_online/ck/reference_model.bin"
# ZeRO stages 1-3 (v2104): the same steps through the backend's reduce-scatter / sharded optimizer
# (stage 3: the frozen copy of reference online all-gathers the weight shards once); np=2 equals
# plain np=1 as above, and the checkpoint is sharded (v2181)
for z in 1 2 3; do
  for c in "dpo precomputed" "kto online"; do
    set -- $c; o=$1; ref=$2; id=${ID[$o]}; d="$TMP/pref"; [ $o = kto ] && d="$TMP/kto"; t="$TMP/z${z}_${o}_$ref"
    expect "${id}_gen_zero${z}_$ref" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,$o,dp,zero$z --set $id.reference=$ref --model tiny --target cpu --batch 8 --seq 48 -o "$t"
    expect "${id}_zero${z}_${ref}_np2" 0 "done: 4 $o steps" -- $MPI "$t/train" --data "$d" --steps 4 --eval-every 2 --batch 4 --metrics "$t/np2.jsonl" --ckpt-dir "$t/ck"
    check "${id}_zero${z}_${ref}_np2_metrics_equal_np1 (4 steps, all metrics, 2e-5 relative)" close "$TMP/t_${o}_$ref/np1.jsonl" "$t/np2.jsonl"
    check "${id}_zero${z}_${ref}_np2_checkpoint_sharded" test -s "$t/ck/step_00000004/shard_00001.safetensors"
  done
done
# resume at np=2 (ZeRO-3, reference online): checkpointed at 2, the step-4 checkpoint dropped,
# resumed: steps 3-4 equal the straight np=2 run bit for bit (the frozen copy read back from
# reference_model.bin, the example order continued at the group's global position)
t="$TMP/z3_kto_online"
$MPI "$t/train" --data "$TMP/kto" --steps 4 --eval-every 2 --batch 4 --ckpt-dir "$t/ckr" --ckpt-every 2 >/dev/null 2>&1
rm -rf "$t/ckr/step_00000004"; echo step_00000002 > "$t/ckr/latest"
expect "v2198_zero3_online_np2_resumes" 0 "read from reference_model.bin" -- $MPI "$t/train" --data "$TMP/kto" --steps 4 --eval-every 2 --batch 4 --ckpt-dir "$t/ckr" --resume --metrics "$t/resumed.jsonl"
check "v2198_zero3_online_np2_resume_bit_exact (steps 3-4, all metrics)" \
  test "$(untimed "$t/np2.jsonl" | tail -2)" = "$(untimed "$t/resumed.jsonl")" -a -s "$t/resumed.jsonl"
# the device backend (sim/cuda) does not yet reproduce np=1 under dp: refused, exit 2
expect "v2195_gen_dp_sim" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dpo,dp --model tiny --target sim --batch 4 --seq 48 -o "$TMP/sim"
expect "v2195_dp_on_device_backend_refused" 2 "data parallelism of the preference objectives runs on the cpu backend only" -- $MPI "$TMP/sim/train" --data "$TMP/pref" --steps 1 --batch 2
finish
