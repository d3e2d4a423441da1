#!/usr/bin/env bash
# v2165 CUDA graphs through the cuda path: a trainer generated for --target sm_90 with
# `--enable cuda-graphs` runs runtime/device/dev_cuda.c on the cuda stand-ins (HYP_CUDA_LIBDIR=
# BUILD/standins, docs/cuda-standins.md), whose libcuda records the launches and cuBLASLt GEMMs
# issued on a capturing stream instead of running them (cuStreamBeginCapture / cuStreamEndCapture
# / cuGraphInstantiate), replays them in order on cuGraphLaunch, and refuses what the driver
# refuses during a capture (tests/standins/test_standin_driver.c checks those refusals). 3 steps of
# tiny with AdamW and a 2-step warmup, graphs against HYP_CUDA_GRAPHS=0 on the same stand-ins:
# every untimed metric and the final weights bit-identical (same kernels, same GEMM code, same
# arguments, one stream: no tolerance); the graph run issues at most a tenth of the eager run's
# host calls per step, and its eager equivalent is the eager count. Stream workers sleep seeded
# random delays, so a capture that ran work early or a replay out of order shows. ~20 s.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 HYP_SIM_CACHE="$BUILD/tests/sim_cache" HYP_CUDA_LIBDIR="$BUILD/standins" HYP_STANDIN_SEED=7
for lib in libcuda.so.1 libcublasLt.so.13; do
  [ -f "$HYP_CUDA_LIBDIR/$lib" ] || { echo "FAIL $HYP_CUDA_LIBDIR/$lib: stand-in not built (tests/standins; needs the CUDA headers)"; exit 1; }
done
kjv_corpus "$TMP/c.txt" 50000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" --val-fraction 0.1 >/dev/null
# a fixed folder: the simulator's module cache keys on a kernel's path, so reruns compile nothing
OUT="$BUILD/tests/cuda_graphs_v2165"
rm -rf "$OUT" && mkdir -p "$OUT"
R=(--data "$TMP/data" --eval-every 0 --sample 0 --steps 3 --seq 8)
calls() { sed -nE 's/^device calls per step: ([0-9]+) host calls.*/\1/p' "$1"; }
eager_eq() { sed -nE 's/^device calls per step: .*eager equivalent ([0-9]+)\).*/\1/p' "$1"; }
expect gen_sm_90_graphs 0 "for sm_90" -- "$GEN" specs/v2500.yaml --batch 2 --seq 16 --model tiny --target sm_90 --enable adamw,clip,warmup,cuda-graphs --set v2130.warmup_steps=2 -o "$OUT/t"
HYP_CUDA_GRAPHS=0 "$OUT/t/train" "${R[@]}" --ckpt-dir "$TMP/ck_e" --metrics "$TMP/e.jsonl" > "$TMP/e.out" 2>&1
check sm_90_eager_trains_on_standins grep -q "cuda graphs off (v2165)" "$TMP/e.out"
"$OUT/t/train" "${R[@]}" --ckpt-dir "$TMP/ck_g" --metrics "$TMP/g.jsonl" > "$TMP/g.out" 2>&1
check sm_90_graphs_train_on_standins grep -q "cuda graphs on (v2165)" "$TMP/g.out"
grep -q "(Hyperion stand-in)" "$TMP/g.out" || { echo "FAIL not the stand-in"; cat "$TMP/g.out" | head; }
check test_v2165_sm_90_lr_warms_up test "$(metric "$TMP/g.jsonl" lr | sort -u | wc -l)" -ge 2
check test_v2165_sm_90_graphs_equal_eager_every_metric_bit_for_bit test "$(untimed "$TMP/g.jsonl")" = "$(untimed "$TMP/e.jsonl")"
check test_v2165_sm_90_graphs_equal_eager_final_weights cmp -s "$TMP/ck_g/step_00000003/model.safetensors" "$TMP/ck_e/step_00000003/model.safetensors"
ge=$(calls "$TMP/e.out") gg=$(calls "$TMP/g.out") gq=$(eager_eq "$TMP/g.out")
echo "    sm_90 on the stand-ins: host calls per step eager $ge, with graphs $gg (eager equivalent $gq)"
check test_v2165_sm_90_launches_per_step_eager_equivalent_is_the_eager_count test "${gq:-x}" = "${ge:-y}"
check test_v2165_sm_90_graphs_cut_host_calls_tenfold test $((10 * ${gg:-999})) -le "${ge:-0}"
finish
