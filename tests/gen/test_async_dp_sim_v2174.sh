#!/usr/bin/env bash
# v2174 bounded-staleness async dp on the device trainer (target sim; cuda on the stand-ins) under
# mpirun -np 2, against the cpu trainer of the same selection. The device's gradients go to the
# host mirror, through the cpu's own delayed all-reduce (async_dp.c) and back every step.
# - Losses: 4 steps of tiny (B=2 x T=16, AdamW, staleness 1: step 1 applies nothing, steps 2-4 the
#   previous step's mean gradient) equal the cpu trainer's within 1e-4 relative — test_sim_trainer.sh's
#   sim-vs-cpu bound (the same fp32 math in two summation orders, docs/test-tolerances.md E2 + E3:
#   2e-5 for <= 8 AdamW steps); step 1's loss (before any update) and step 2's (no update yet
#   applied at step 1) are the same forward on both.
# - Weights: max |sim - cpu| <= 2 x 4 x lr: each of the <= 4 AdamW updates moves a weight by at most
#   lr (|m_hat / sqrt(v_hat)| <= 1 when 1 - beta1 <= sqrt(1 - beta2), Kingma & Ba 2015 section 2.1;
#   wd 0 here), so gradients that differ only by summation order leave the runs <= 2 lr apart per
#   update. Loose: the losses are the sharp check.
# - Communication, exact (the coll layer's counters): every step the gradient arena plus the 16 B
#   of scalars in 3 collectives, the same on both (a device all-reduce left in would add its own).
# - The stand-ins: the sm_90 trainer prints the sim trainer's losses and gradient norms bit for bit.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
mpi2
export HYP_SIM_CACHE="$BUILD/tests/sim_cache"
kjv_corpus "$TMP/corpus.txt" 100000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
LR=1e-2
STEPS=4
RUN=(--data "$TMP/data" --seq 16 --batch 2 --steps $STEPS --eval-every 0 --lr $LR)
CK=step_0000000$STEPS/model.safetensors
SEL=(specs/v2500.yaml --enable dp,v2174 --set v2174.staleness=1 --model tiny --batch 2 --seq 16)
rel() {
  paste <(losses "$1") <(losses "$2") | awk -v n0=$STEPS '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $2) bad = 1 } END { exit bad || n != n0 }'
}
comm() { paste <(metric "$1" comm_bytes) <(metric "$1" comm_calls); }
for t in cpu sim; do
  expect "gen_v2174_$t" 0 "wrote" -- "$GEN" "${SEL[@]}" --target $t -o "$TMP/$t"
  expect "v2174_${t}_np2_runs" 0 "async dp \(v2174\): staleness 1" -- $MPI "$TMP/$t/train" "${RUN[@]}" --metrics "$TMP/$t.jsonl" --ckpt-dir "$TMP/$t.ck"
done
paste <(losses "$TMP/cpu.jsonl") <(losses "$TMP/sim.jsonl") | sed 's/^/    cpu sim loss: /'
check test_v2174_sim_np2_losses_equal_cpu rel "$TMP/sim.jsonl" "$TMP/cpu.jsonl"
expect test_v2174_sim_np2_weights_equal_cpu 0 "max" -- "$DIFF" "$TMP/cpu.ck/$CK" "$TMP/sim.ck/$CK" "$(awk -v lr=$LR -v n=$STEPS 'BEGIN { print 2 * n * lr }')"
check test_v2174_sim_comm_equals_cpu [ "$(comm "$TMP/sim.jsonl")" = "$(comm "$TMP/cpu.jsonl")" ]
# staleness 1: step 1 applies nothing (the norm of zero gradients: none has arrived)
check test_v2174_sim_step1_applies_nothing [ "$(metric "$TMP/sim.jsonl" grad_norm | head -1)" = 0 ]

if [ -f "$BUILD/standins/libcuda.so.1" ]; then
  export HYP_CUDA_LIBDIR="$BUILD/standins" HYP_STANDIN_SEED=${HYP_STANDIN_SEED:-21}
  SMPI="$MPI -x HYP_SIM_CACHE -x HYP_CUDA_LIBDIR -x HYP_STANDIN_SEED -x HYP_STANDIN_DEVICES=2"
  expect gen_v2174_sm_90 0 "for sm_90" -- "$GEN" "${SEL[@]}" --target sm_90 -o "$TMP/sm_90"
  expect v2174_sm_90_np2_on_standins 0 "async dp \(v2174\)" -- $SMPI "$TMP/sm_90/train" "${RUN[@]}" --metrics "$TMP/sm_90.jsonl"
  check test_v2174_sm_90_np2_standins_equal_sim bash -c "[ \"\$(grep -o '\"loss\":[^,]*' '$TMP/sm_90.jsonl')\" = \"\$(grep -o '\"loss\":[^,]*' '$TMP/sim.jsonl')\" ] && [ \"\$(grep -o '\"grad_norm\":[^,]*' '$TMP/sm_90.jsonl')\" = \"\$(grep -o '\"grad_norm\":[^,]*' '$TMP/sim.jsonl')\" ]"
else
  echo "FAIL $BUILD/standins/libcuda.so.1: stand-in not built (tests/standins; needs the CUDA headers)"
  exit 1
fi
finish
