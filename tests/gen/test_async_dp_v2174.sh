#!/usr/bin/env bash
# v2174 bounded-staleness async data parallelism on the cpu trainer under mpirun -np 2: what the
# delayed gradient must equal, and the selections gen refuses.
# - staleness 0 is synchronous dp bit for bit (losses and weights after 4 steps): the same gradient
#   sums (MPI_Iallreduce vs MPI_Allreduce of 2 ranks: a + b, one rounding, either order gives the
#   same float), the same updates.
# - The first update of staleness s happens at step s + 1 with the mean gradient of step 1 as
#   update number 1 (its LR, optimizer count 1): the weights after step s + 1 equal synchronous
#   dp's after step 1 bit for bit (s = 1, 2), and steps 1..s leave the initial weights unchanged.
# - Delayed gradients across ranks: staleness 1 at np=2 (2 rows each) equals the same trainer at
#   np=1 with the 4 rows (the update of step t applies the gradient of the 4 rows of step t - 1,
#   taken at the weights of step t - 1), after 4 steps (3 updates), within test_dp's bounds for the
#   same shape, data and LR: losses 2e-5 relative, weights 2e-4 absolute (the ranks sum gradients
#   in another order, docs/test-tolerances.md E1/E7; Adam passes the ~1e-6 relative difference
#   as ~1e-6 x lr, except coordinates of ~0 gradient that move by < lr/60 per update: 3 x 3e-3 /
#   60 = 1.5e-4 < 2e-4). The contrast: the np=1 delayed run differs from the np=1 synchronous one
#   by more than 2e-4, so the comparison sees whether the delay is there.
# - Refusals at gen time (exit 2, one line, nothing written): ZeRO/FSDP, tp, cp,
#   local SGD (v2173, the spec conflict), dynamic loss scaling (v2162, also on sim; the device trainer: test_async_dp_sim_v2174.sh), the guard (v2176).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
mpi2
kjv_corpus "$TMP/corpus.txt" 400000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target cpu --batch 4 --seq 64)
RUN=(--data "$TMP/data" --seq 64 --steps 4 --eval-every 0 --lr 3e-3 --ckpt-every 1 --keep 8)
ck() { echo "$TMP/$1/step_0000000$2/model.safetensors"; }
expect gen_v2174_sync 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,dp "${SHAPE[@]}" -o "$TMP/sync"
for s in 0 1 2; do
  expect "gen_v2174_s$s" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,dp,v2174 --set v2174.staleness=$s "${SHAPE[@]}" -o "$TMP/a$s"
done
grep -q '"async_dp"' "$TMP/a1/plan.json"
check test_v2174_plan_has_async_dp [ $? -eq 0 ]
$MPI "$TMP/sync/train" "${RUN[@]}" --batch 2 --metrics "$TMP/sync2.jsonl" --ckpt-dir "$TMP/sync2" > "$TMP/sync2.log" 2>&1
expect test_v2174_s0_np2_runs 0 "async dp \(v2174\): staleness 0" -- \
  $MPI "$TMP/a0/train" "${RUN[@]}" --batch 2 --metrics "$TMP/a0.jsonl" --ckpt-dir "$TMP/a0"
check test_v2174_s0_losses_equal_sync_dp same_losses "$TMP/sync2.jsonl" "$TMP/a0.jsonl" 4
expect test_v2174_s0_weights_equal_sync_dp 0 "max \|a-b\| = 0 " -- "$DIFF" "$(ck sync2 4)" "$(ck a0 4)" 0

for s in 1 2; do
  expect "test_v2174_s${s}_np2_runs" 0 "async dp \(v2174\): staleness $s" -- \
    $MPI "$TMP/a$s/train" "${RUN[@]}" --batch 2 --metrics "$TMP/a$s.jsonl" --ckpt-dir "$TMP/a$s"
  expect "test_v2174_s${s}_first_update_equals_sync_step1" 0 "max \|a-b\| = 0 " -- "$DIFF" "$(ck sync2 1)" "$(ck a$s $((s + 1)))" 0
done
# steps 1..s apply nothing: s = 2 holds the same weights after steps 1 and 2, and they are not step 3's
expect test_v2174_s2_no_update_before_step3 0 "max \|a-b\| = 0 " -- "$DIFF" "$(ck a2 1)" "$(ck a2 2)" 0
out=$("$DIFF" "$(ck a2 2)" "$(ck a2 3)" 0 2>&1); rc=$?
check test_v2174_s2_step3_updates test $rc -ne 0 -a -s "$(ck a2 3)"

# staleness 1: np=2 equals np=1 with the whole batch (the delayed-gradient reference)
"$TMP/a1/train" "${RUN[@]}" --batch 4 --metrics "$TMP/a1np1.jsonl" --ckpt-dir "$TMP/a1np1" > "$TMP/a1np1.log" 2>&1
close() { paste <(losses "$1") <(losses "$2") | awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5 * $1) bad = 1 } END { exit bad || n != 4 }'; }
check test_v2174_s1_np2_losses_equal_np1_delayed close "$TMP/a1np1.jsonl" "$TMP/a1.jsonl"
expect test_v2174_s1_np2_weights_equal_np1_delayed 0 "max" -- "$DIFF" "$(ck a1np1 4)" "$(ck a1 4)" 2e-4
"$TMP/sync/train" "${RUN[@]}" --batch 4 --ckpt-dir "$TMP/sync1" > "$TMP/sync1.log" 2>&1
out=$("$DIFF" "$(ck sync1 4)" "$(ck a1np1 4)" 2e-4 2>&1); rc=$?
echo "    np=1 delayed (s=1) vs np=1 synchronous after 4 steps: $out"
check test_v2174_s1_delay_exceeds_the_bound test $rc -ne 0 -a -s "$(ck a1np1 4)"

refuse test_v2174_refuses_zero1 "v2174 async_training: .*ZeRO/FSDP shard it — drop" --enable dp,v2174,zero1 "${SHAPE[@]}"
refuse test_v2174_refuses_fsdp "v2174 async_training: .*ZeRO/FSDP" --enable dp,v2174,fsdp "${SHAPE[@]}"
refuse test_v2174_refuses_tp "v2174 async_training: .*tp mesh.* — drop tp" --enable dp,v2174,tp "${SHAPE[@]}"
refuse test_v2174_refuses_loss_scaling_sim "v2174 async_training: dynamic loss scaling" --enable dp,v2174,v2162 --model tiny --target sim
refuse test_v2174_refuses_local_sgd "conflicts with v2174|v2173.*conflicts" --enable dp,v2173,v2174 "${SHAPE[@]}"
refuse test_v2174_refuses_loss_scaling "v2174 async_training: dynamic loss scaling" --enable dp,v2174,v2162 "${SHAPE[@]}"
refuse test_v2174_refuses_cp "v2174 async_training: .*context parallelism.* — drop sp" --enable dp,flash,sp,v2174 --model tiny --target cpu --batch 4 --seq 64
refuse test_v2174_refuses_guard "v2174 async_training: the guard" --enable dp,v2174,v2176 "${SHAPE[@]}"
finish
