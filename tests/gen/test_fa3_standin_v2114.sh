#!/usr/bin/env bash
# v2114 on the cuda path without a GPU: the fa3-gpt2 trainer generated for --target sm_90 (the
# flash alias: flash3_attn_fwd compiled for sm_90a by NVRTC, the FA2 backward) trains through
# runtime/device/dev_cuda.c on the cuda stand-ins (HYP_CUDA_LIBDIR=BUILD/standins: the driver over
# the simulator, which runs the same rendered kernel with hyp/hopper.cuh emulated;
# docs/cuda-standins.md) and equals the sim trainer of the same selection BIT FOR BIT (every loss
# and gradient norm printed identically: the same kernels in the same simulator, the same GEMM
# code, the same order of operations), with T = 200 (partial 128-row tiles) and bf16 storage, so
# the producer is TMA: the executor encodes a tensor map over qkv per launch (cuTensorMapEncodeTiled
# of the stand-in driver, the sim's encoder on sim). On sim the flash alias is FA2, so the sim
# trainer names fa3.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 HYP_STANDIN_SEED=${HYP_STANDIN_SEED:-21}
SL="$BUILD/standins"
if [ ! -f "$SL/libcuda.so.1" ] || [ ! -f "$SL/libcublasLt.so.13" ]; then
  echo "FAIL $SL: stand-ins not built (tests/standins; needs the CUDA headers)"
  exit 1
fi
kjv_corpus "$TMP/c.txt" 20000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null
S=(specs/v2500.yaml --model tests/fixtures/models/fa3-gpt2.yaml --batch 2 --seq 200)
RUN=(--data "$TMP/data" --steps 2 --eval-every 0 --lr 3e-3)
expect gen_fa3_sm90 0 "for sm_90" -- "$GEN" "${S[@]}" --enable adamw,bf16,flash --target sm_90 -o "$TMP/t90"
check test_v2114_sm90_trainer_has_fa3 grep -q '"kernel":[[:space:]]*"flash3_attn_fwd"' "$TMP/t90/kernels/resources.json"
check test_v2114_sm90_producer_is_tma grep -q "v2114.producer → TMA" "$TMP/t90/audit.md"
expect gen_fa3_sim 0 "rendered for sim" -- "$GEN" "${S[@]}" --enable adamw,bf16,fa3 --target sim -o "$TMP/sim"
expect test_v2114_sm90_trains_on_standins 0 "backend: cuda — NVIDIA H100.*\(Hyperion stand-in\)" \
  -- env HYP_CUDA_LIBDIR="$SL" HYP_STANDIN_SM=90 "$TMP/t90/train" "${RUN[@]}" --metrics "$TMP/t90.jsonl"
expect fa3_sim_trains 0 "done: 2 steps" -- "$TMP/sim/train" "${RUN[@]}" --metrics "$TMP/sim.jsonl"
paste <(losses "$TMP/t90.jsonl") <(losses "$TMP/sim.jsonl") | sed 's/^/    stand-in sim: /'
same_run() {
  [ "$(metric "$1" loss | wc -l)" = 2 ] && [ "$(metric "$1" loss)" = "$(metric "$2" loss)" ] &&
    [ "$(metric "$1" grad_norm)" = "$(metric "$2" grad_norm)" ]
}
check test_v2114_standin_equals_sim_bit_for_bit same_run "$TMP/t90.jsonl" "$TMP/sim.jsonl"
finish
