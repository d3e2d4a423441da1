#!/usr/bin/env bash
# v2102 mixed precision on the cpu, bf16 storage (the cpu default of `--enable bf16`): the plan
# stores every activation and activation gradient in bf16 except the fp32 statistics (norm
# mean/rstd, log-sum-exp, losses), so the activation arena is half the fp32 trainer's, the
# trainer's memory line says so and matches `gen size --dtype bf16` within 10%; a bf16 run resumed
# from a checkpoint gives the losses of a straight run bit for bit (the bf16 weight copy is
# refreshed after a load); the Llama ops (RMSNorm, QK-norm, RoPE, SwiGLU) with flash attention on
# bf16 storage track their fp32 trainer; storage bf16 beside fp8, or with ZeRO-3 on a device target,
# is refused at gen time with the fix (bf16 storage on sim/cuda: test_sim_bf16_v2102.sh). (Convergence over 100 steps against fp32: test_train.sh; recompute with
# bf16 storage bit-identical to no recompute: test_recompute.sh.) ~30 s.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=2
kjv_corpus "$TMP/c.txt" 50000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" --val-fraction 0.1 >/dev/null

S=(specs/v2500.yaml --model tiny --target cpu --batch 4 --seq 64)
expect gen_fp32 0 "wrote" -- "$GEN" "${S[@]}" --enable adamw,memory-planning -o "$TMP/f32"
expect gen_bf16 0 "wrote" -- "$GEN" "${S[@]}" --enable adamw,memory-planning,bf16 -o "$TMP/b16"
plan() { python3 -c "import json,sys; p=json.load(open('$1/plan.json')); print($2)"; }
a32=$(plan "$TMP/f32" "p['act_bytes']"); a16=$(plan "$TMP/b16" "p['act_bytes']")
echo "v2102: planned activation arena fp32 $a32 B, bf16 $a16 B"
check test_v2102_bf16_arena_half awk -v a="$a16" -v b="$a32" 'BEGIN { r = a / b; exit !(a > 0 && r > 0.49 && r < 0.51) }'
check bf16_stats_stay_f32 test "$(plan "$TMP/b16" "sorted({b['dtype'] for b in p['buffers'] if b['kind'] == 'act' and (b['name'] == 'losses' or b['name'].endswith('.rstd') or b['name'].endswith('.mean'))})")" = "['f32']"
check bf16_activations_and_grads_bf16 test "$(plan "$TMP/b16" "sorted({b['dtype'] for b in p['buffers'] if b['name'] in ('l0.qkv', 'd:l0.qkv', 'logits', 'x1', 'd:x1')})")" = "['bf16']"
check bf16_plan_has_no_round_ops test "$(plan "$TMP/b16" "sum(o['op'] == 'round_bf16' for o in p['forward'] + p['backward'])")" = 0

# the trainers' memory lines: activations halve; gen size predicts the bf16 arena within 10%
R=(--data "$TMP/data" --seq 64 --lr 3e-3 --eval-every 0 --sample 0)
runlog() { local log=$1; shift; "$@" > "$log" 2>&1; local rc=$?; cat "$log"; return $rc; }
expect train_fp32 0 "done: 6 steps" -- runlog "$TMP/f32.log" "$TMP/f32/train" "${R[@]}" --steps 6 --metrics "$TMP/f32.jsonl"
m32=$(grep -o "activations [0-9]* B" "$TMP/f32.log" | grep -o "[0-9]*")
expect train_bf16 0 "done: 6 steps" -- runlog "$TMP/b16.log" "$TMP/b16/train" "${R[@]}" --steps 6 --metrics "$TMP/b16.jsonl"
m16=$(grep -o "activations [0-9]* B" "$TMP/b16.log" | grep -o "[0-9]*")
pk=$(grep -o "peak [0-9.]* GFLOP/s bf16 measured" "$TMP/b16.log" | head -1)
check test_v2102_trainer_reports_bf16_peak test -n "$pk"
gs=$("$GEN" size --model tiny --hw host-cpu --dtype bf16 --batch 4 --seq 64 --json | python3 -c "import json,sys; print(int(json.load(sys.stdin)['hardware'][0]['memory']['activations']))")
echo "v2102: trainer activations fp32 $m32 B, bf16 $m16 B; gen size --dtype bf16: $gs B; $pk"
check test_v2102_trainer_activations_half awk -v a="$m16" -v b="$m32" 'BEGIN { r = a / b; exit !(a > 0 && r > 0.49 && r < 0.51) }'
check test_v2102_gen_size_predicts_bf16_arena awk -v a="$m16" -v g="$gs" 'BEGIN { d = a / g - 1; if (d < 0) d = -d; exit !(a > 0 && d < 0.10) }'
check bf16_not_fp32 test "$(first_metric "$TMP/b16.jsonl" loss)" != "$(first_metric "$TMP/f32.jsonl" loss)"
check bf16_tracks_fp32_6_steps bash -c "paste <(grep -o '\"loss\":[^,]*' '$TMP/f32.jsonl' | cut -d: -f2) <(grep -o '\"loss\":[^,]*' '$TMP/b16.jsonl' | cut -d: -f2) | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 0.05) bad = 1; n++ } END { exit bad || n != 6 }'"

# checkpoints: 3 + 3 steps resumed == 6 straight, bit for bit (the weight copy follows the load)
expect bf16_3_steps_ckpt 0 "done: 3 steps" -- "$TMP/b16/train" "${R[@]}" --steps 6 --stop-after 3 --ckpt-dir "$TMP/ck" --ckpt-every 3 --metrics "$TMP/r.jsonl"
expect bf16_resume 0 "resumed from" -- "$TMP/b16/train" "${R[@]}" --steps 6 --ckpt-dir "$TMP/ck" --resume --metrics "$TMP/r.jsonl"
check test_v2102_bf16_resume_is_bit_exact test "$(losses "$TMP/b16.jsonl")" = "$(losses "$TMP/r.jsonl")" -a "$(losses "$TMP/r.jsonl" | wc -l)" -eq 6

# Llama ops and flash attention on bf16 storage: 4 steps within 0.05 of the fp32 trainer
L=(specs/v2500.yaml --model tiny-llama --target cpu --batch 4 --seq 64)
expect gen_llama_fp32 0 "wrote" -- "$GEN" "${L[@]}" --enable adamw,memory-planning,flash -o "$TMP/l32"
expect gen_llama_bf16 0 "wrote" -- "$GEN" "${L[@]}" --enable adamw,memory-planning,flash,bf16 -o "$TMP/l16"
check llama_bf16_plan_stores_bf16 grep -q '"dtype":[[:space:]]*"bf16"' "$TMP/l16/plan.json"
expect train_llama_fp32 0 "done: 4 steps" -- "$TMP/l32/train" "${R[@]}" --steps 4 --metrics "$TMP/l32.jsonl"
expect train_llama_bf16 0 "done: 4 steps" -- "$TMP/l16/train" "${R[@]}" --steps 4 --metrics "$TMP/l16.jsonl"
check test_v2102_bf16_llama_flash_tracks_fp32 bash -c "paste <(grep -o '\"loss\":[^,]*' '$TMP/l32.jsonl' | cut -d: -f2) <(grep -o '\"loss\":[^,]*' '$TMP/l16.jsonl' | cut -d: -f2) | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 0.05) bad = 1; n++ } END { exit bad || n != 4 }'"

# refused at gen time, exit 2, with the fix
expect bf16_storage_with_fp8_refused 2 "storage bf16 with fp8.*use --set v2102.storage=fp32" -- "$GEN" "${S[@]}" --enable adamw,bf16,fp8 --set v2102.storage=bf16 -o "$TMP/x1"
check refused_writes_nothing test ! -e "$TMP/x1"
expect bf16_storage_zero3_on_sim_refused 2 "storage bf16 with ZeRO-3.*use zero2" -- "$GEN" specs/v2500.yaml --model tiny --target sim --enable adamw,bf16,zero3 --set v2102.storage=bf16 -o "$TMP/x2"
expect bad_storage_value 2 "storage" -- "$GEN" "${S[@]}" --enable adamw,bf16 --set v2102.storage=bf8 -o "$TMP/x3"
finish
