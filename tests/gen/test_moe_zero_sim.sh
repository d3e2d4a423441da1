#!/usr/bin/env bash
# ZeRO-2 and ZeRO-3 with the device MoE op (issue 23, docs/moe.md "The MoE op on a device"): since
# its expert GEMMs read the segment offsets on the device (no read-back mid-op), the op runs inside
# ZeRO-2's grouped gradient schedule and ZeRO-3's per-group parameter gathers (the experts' fused
# view inside its layer's group). tiny-moe on sim, 2 data-parallel ranks, 2 AdamW steps: ZeRO-2
# and ZeRO-3 give every metric but the timings — losses, gradient norms, per-expert loads, aux
# loss — bit-identical to ZeRO-1 (the same kernels on the same gathered weights, the same
# gradients reduced; as test_moe_train.sh shows for the cpu op), the loads summing to
# 2 ranks x B x T x top_k per layer; gen accepts zero2/zero3 for sm_90 too.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
export OMP_NUM_THREADS=1 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
kjv_corpus "$TMP/c.txt" 20000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null
B=2; T=16
# fixed folders: the simulator's module cache keys on a kernel's path, so reruns compile nothing
OUT="$BUILD/tests/moe_zero_sim"
rm -rf "$OUT" && mkdir -p "$OUT"
for z in zero1 zero2 zero3; do
  expect gen_moe_sim_$z 0 "rendered for sim" -- "$GEN" specs/v2500.yaml --enable adamw,dp,$z --model tiny-moe --target sim \
    --batch $B --seq $T -o "$OUT/$z"
  expect moe_sim_dp2_${z}_trains 0 "done: 2 steps" -- mpirun -np 2 "$OUT/$z/train" --data "$TMP/data" --eval-every 0 --sample 0 \
    --steps 2 --lr 3e-3 --metrics "$TMP/$z.jsonl"
done
check test_moe_sim_two_steps_logged test "$(grep -c '"loss"' "$TMP/zero1.jsonl" 2>/dev/null)" = 2
check test_moe_sim_zero2_equals_zero1 test "$(untimed "$TMP/zero2.jsonl")" = "$(untimed "$TMP/zero1.jsonl")"
check test_moe_sim_zero3_equals_zero1 test "$(untimed "$TMP/zero3.jsonl")" = "$(untimed "$TMP/zero1.jsonl")"
check test_moe_sim_zero3_loads_sum python3 -c "
import json, sys
for l in open('$TMP/zero3.jsonl'):
    m = json.loads(l)
    for layer in (0, 1):
        if sum(m['moe_load_l%d_e%d' % (layer, x)] for x in range(4)) != 2 * $B * $T * 2: sys.exit(1)"
echo "zero3 losses: $(losses "$TMP/zero3.jsonl" | tr '\n' ' ')"
expect gen_moe_sm90_zero3 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp,zero3 --model tiny-moe --target sm_90 --batch $B --seq $T -o "$TMP/sm90"
finish
