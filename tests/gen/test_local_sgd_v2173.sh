#!/usr/bin/env bash
# v2173 local SGD on the cpu trainer under mpirun: what one synchronization per step must equal,
# and the selections gen refuses.
# - Equality. With sync_every=1, outer average and the SGD inner optimizer (linear in the
#   gradient: p - lr*(mu*m + g)), averaging the ranks' parameters after one step is the step on the
#   averaged gradient, so 2 ranks with 2 rows each give the weights of 1 rank with the 4 rows (the
#   synchronous data-parallel step: test_dp holds np=2 sync == np=1). Error sources, per element
#   and step: the local path rounds p_r = p - lr*W*m_r, the sum of the two deltas and anchor + mean
#   delta (p_r - p is exact, Sterbenz: |lr*m| < |p|), two more roundings of <= 0.5 ulp(|p|) than
#   np=1, |p| < 2 (LayerNorm gains start at 1): <= 1.2e-7 a step, 4 steps 4.8e-7; the ranks'
#   gradients sum their rows in another order (docs/test-tolerances.md E1, ~1e-6 relative) and
#   move the weights by lr*|m|*1e-6 < 1e-7; the feedback of these through the next gradients is
#   lr*|H|*eps per step (lr 0.05). Tolerance 1e-5 leaves 10x for that feedback; a step missing
#   the world-size factor (half the update) moves weights by 5.6e-2, and AdamW (not linear: the
#   mean of normalised steps is not the normalised mean) at sync_every=1 by 1.5e-2 — checked to
#   exceed the tolerance, so this test can tell a linear inner step from a nonlinear one.
# - Refusals at gen time (exit 2, one line): ZeRO/FSDP (sharded states), tp, inner sgd on a
#   device target, inner sgd beside another optimizer, bf16 parameters (v2161), schedule-free (v2137).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
mpi2
kjv_corpus "$TMP/corpus.txt" 400000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target cpu --batch 4 --seq 64)
RUN=(--data "$TMP/data" --seq 64 --steps 4 --eval-every 0)
CK=step_00000004/model.safetensors

# sync_every=1, SGD inner: np=2 (2 rows each) equals np=1 (4 rows)
expect gen_v2173_sgd_h1 0 "wrote" -- "$GEN" specs/v2500.yaml --enable dp,v2173 --set v2173.sync_every=1 --set v2173.inner=sgd "${SHAPE[@]}" -o "$TMP/sgd"
grep -q '"kind":[[:space:]]*"sgd"' "$TMP/sgd/plan.json" && grep -q '"local_sgd"' "$TMP/sgd/plan.json"
check test_v2173_plan_has_local_sgd_and_sgd [ $? -eq 0 ]
"$TMP/sgd/train" "${RUN[@]}" --lr 0.05 --batch 4 --metrics "$TMP/sgd1.jsonl" --ckpt-dir "$TMP/sgd1" > "$TMP/sgd1.log" 2>&1
expect test_v2173_np2_runs_local_sgd 0 "local SGD \(v2173\): parameters averaged every 1 steps" -- \
  $MPI "$TMP/sgd/train" "${RUN[@]}" --lr 0.05 --batch 2 --metrics "$TMP/sgd2.jsonl" --ckpt-dir "$TMP/sgd2"
expect test_v2173_sgd_h1_np2_weights_equal_sync 0 "max" -- "$DIFF" "$TMP/sgd1/$CK" "$TMP/sgd2/$CK" 1e-5
# the losses: the same rows, weights within the bound above (step 4's loss moves < 1e-6 relative)
close() { paste <(losses "$1") <(losses "$2") | awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $1) bad = 1 } END { exit bad || n != 4 }'; }
check test_v2173_sgd_h1_np2_losses_equal_sync close "$TMP/sgd1.jsonl" "$TMP/sgd2.jsonl"

# the same with AdamW inner steps: not the synchronous step (the contrast the bound must see)
"$GEN" specs/v2500.yaml --enable dp,v2173 --set v2173.sync_every=1 "${SHAPE[@]}" -o "$TMP/adam" >/dev/null 2>&1
"$TMP/adam/train" "${RUN[@]}" --lr 3e-3 --batch 4 --ckpt-dir "$TMP/adam1" > "$TMP/adam1.log" 2>&1
$MPI "$TMP/adam/train" "${RUN[@]}" --lr 3e-3 --batch 2 --ckpt-dir "$TMP/adam2" > "$TMP/adam2.log" 2>&1
out=$("$DIFF" "$TMP/adam1/$CK" "$TMP/adam2/$CK" 1e-5 2>&1); rc=$?
echo "    AdamW inner, sync_every=1: $out"
check test_v2173_adamw_h1_differs_from_sync test $rc -ne 0 -a -s "$TMP/adam2/$CK"

# refusals: exit 2, one line naming v2173 or the conflict, nothing written
refuse test_v2173_refuses_zero1 "conflicts with v2173" --enable dp,v2173,zero1 "${SHAPE[@]}"
refuse test_v2173_refuses_fsdp "conflicts with v2173" --enable dp,v2173,fsdp "${SHAPE[@]}"
refuse test_v2173_refuses_tp "v2173 local_sgd: .*tp.* — drop tp" --enable dp,v2173,tp "${SHAPE[@]}"
refuse test_v2173_refuses_sim_inner_sgd "v2173 local_sgd: inner = sgd has no device optimizer kernel" --enable dp,v2173 --set v2173.inner=sgd --model tiny --target sim
refuse test_v2173_refuses_sgd_with_lion "inner = sgd replaces the plan's optimizer, and lion" --enable dp,v2173,lion --set v2173.inner=sgd "${SHAPE[@]}"
refuse test_v2173_refuses_bf16_params "v2173 local_sgd: bf16 parameters" --enable dp,v2173,v2161 "${SHAPE[@]}"
refuse test_v2173_refuses_schedule_free "v2173 local_sgd: schedule-free" --enable dp,v2173,v2137 "${SHAPE[@]}"
finish
