#!/usr/bin/env bash
# The generated trainer end to end on the CPU: data preparation, training with falling loss,
# metrics, checkpoints, bit-exact resume (10 + 10 steps == 20 straight), sampling, the memory
# plan (v2167) changing memory but not numerics, gradient accumulation (v2103), and every class
# of bad input (flags, data, plan, checkpoint) refused with exit status 2 and a clear message.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=2

# a fixed corpus of English prose (the first 600 kB of the KJV, as scripts/demo.sh makes data/kjv.txt):
# the fp8/bf16/fp32 comparisons below are at one seed, so the text must not move with spec wording
kjv_corpus "$TMP/corpus.txt" 600000
expect gen_data 0 "wrote shards" -- "$GEN" data "$TMP/corpus.txt" -o "$TMP/data" --val-fraction 0.1
expect gen_data_refuses_clobber 2 "data" -- "$GEN" data "$TMP/corpus.txt" -o "$TMP/data"
expect gen_data_missing_input 2 "nope.txt" -- "$GEN" data "$TMP/nope.txt" -o "$TMP/data2"

SEL="adamw,warmup,cosine,clip,memory-planning"
expect gen_trainer 0 "wrote" -- "$GEN" specs/v2500.yaml --enable $SEL --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/t"
check trainer_written test -x "$TMP/t/train" -a -s "$TMP/t/plan.json"
TR="$TMP/t/train"
COMMON=(--data "$TMP/data" --batch 4 --seq 64 --lr 3e-3 --eval-every 10 --eval-batches 2)

# 20 straight steps vs 10 + resume 10: identical losses, bit for bit
expect train_20_steps 0 "done: 20 steps" -- "$TR" "${COMMON[@]}" --steps 20 --metrics "$TMP/m20.jsonl"
expect train_10_steps_ckpt 0 "done: 10 steps" -- "$TR" "${COMMON[@]}" --steps 20 --metrics "$TMP/mr.jsonl" --ckpt-dir "$TMP/ck" --ckpt-every 10 --stop-after 10
expect resume_10_more 0 "resumed from .*step_0*10" -- "$TR" "${COMMON[@]}" --steps 20 --metrics "$TMP/mr.jsonl" --ckpt-dir "$TMP/ck" --resume
check resume_is_bit_exact test "$(losses "$TMP/m20.jsonl")" = "$(losses "$TMP/mr.jsonl")"
check metrics_have_fields grep -q '"step":10,.*"grad_norm".*"tokens_per_s".*"val_loss"' "$TMP/m20.jsonl"
first=$(first_metric "$TMP/m20.jsonl" loss)
last=$(last_metric "$TMP/m20.jsonl" loss)
check loss_falls awk -v a="$first" -v b="$last" 'BEGIN { exit !(a + 0 > 0 && b + 0 < a - 0.5) }'
expect sample_from_checkpoint 0 "." -- "$TR" sample --ckpt-dir "$TMP/ck" --sample 40 --prompt "The "

# v2167: the memory plan shrinks the activation arena and changes no number
expect gen_without_memory_plan 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,warmup,cosine,clip --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/nomp"
a1=$(grep -oE '"act_bytes":[[:space:]]*[0-9]+' "$TMP/t/plan.json" | grep -oE '[0-9]+$')
a0=$(grep -oE '"act_bytes":[[:space:]]*[0-9]+' "$TMP/nomp/plan.json" | grep -oE '[0-9]+$')
echo "v2167: activation arena $a1 bytes with the memory plan, $a0 without"
check test_v2167_memory_plan_shrinks_arena awk -v a="$a1" -v b="$a0" 'BEGIN { exit !(a + 0 > 0 && a + 0 < 0.7 * b) }'
expect train_without_memory_plan 0 "done" -- "$TMP/nomp/train" "${COMMON[@]}" --steps 5 --metrics "$TMP/nomp.jsonl"
check test_v2167_same_losses test "$(losses "$TMP/nomp.jsonl")" = "$(losses "$TMP/m20.jsonl" | head -5)"

# v2103: 2 micro-batches of 2 sequences accumulate to the loss of one batch of 4 (same data order)
expect accum_run 0 "done" -- "$TR" --data "$TMP/data" --batch 2 --grad-accum 2 --seq 64 --lr 3e-3 --steps 3 --eval-every 0 --metrics "$TMP/acc.jsonl"
expect plain_run 0 "done" -- "$TR" --data "$TMP/data" --batch 4 --seq 64 --lr 3e-3 --steps 3 --eval-every 0 --metrics "$TMP/b4.jsonl"
# 1e-4 absolute on a loss of ~5 (2e-5 relative): two micro-batches summed into the arena vs one
# sgemm over the batch are two fp32 orders, E2 + E3 of docs/test-tolerances.md over 3 steps; a
# micro-batch weighted 1 instead of 1/2 moves the step-3 loss by ~1e-2
check test_v2103_accumulation_matches_big_batch awk -v a="$(last_metric "$TMP/acc.jsonl" loss)" \
  -v b="$(last_metric "$TMP/b4.jsonl" loss)" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a + 0 > 0 && d < 1e-4) }'

# v2160: FP8 (HYBRID, delayed scaling) quantizes every layer GEMM's operands: the losses differ from
# fp32 from the first step (the quantization is real), the run learns (validation loss at least 2
# nats below the 5.5 of the untrained model) and ends within 0.3 nats of the fp32 run's validation
# loss after 100 steps. Written margin: at this point two fp32 runs with different seeds already
# differ by ~0.2 (measured: seeds 1-3 gave fp8 - fp32 = -0.23, -0.09, +0.05), so a tighter bound
# would test noise; a broken scaling recipe lands far outside it. The bound is one-sided (fp8 no
# more than 0.3 nats WORSE). On the spec-text corpus this test used before, every spec edit moved
# these numbers by up to 0.5 (loss spikes at lr 2e-3 without warmup); on the fixed KJV slice:
# fp32 2.435, fp8 2.339, bf16 2.446; being better is not the failure this guards against.
expect gen_fp8 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,memory-planning,fp8 --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/f8"
expect gen_fp32 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,memory-planning --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/f32"
check fp8_plan_quantizes_gemm_operands grep -q '"fp8_quantize"' "$TMP/f8/plan.json"
F8ARGS=(--data "$TMP/data" --seq 64 --steps 100 --lr 2e-3 --eval-every 100 --eval-batches 8)
expect train_fp8 0 "done: 100 steps" -- "$TMP/f8/train" "${F8ARGS[@]}" --metrics "$TMP/f8.jsonl"
expect train_fp32 0 "done: 100 steps" -- "$TMP/f32/train" "${F8ARGS[@]}" --metrics "$TMP/f32.jsonl"
check test_v2160_fp8_is_not_fp32 test "$(first_metric "$TMP/f8.jsonl" loss)" != "$(first_metric "$TMP/f32.jsonl" loss)"
v8=$(last_metric "$TMP/f8.jsonl" val_loss); v32=$(last_metric "$TMP/f32.jsonl" val_loss)
echo "v2160: validation loss after 100 steps: fp8 $v8, fp32 $v32"
check test_v2160_fp8_learns awk -v a="$v8" 'BEGIN { exit !(a + 0 > 0 && a < 3.5) }'
check test_v2160_fp8_within_margin_of_fp32 awk -v a="$v8" -v b="$v32" 'BEGIN { exit !(a + 0 > 0 && a - b < 0.3) }'
# v2160 + checkpoints: the FP8 scaling states (amax histories, scales, history positions) are
# saved in train_state.safetensors and restored, so an fp8 run resumed at step 10 gives the losses
# of 20 straight steps bit for bit (measured without them: the scales re-warm from 1 and the
# losses differ from step 11 on, ending near 9 instead of 3.5)
F8R=(--data "$TMP/data" --batch 4 --seq 64 --lr 3e-3 --eval-every 0 --steps 20 --sample 0)
expect fp8_20_steps 0 "done: 20 steps" -- "$TMP/f8/train" "${F8R[@]}" --metrics "$TMP/f8_20.jsonl"
expect fp8_10_steps_ckpt 0 "done: 10 steps" -- "$TMP/f8/train" "${F8R[@]}" --metrics "$TMP/f8_r.jsonl" --ckpt-dir "$TMP/ck8" --ckpt-every 10 --stop-after 10
expect fp8_resume_10_more 0 "resumed from .*step_0*10" -- "$TMP/f8/train" "${F8R[@]}" --metrics "$TMP/f8_r.jsonl" --ckpt-dir "$TMP/ck8" --resume
check fp8_checkpoint_holds_scaling_state test -s "$TMP/ck8/step_00000010/train_state.safetensors"
check test_v2160_fp8_resume_is_bit_exact test "$(losses "$TMP/f8_20.jsonl")" = "$(losses "$TMP/f8_r.jsonl")"
check fp8_resume_ran_20_steps test "$(losses "$TMP/f8_r.jsonl" | wc -l)" -eq 20
# v2102 bf16 policy (on cpu: activations and their gradients stored in bf16, oneDNN bf16 GEMMs
# with fp32 accumulation, fp32 master weights, norms, softmax and loss): not fp32 either, and the
# fp8 run stays within the same written margin of the bf16 run
expect gen_bf16 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,memory-planning,bf16 --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/bf16"
check bf16_plan_stores_bf16_activations grep -q '"dtype":[[:space:]]*"bf16"' "$TMP/bf16/plan.json"
expect train_bf16 0 "done: 100 steps" -- "$TMP/bf16/train" "${F8ARGS[@]}" --metrics "$TMP/bf16.jsonl"
check test_v2102_bf16_is_not_fp32 test "$(first_metric "$TMP/bf16.jsonl" loss)" != "$(first_metric "$TMP/f32.jsonl" loss)"
vb=$(last_metric "$TMP/bf16.jsonl" val_loss)
echo "v2102/v2160: validation loss after 100 steps: bf16 $vb, fp8 $v8"
# v2102: bf16 storage tracks the fp32 run step by step (same seed and data) until the first loss
# spike (lr 2e-3 without warmup, around step 10), after which the two diverge the way two seeds do. Written margins: the first 5 steps within
# 0.01 (measured at most 0.001; a GEMM or a conversion that drops or misplaces values is off by
# tenths from step 1), and the validation loss after 100 steps no more than 0.3 nats above fp32's,
# the fp8 margin above (measured: +0.011 on the KJV slice, +0.256 on the old spec-text corpus; the previous bf16 policy with f32 storage,
# --set v2102.storage=fp32, +0.231; fp32 with --seed 7, +0.38).
check test_v2102_bf16_storage_tracks_fp32 bash -c "paste <(grep -o '\"loss\":[^,]*' '$TMP/f32.jsonl' | cut -d: -f2) <(grep -o '\"loss\":[^,]*' '$TMP/bf16.jsonl' | cut -d: -f2) | head -5 | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 0.01) bad = 1; n++ } END { exit bad || n != 5 }'"
check test_v2102_bf16_val_within_margin_of_fp32 awk -v a="$vb" -v b="$v32" 'BEGIN { exit !(a + 0 > 0 && b + 0 > 0 && a - b < 0.3) }'
check test_v2160_fp8_within_margin_of_bf16 awk -v a="$v8" -v b="$vb" 'BEGIN { exit !(a + 0 > 0 && b + 0 > 0 && a - b < 0.3) }'

# a trainer generated for a GPU never falls back silently to the CPU: without a driver it says what to do
if "$GEN" specs/v2500.yaml --enable adamw --model tiny --target sm_90 --batch 4 --seq 64 -o "$TMP/gpu" >/dev/null 2>&1; then
  if ldconfig -p 2>/dev/null | grep -q "libcuda.so.1" && command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
    # a GPU machine: the sm_90 trainer runs its step on the device (train_dev.c)
    expect gpu_trainer_trains_on_the_gpu 0 "backend: cuda" -- "$TMP/gpu/train" --data "$TMP/data" --steps 1
  else
    expect gpu_trainer_refuses_cpu_fallback 2 "no CUDA driver .*--target cpu or --target sim" -- "$TMP/gpu/train" --data "$TMP/data" --steps 1
  fi
fi

# bad input: flags
expect unknown_flag 2 "unknown flag '--stpes' \(did you mean '--steps'\?\)" -- "$TR" --data "$TMP/data" --stpes 3
expect bad_number 2 "--steps 'x' is not an integer" -- "$TR" --data "$TMP/data" --steps x
expect missing_data_flag 2 "--data DIR \(or --stream FILES, v2129\) is required" -- "$TR" --steps 3
expect batch_beyond_plan 2 "planned for batch <= 4" -- "$TR" --data "$TMP/data" --batch 64 --steps 1
expect resume_without_ckpt_dir 2 "need --ckpt-dir" -- "$TR" --data "$TMP/data" --resume
# bad input: data
expect missing_data_dir 2 "$TMP/none" -- "$TR" --data "$TMP/none" --steps 1
mkdir -p "$TMP/trunc"; cp "$TMP/data/"* "$TMP/trunc/"; f=$(ls "$TMP/trunc"/train_*.bin | head -1)
truncate -s -1000 "$f"
expect truncated_shard 2 "truncated" -- "$TR" --data "$TMP/trunc" --steps 1
mkdir -p "$TMP/foreign"; head -c 4096 /dev/urandom > "$TMP/foreign/train_000000.bin"
expect foreign_shard 2 "train_000000.bin: .*magic" -- "$TR" --data "$TMP/foreign" --steps 1
# bad input: plan
cp -r "$TMP/t" "$TMP/badplan"; head -c 3000 "$TMP/t/plan.json" > "$TMP/badplan/plan.json"
expect truncated_plan 2 "plan.json: not valid JSON" -- "$TMP/badplan/train" --data "$TMP/data" --steps 1
sed -E 's/"act_bytes":[[:space:]]*[0-9]+/"act_bytes": 1000/' "$TMP/t/plan.json" > "$TMP/badplan/plan.json"
expect edited_plan_offsets 2 "outside the activation arena|needs .* elements" -- "$TMP/badplan/train" --data "$TMP/data" --steps 1
# bad input: checkpoints
cp -r "$TMP/ck" "$TMP/ck2"; st=$(ls -d "$TMP/ck2"/step_* | tail -1)
printf '\x01' | dd of="$st/model.safetensors" bs=1 seek=5000 conv=notrunc 2>/dev/null
expect corrupt_checkpoint 2 "checksum|corrupt" -- "$TR" "${COMMON[@]}" --steps 30 --ckpt-dir "$TMP/ck2" --resume
expect mismatched_checkpoint 2 "plan|config" -- "$TMP/nomp/train" "${COMMON[@]}" --steps 30 --ckpt-dir "$TMP/ck" --resume
check checkpoint_untouched_after_refusal test -s "$TMP/ck/latest"
finish
