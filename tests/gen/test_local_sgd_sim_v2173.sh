#!/usr/bin/env bash
# v2173 local SGD and DiLoCo on the device trainer (target sim; cuda through the same device layer
# on the cuda stand-ins) under mpirun -np 2, against the cpu trainer of the same selection:
# - Losses: 4 steps of tiny (B=2 x T=16, AdamW inner, sync_every 2: two outer steps) equal the cpu
#   trainer's within 1e-4 relative — test_sim_trainer.sh's sim-vs-cpu bound (the same fp32 math in
#   two summation orders, docs/test-tolerances.md E2 + E3: 2e-5 for <= 8 AdamW steps). The outer
#   step is the same host code on both (local_sgd.c), so it adds no difference of its own beyond
#   rounding the same sums of deltas that differ by that E2 + E3 difference.
# - Weights after the last outer step: max |sim - cpu| <= 2 x N x lr x 1.1: each AdamW step moves
#   a weight by at most lr (|m_hat / sqrt(v_hat)| <= 1 when 1 - beta1 <= sqrt(1 - beta2), Kingma &
#   Ba 2015 section 2.1; 0.1 <= 0.22 here) plus weight decay lr x wd x |p| (wd 0.1, |p| < 1: the 1.1),
#   so two runs whose gradients differ only by summation order are at most 2 lr apart per step, and
#   averaging (a mean of rank deltas) and the outer Nesterov step with lr <= 1 do not widen it
#   (DiLoCo's outer lr 0.7, momentum 0.9: <= (0.7 x 1.9) x the mean, 1.33 x; its bound 1.33x).
#   A loose bound: the losses above are the sharp check.
# - Communication, exact (the coll layer's counters, the same on both): every step the 16 B of the
#   token count and the loss in 2 collectives, every 2nd step also the parameter delta (3): no
#   gradient all-reduce on the device — a device step that still reduced would add its arena.
# - The stand-ins (HYP_CUDA_LIBDIR, docs/cuda-standins.md): the sm_90 trainer of the same
#   selection runs dev_cuda.c over the simulator and prints every loss and gradient norm as the
#   sim trainer does (bit for bit: the same kernels in the same simulator, the same host outer step).
# - Refusals (exit 2, one line): inner sgd on a device (no device kernel).
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
rel() { # rel A.jsonl B.jsonl: every loss within 1e-4 relative, STEPS of them
  paste <(losses "$1") <(losses "$2") | awk -v n0=$STEPS '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $2) bad = 1 } END { exit bad || n != n0 }'
}
comm() { paste <(metric "$1" comm_bytes) <(metric "$1" comm_calls); }

for mode in avg nes; do
  set_=(--set v2173.sync_every=2)
  tol=$(awk -v lr=$LR -v n=$STEPS 'BEGIN { print 2 * n * lr * 1.1 }')
  if [ $mode = nes ]; then
    set_+=(--set v2173.outer=nesterov)
    tol=$(awk -v lr=$LR -v n=$STEPS 'BEGIN { print 2 * n * lr * 1.1 * 1.33 }')
  fi
  for t in cpu sim; do
    expect "gen_v2173_${mode}_$t" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable dp,v2173 "${set_[@]}" --model tiny --target $t --batch 2 --seq 16 -o "$TMP/$mode.$t"
    expect "v2173_${mode}_${t}_np2_runs" 0 "local SGD \(v2173\)" -- \
      $MPI "$TMP/$mode.$t/train" "${RUN[@]}" --metrics "$TMP/$mode.$t.jsonl" --ckpt-dir "$TMP/$mode.$t.ck"
  done
  paste <(losses "$TMP/$mode.cpu.jsonl") <(losses "$TMP/$mode.sim.jsonl") | sed 's/^/    cpu sim loss: /'
  check "test_v2173_${mode}_sim_np2_losses_equal_cpu" rel "$TMP/$mode.sim.jsonl" "$TMP/$mode.cpu.jsonl"
  expect "test_v2173_${mode}_sim_np2_weights_equal_cpu" 0 "max" -- "$DIFF" "$TMP/$mode.cpu.ck/$CK" "$TMP/$mode.sim.ck/$CK" "$tol"
  check "test_v2173_${mode}_sim_comm_equals_cpu" [ "$(comm "$TMP/$mode.sim.jsonl")" = "$(comm "$TMP/$mode.cpu.jsonl")" ]
  # the pattern itself: 16 B / 2 collectives, at steps 2 and 4 more bytes in 3
  pat() { paste <(metric "$1" step) <(metric "$1" comm_bytes) <(metric "$1" comm_calls) |
    awk '{ n++; s = $1 % 2 == 0; if (s ? ($2 <= 16 || $3 != 3) : ($2 != 16 || $3 != 2)) bad = 1 } END { exit bad || n != 4 }'; }
  check "test_v2173_${mode}_sim_no_gradient_allreduce" pat "$TMP/$mode.sim.jsonl"
done

# the cuda path on the stand-ins: = sim, every printed loss and gradient norm
if [ -f "$BUILD/standins/libcuda.so.1" ]; then
  export HYP_CUDA_LIBDIR="$BUILD/standins" HYP_STANDIN_SEED=${HYP_STANDIN_SEED:-21}
  SMPI="$MPI -x HYP_SIM_CACHE -x HYP_CUDA_LIBDIR -x HYP_STANDIN_SEED -x HYP_STANDIN_DEVICES=2"
  expect gen_v2173_nes_sm_90 0 "for sm_90" -- "$GEN" specs/v2500.yaml --enable dp,v2173 --set v2173.sync_every=2 --set v2173.outer=nesterov --model tiny --target sm_90 --batch 2 --seq 16 -o "$TMP/nes.sm_90"
  expect v2173_nes_sm_90_np2_on_standins 0 "local SGD \(v2173\)" -- $SMPI "$TMP/nes.sm_90/train" "${RUN[@]}" --metrics "$TMP/nes.sm_90.jsonl"
  check test_v2173_nes_sm_90_np2_standins_equal_sim bash -c "[ \"\$(grep -o '\"loss\":[^,]*' '$TMP/nes.sm_90.jsonl')\" = \"\$(grep -o '\"loss\":[^,]*' '$TMP/nes.sim.jsonl')\" ] && [ \"\$(grep -o '\"grad_norm\":[^,]*' '$TMP/nes.sm_90.jsonl')\" = \"\$(grep -o '\"grad_norm\":[^,]*' '$TMP/nes.sim.jsonl')\" ]"
else
  echo "FAIL $BUILD/standins/libcuda.so.1: stand-in not built (tests/standins; needs the CUDA headers)"
  exit 1
fi

refuse test_v2173_refuses_sgd_inner_on_sim "v2173 local_sgd: inner = sgd has no device optimizer kernel" --enable dp,v2173 --set v2173.inner=sgd --model tiny --target sim
finish
