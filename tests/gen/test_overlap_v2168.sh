#!/usr/bin/env bash
# v2168 compute/communication overlap on the cpu trainer under mpirun -np 2 (runtime/train/
# comm_overlap.c): the gradient arena's per-layer buckets (v2110's, grad_buckets.c) handed to
# communication helper threads as backward finishes them, the step waiting before the norm.
# - Numbers: bit for bit the plain dp trainer's losses and weights after 5 steps, with one helper,
#   with two (--set v2168.comm_streams=2), and with the same buckets reduced after backward
#   (HYP_COMM_OVERLAP=0): with 2 ranks every gradient element is the one sum g0 + g1 whatever
#   the bucketing, and IEEE addition is commutative (docs/test-tolerances.md E0); each bucket is
#   final when handed over, or a racing write would change the sum. ZeRO-1 + v2168 equals ZeRO-1;
#   v2163 (bf16 accumulation, 2 micro-batches: buckets rounded before hand-over) equals v2163.
# - Measure: with an emulated 2 Gbit/s link (HYP_COLL_LINK_GBPS=2, coll.h: each all-reduce lasts at
#   least its ring-model bytes / the link rate, the rest slept, so the comm takes ~14 ms a step, not
#   the ~1 ms of shared memory), the plain trainer waits for all of it (exposed = in flight, at least
#   the link's bound), and v2168's helpers have all-reduces in flight while backward runs (in
#   flight > exposed > 0). How much less v2168 waits is printed, not asserted: on 2 cores shared by
#   other jobs the ranks drift apart by more than the link time, and a rank waiting for the other
#   counts in both runs' exposed time (measured here: plain 14.1-15.7 ms exposed; v2168 3.8-13.1 ms
#   exposed of 22-53 ms in flight, docs/overlap.md). v2168's in-flight time counts from each bucket's
#   hand-over, including the wait for the other rank to reach the same bucket.
# - The profile: each bucket a span on the "communication helper 0" track, the wait a host
#   comm_wait_exposed phase, and the summary's in-flight / exposed / hidden line.
# - Refusals (gen exit 2, one line, nothing written): ZeRO-2, tp, v2172, v2162 on cpu,
#   comm_streams=2 on a device, v2110.overlap=false.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
mpi2
kjv_corpus "$TMP/corpus.txt" 200000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target cpu --batch 2 --seq 32)
RUN=(--data "$TMP/data" --steps 5 --eval-every 0 --lr 3e-3)
W=step_00000005/model.safetensors
expect gen_v2168_plain 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp "${SHAPE[@]}" -o "$TMP/plain"
expect gen_v2168 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp,overlap "${SHAPE[@]}" -o "$TMP/ov"
expect gen_v2168_two 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp,overlap --set v2168.comm_streams=2 "${SHAPE[@]}" -o "$TMP/ov2"
check test_v2168_plan_comm_streams grep -q '"comm_streams":[[:space:]]*2' "$TMP/ov2/plan.json"
expect np2_plain 0 "done: 5 steps" -- $MPI "$TMP/plain/train" "${RUN[@]}" --metrics "$TMP/plain.jsonl" --ckpt-dir "$TMP/ck_plain"
expect test_v2168_np2_says_helpers 0 "buckets all-reduced by 1 helper thread while backward runs \(v2168\)" -- $MPI "$TMP/ov/train" "${RUN[@]}" --metrics "$TMP/ov.jsonl" --ckpt-dir "$TMP/ck_ov"
expect np2_two_helpers 0 "by 2 helper threads" -- $MPI "$TMP/ov2/train" "${RUN[@]}" --metrics "$TMP/ov2.jsonl" --ckpt-dir "$TMP/ck_ov2"
expect np2_serial_buckets 0 "HYP_COMM_OVERLAP=0: the same buckets after backward" -- env HYP_COMM_OVERLAP=0 $MPI -x HYP_COMM_OVERLAP "$TMP/ov/train" "${RUN[@]}" --metrics "$TMP/ser.jsonl" --ckpt-dir "$TMP/ck_ser"
echo "    losses plain: $(losses "$TMP/plain.jsonl" | tr '\n' ' ')"
for v in ov ov2 ser; do
  check "test_v2168_np2_${v}_losses_bit_identical" same_losses "$TMP/plain.jsonl" "$TMP/$v.jsonl" 5
  expect "test_v2168_np2_${v}_weights_bit_identical" 0 "max \|a-b\| = 0 " -- "$DIFF" "$TMP/ck_plain/$W" "$TMP/ck_$v/$W" 0
done
# ZeRO-1: the all-reduce, then the optimizer on the own shard
expect gen_v2168_zero1 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,zero1 "${SHAPE[@]}" -o "$TMP/z1"
expect gen_v2168_zero1_overlap 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,zero1,overlap "${SHAPE[@]}" -o "$TMP/z1ov"
expect np2_zero1 0 "done: 5 steps" -- $MPI "$TMP/z1/train" "${RUN[@]}" --metrics "$TMP/z1.jsonl"
expect np2_zero1_overlap 0 "done: 5 steps" -- $MPI "$TMP/z1ov/train" "${RUN[@]}" --metrics "$TMP/z1ov.jsonl"
check test_v2168_zero1_losses_bit_identical same_losses "$TMP/z1.jsonl" "$TMP/z1ov.jsonl" 5
# v2163 bf16 gradient accumulation over 2 micro-batches: each bucket rounded before its hand-over
expect gen_v2168_v2163 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp,v2163 "${SHAPE[@]}" -o "$TMP/acc"
expect gen_v2168_v2163_overlap 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp,v2163,overlap "${SHAPE[@]}" -o "$TMP/accov"
expect np2_v2163 0 "done: 5 steps" -- $MPI "$TMP/acc/train" "${RUN[@]}" --grad-accum 2 --metrics "$TMP/acc.jsonl" --ckpt-dir "$TMP/ck_acc"
expect np2_v2163_overlap 0 "done: 5 steps" -- $MPI "$TMP/accov/train" "${RUN[@]}" --grad-accum 2 --metrics "$TMP/accov.jsonl" --ckpt-dir "$TMP/ck_accov"
check test_v2168_v2163_accum2_losses_bit_identical same_losses "$TMP/acc.jsonl" "$TMP/accov.jsonl" 5
expect test_v2168_v2163_accum2_weights_bit_identical 0 "max \|a-b\| = 0 " -- "$DIFF" "$TMP/ck_acc/$W" "$TMP/ck_accov/$W" 0

# the measure, over an emulated 2 Gbit/s link; steps 2-8 (step 1 warms up)
M=(--data "$TMP/data" --steps 8 --eval-every 0 --lr 3e-3)
expect np2_plain_link 0 "after backward" -- env HYP_COLL_LINK_GBPS=2 $MPI -x HYP_COLL_LINK_GBPS "$TMP/plain/train" "${M[@]}" --metrics "$TMP/plain_l.jsonl"
env HYP_COLL_LINK_GBPS=2 $MPI -x HYP_COLL_LINK_GBPS "$TMP/ov/train" "${M[@]}" --metrics "$TMP/ov_l.jsonl" --profile "$TMP/tr.json" --profile-steps 3:4 > "$TMP/ov_l.out" 2>&1
check np2_v2168_link grep -q "(v2168 overlap)" "$TMP/ov_l.out"
mean_after1() { metric "$1" "$2" | tail -n +2 | awk '{ s += $1; n++ } END { printf "%.6f", s / n }'; }
pt=$(mean_after1 "$TMP/plain_l.jsonl" grad_comm_total_s) px=$(mean_after1 "$TMP/plain_l.jsonl" grad_comm_exposed_s)
ot=$(mean_after1 "$TMP/ov_l.jsonl" grad_comm_total_s) ox=$(mean_after1 "$TMP/ov_l.jsonl" grad_comm_exposed_s)
bytes=$(metric "$TMP/plain_l.jsonl" comm_bytes | tail -1)
echo "    per step at 2 Gbit/s: plain ${pt}s in flight, ${px}s exposed; v2168 ${ot}s in flight, ${ox}s exposed (step bytes $bytes)"
# the plain trainer's gradient all-reduce sends all but 3 x 8 bytes of the step's (token count and loss, f64)
check test_v2168_plain_exposed_is_all_and_link_bound awk -v t="$pt" -v x="$px" -v b="$bytes" 'BEGIN { exit !(t == x && x >= (b - 24) / 2.5e8) }'
check test_v2168_hidden_part_positive awk -v t="$ot" -v x="$ox" 'BEGIN { exit !(t > x && x > 0) }'
check test_v2168_profile_summary_line grep -qE "gradient all-reduce \(v2168 helpers\): [0-9.]+ ms/step in flight, [0-9.]+ ms/step exposed" "$TMP/ov_l.out"
check test_v2168_trace_comm_track grep -q '"communication helper 0"' "$TMP/tr.json"
check test_v2168_trace_bucket_spans grep -q '"allreduce_bucket 0: ' "$TMP/tr.json"
check test_v2168_trace_exposed_phase grep -q '"comm_wait_exposed"' "$TMP/tr.json"

refuse test_v2168_refuses_zero2 "ZeRO stage 2-3 and FSDP reduce-scatter" --enable adamw,zero2,overlap "${SHAPE[@]}"
refuse test_v2168_refuses_tp "tensor parallelism" --enable adamw,dp,tp,overlap "${SHAPE[@]}"
refuse test_v2168_refuses_v2172 "gradient compression" --enable adamw,dp,overlap,v2172 "${SHAPE[@]}"
refuse test_v2168_refuses_loss_scaling_on_cpu "dynamic loss scaling" --enable adamw,dp,overlap,v2162 "${SHAPE[@]}"
refuse test_v2168_refuses_two_streams_on_sim "comm_streams=2 on sim" --enable adamw,dp,overlap --set v2168.comm_streams=2 --model tiny --target sim
refuse test_v2168_refuses_v2110_overlap_false "v2110.overlap=false" --enable adamw,dp,overlap --set v2110.overlap=false "${SHAPE[@]}"
finish
