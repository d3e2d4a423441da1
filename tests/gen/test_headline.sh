#!/usr/bin/env bash
# Issue 6's headline selection end to end: `--enable fp8,flash,zero3` (v2160 FP8 with v2102,
# v2113 flash attention, v2104 ZeRO stage 3 with v2110 data parallelism) on the cpu backend and on
# sim, two MPI ranks each.
#  - the audit lists every one of these specs as active with what it contributed (none "contributes
#    nothing");
#  - cpu, 2 ranks, 20 steps: the loss falls by more than 1 nat (observed 5.56 -> ~3.1);
#  - sim, 2 ranks, 3 steps: the generated kernels (flash template, fp8 casts, cuBLASLt-semantics
#    fp8 GEMMs) follow the cpu run within 5e-3 relative per step. Not closer: v2160 brings the
#    v2102 bf16 policy, under which the flash template multiplies bf16-rounded operands (one mma,
#    as on a GPU) while the cpu's flash op stays fp32 (~1e-3 alone: fp8 without flash and flash
#    without fp8 match the cpu to the printed digits); and a last-bit difference can flip one fp8
#    rounding of a later operand (up to 1/8 of that element, see test_exec_sim.c). Bound
#    (docs/test-tolerances.md E5): the bf16 operands' 2^-9 roundings, two compounding per gradient,
#    ~1e-3 of the loss per step (test_sim_flash.sh), plus fp8 flips <= 5e-4 over 3 steps
#    (test_sim_fp8.sh's 1.2e-3 for 8): <= 1.5e-3 per step, inside 5e-3; a missing rank, scale or
#    fp8 recipe moves a loss by >= 1e-2;
#  - sim resume: 2 steps, sharded checkpoint (with the FP8 scaling states), 1 more step after
#    --resume == 3 straight steps, bit for bit (the run is deterministic).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
if ! command -v mpirun >/dev/null; then echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; fi
MPI="mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS -x HYP_SIM_CACHE"
# a fixed corpus: the specs' text drifts with every wording change (SCHEMA.md's MoE section once
# turned this run's first 3 losses upward), the KJV does not
kjv_corpus "$TMP/c.txt" 60000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null
SEL=(specs/v2500.yaml --enable fp8,flash,zero3 --model tiny --batch 2 --seq 32)

expect gen_cpu 0 "wrote" -- "$GEN" "${SEL[@]}" --target cpu -o "$TMP/h"
"$GEN" audit "$TMP/h" > "$TMP/audit.txt"
for id in v2160 v2113 v2104 v2110 v2102; do
  check "audit_${id}_active_with_contribution" awk -v id="$id" '
    index($0, "- **" id " ") == 1 { on = 1; next }
    on && /^- \*\*/ { exit }
    on && /contributed:/ && !/contributes nothing/ { ok = 1 }
    END { exit !ok }' "$TMP/audit.txt"
done
check audit_zero_stage_3 grep -q "stage=3" "$TMP/audit.txt"
check audit_lm_head_bf16 grep -q "fp8.lm_head → bf16" "$TMP/audit.txt"
expect cpu_np2_20_steps 0 "done: 20 steps" -- $MPI "$TMP/h/train" --data "$TMP/data" --steps 20 --eval-every 0 --metrics "$TMP/cpu20.jsonl"
check cpu_loss_falls awk -v a="$(first_metric "$TMP/cpu20.jsonl" loss)" -v b="$(last_metric "$TMP/cpu20.jsonl" loss)" 'BEGIN { exit !(b < a - 1) }'

OUT="$BUILD/tests/headline_sim" # a fixed path: sim's module cache keys on the kernel's path
rm -rf "$OUT"
expect gen_sim 0 "rendered for sim" -- "$GEN" "${SEL[@]}" --target sim -o "$OUT"
COMMON=(--data "$TMP/data" --steps 3 --batch 1 --seq 16 --eval-every 0)
expect cpu_np2_3_steps 0 "done: 3 steps" -- $MPI "$TMP/h/train" "${COMMON[@]}" --metrics "$TMP/cpu3.jsonl"
expect sim_np2_3_steps 0 "done: 3 steps" -- $MPI "$OUT/train" "${COMMON[@]}" --metrics "$TMP/sim3.jsonl"
check sim_loss_falls awk -v a="$(first_metric "$TMP/sim3.jsonl" loss)" -v b="$(last_metric "$TMP/sim3.jsonl" loss)" 'BEGIN { exit !(b < a) }'
paste <(losses "$TMP/cpu3.jsonl") <(losses "$TMP/sim3.jsonl") | awk '{ d = $1 - $2; if (d < 0) d = -d; printf "    step %d: cpu %s sim %s rel %.2g\n", NR, $1, $2, d / $1 }'
check "test_v2160_v2113_v2104_sim_np2_matches_cpu_np2" bash -c "paste <(grep -o '\"loss\":[^,}]*' '$TMP/cpu3.jsonl' | cut -d: -f2) <(grep -o '\"loss\":[^,}]*' '$TMP/sim3.jsonl' | cut -d: -f2) |
  awk '{ n++; d = \$1 - \$2; if (d < 0) d = -d; if (d > 5e-3 * \$1) bad = 1 } END { exit bad || n != 3 }'"
expect sim_np2_first_2 0 "done: 2 steps" -- $MPI "$OUT/train" "${COMMON[@]}" --stop-after 2 --ckpt-dir "$TMP/ck" --metrics "$TMP/res.jsonl"
check sim_checkpoint_sharded_with_fp8_state bash -c "ls '$TMP'/ck/step_00000002/shard_00001.safetensors '$TMP'/ck/step_00000002/train_state.safetensors"
expect sim_np2_resume 0 "resumed from .*step 2" -- $MPI "$OUT/train" "${COMMON[@]}" --ckpt-dir "$TMP/ck" --resume --metrics "$TMP/res.jsonl"
check "test_v2181_v2160_sim_resume_is_bit_exact" bash -c "diff <(grep -o '\"loss\":[^,}]*' '$TMP/sim3.jsonl') <(grep -o '\"loss\":[^,}]*' '$TMP/res.jsonl')"
rm -rf "$OUT"
finish
