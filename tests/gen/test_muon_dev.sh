#!/usr/bin/env bash
# v2138 Muon on the sim device (templates/muon.cu.lua + fp32 device GEMMs, optim_muon.c
# step_device): gen renders the muon kernels for --target sim; the sim trainer's losses fall, and
# after 5 steps its weights and optimizer states equal the cpu trainer's (oneDNN sgemm) within the
# tolerances below, every tensor compared.
#
# Tolerances (5 steps, lr 2e-3, tiny): the sim's GEMM accumulates each dot product in double and
# rounds once, oneDNN's sgemm accumulates in fp32, so the Newton-Schulz output differs by fp32
# rounding: Muon matrices within 2e-6 absolute — E1 with one side exact, sqrt(K) u relative at
# K <= 512, times ~25 through the 5 Newton-Schulz iterations (E4), lambda = 6, on an update of
# size lr: 5 steps x 2e-3 x 25 x 6 x 6e-8 x sqrt(512) = 2e-6 (docs/test-tolerances.md; printed
# 3.1e-7; a wrong NS coefficient or scale moves them by ~lr). AdamW
# tensors within 1e-3 (a tenth of 5 steps x lr, where a wrong update lands): the attention key
# bias has a gradient that is exactly 0 in exact arithmetic (softmax ignores a per-row constant),
# so both backends feed Adam rounding noise, which Adam normalizes to steps of up to ~lr (observed
# 1.8e-5 on c_attn.bias; the others 1.2e-7); another CPU's oneDNN kernels round otherwise.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/corpus.txt" 200000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
COMMON=(--data "$TMP/data" --seq 64 --eval-every 0 --lr 2e-3 --batch 4 --steps 5 --ckpt-every 5)
stcmp() { python3 "$ROOT/tests/gen/stcmp.py" "$@" muon; }

expect gen_muon_sim 0 "wrote" -- "$GEN" specs/v2500.yaml --enable muon,adamw,memory-planning --model tiny --target sim --batch 4 --seq 64 -o "$TMP/sim"
check test_v2138_sim_renders_muon_kernels grep -q "muon_momentum" "$TMP/sim/kernels/kernels.json"
check test_v2138_sim_no_adamw_module test ! -e "$TMP/sim/kernels/adamw.cu"
expect gen_muon_cpu 0 "wrote" -- "$GEN" specs/v2500.yaml --enable muon,adamw,memory-planning --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/cpu"
expect sim_run 0 "done: 5 steps" -- "$TMP/sim/train" "${COMMON[@]}" --metrics "$TMP/sim.jsonl" --ckpt-dir "$TMP/cks"
expect cpu_run 0 "done: 5 steps" -- "$TMP/cpu/train" "${COMMON[@]}" --metrics "$TMP/cpu.jsonl" --ckpt-dir "$TMP/ckc"
paste <(losses "$TMP/cpu.jsonl") <(losses "$TMP/sim.jsonl")
check test_v2138_sim_loss_falls awk -v a="$(first_metric "$TMP/sim.jsonl" loss)" -v b="$(last_metric "$TMP/sim.jsonl" loss)" 'BEGIN { exit !(a != "" && b + 0 < a - 1.0) }'
check test_v2138_sim_losses_equal_cpu bash -c "paste <(grep -o '\"loss\":[^,}]*' '$TMP/cpu.jsonl' | cut -d: -f2) <(grep -o '\"loss\":[^,}]*' '$TMP/sim.jsonl' | cut -d: -f2) | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 2e-5 * \$1) bad = 1; n++ } END { exit bad || n != 5 }'"
check test_v2138_sim_weights_equal_cpu stcmp "$TMP/ckc/step_00000005/model.safetensors" "$TMP/cks/step_00000005/model.safetensors" 2e-6 1e-3 "$TMP/cpu/plan.json"
check test_v2138_sim_states_equal_cpu stcmp "$TMP/ckc/step_00000005/optimizer.safetensors" "$TMP/cks/step_00000005/optimizer.safetensors" 2e-6 1e-3 "$TMP/cpu/plan.json"
# a stopped sim run resumes from its checkpoint (the packed states go to the device and back) bit for bit
expect sim_first_2 0 "done: 2 steps" -- "$TMP/sim/train" "${COMMON[@]}" --stop-after 2 --metrics "$TMP/r.jsonl" --ckpt-dir "$TMP/ckr"
expect sim_resumes 0 "resumed from" -- "$TMP/sim/train" "${COMMON[@]}" --metrics "$TMP/r.jsonl" --ckpt-dir "$TMP/ckr" --resume
check test_v2138_sim_resume_losses_bit_exact test "$(losses "$TMP/r.jsonl" | wc -l)" = 5 -a "$(losses "$TMP/r.jsonl")" = "$(losses "$TMP/sim.jsonl")"
expect test_v2138_sim_resume_weights_bit_exact 0 "max" -- "$BUILD/tests/st_diff" "$TMP/cks/step_00000005/model.safetensors" "$TMP/ckr/step_00000005/model.safetensors" 0
finish
