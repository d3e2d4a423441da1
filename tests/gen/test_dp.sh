#!/usr/bin/env bash
# Data parallelism and ZeRO on the CPU backend over MPI (v2110, v2104): for stages 0-3, 2 ranks
# with half the batch each give the losses and the weights of 1 rank with the whole batch. The
# ranks sum gradients in another order (docs/test-tolerances.md E1, E7): losses 2e-5 relative
# (E2 + E3, tiny, 4 AdamW steps); weights 2e-4 absolute: Adam's m/(sqrt(v)+eps) passes a relative
# gradient difference delta ~ 1e-6 through as delta*lr, except on coordinates whose exact gradient
# is ~0 (the attention key bias), which move by lr*n/(|n|+eps) of rounding noise n: while
# n < eps/60 that is < lr/60 per step, 4 steps x 3e-3 / 60 = 2e-4 (n is ~u times the gradient's
# partial sums, < 1e-10 at these scales; see the Open note in docs/test-tolerances.md). A missing
# rank's gradient moves weights by ~lr = 3e-3 and step-2 losses by ~1e-2); per-rank model-state memory at
# np=2 matches the stage formula of generator/lua/formulas.lua (via `gen size --json`); ZeRO-3
# at np=3 (uneven per-layer padding) equals np=1; a
# checkpoint written at 2 ranks resumes at 1 rank and continues like an uninterrupted run (v2175).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
mpi2
# a fixed text (the KJV, as scripts/demo.sh makes data/kjv.txt): the np=2 vs np=1 weight bound is
# a few rounding steps of Adam's update, and a corpus that moves with spec wording moved it
kjv_corpus "$TMP/corpus.txt" 400000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
COMMON=(--data "$TMP/data" --seq 64 --steps 4 --eval-every 0 --lr 3e-3)
close() { # close FILE_A FILE_B: every loss within 2e-5 relative
  paste <(losses "$1") <(losses "$2") | awk 'BEGIN { n = 0 } { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5 * $1) bad = 1 } END { exit bad || n < 4 }'
}
for stage in 0 1 2 3; do
  sel="adamw,clip,memory-planning,dp,v2175"; [ $stage -gt 0 ] && sel="$sel,zero$stage"
  expect "gen_zero$stage" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable $sel --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/z$stage"
  expect "np1_zero$stage" 0 "done: 4 steps" -- "$TMP/z$stage/train" "${COMMON[@]}" --batch 4 --metrics "$TMP/np1_$stage.jsonl" --ckpt-dir "$TMP/ck1_$stage"
  expect "np2_zero$stage" 0 "rank 1/2 memory \(ZeRO stage $stage\)" -- $MPI "$TMP/z$stage/train" "${COMMON[@]}" --batch 2 --metrics "$TMP/np2_$stage.jsonl" --ckpt-dir "$TMP/ck2_$stage"
  check "test_v2104_stage${stage}_np2_losses_equal_np1" close "$TMP/np1_$stage.jsonl" "$TMP/np2_$stage.jsonl"
  # np=2 with ZeRO >= 1 writes a sharded checkpoint (v2181): st_diff assembles the shards
  ck2="$TMP/ck2_$stage/step_00000004"; [ $stage -eq 0 ] && ck2="$ck2/model.safetensors"
  expect "test_v2104_stage${stage}_np2_weights_equal_np1" 0 "max" -- "$DIFF" "$TMP/ck1_$stage/step_00000004/model.safetensors" "$ck2" 2e-4
done
for stage in 1 2 3; do
  d="$TMP/ck2_$stage/step_00000004"
  check "test_v2181_stage${stage}_np2_checkpoint_is_sharded" test -s "$d/shard_00000.safetensors" -a -s "$d/shard_00001.safetensors" -a ! -e "$d/model.safetensors"
  echo "v2181 stage $stage np=2 checkpoint bytes per rank: $(stat -c %s "$d"/shard_*.safetensors | tr '\n' ' ')(single-file np=1: $(cat "$TMP/ck1_$stage"/step_00000004/*.safetensors | wc -c))"
done
# each rank writes only its slices: together the shards hold the weights and moments once (plus
# the per-tensor headers, < 1%)
one=$(cat "$TMP/ck1_3"/step_00000004/*.safetensors | wc -c); two=$(cat "$TMP/ck2_3"/step_00000004/shard_*.safetensors | wc -c)
check test_v2181_shards_hold_the_state_once awk -v a="$two" -v b="$one" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.01 * b) }'


# per-rank model state at np=2 against the formula (fp32 training: 4 B params, 4 B grads, 8 B AdamW);
# measured = bytes allocated. Stage 3 params = own shard + two layer working buffers (the layer in
# use and the prefetched next one), which the formula counts as params/p + gather; its backward
# gradient workspace is one gather unit (one layer), not the full arena of stages 0-2.
json_num() { tr -d ' \n\t' < "$1" | grep -oE "\"memory\":\{.*" | grep -oE "\"$2\":[0-9.e+]+" | head -1 | cut -d: -f2; }
within() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 0.02 * b) }'; }
"$GEN" size --model tiny --hw host-cpu --dtype fp32 --zero 0 --dp 2 --json > "$TMP/size0.json"
for stage in 1 2 3; do
  $MPI "$TMP/z$stage/train" "${COMMON[@]}" --batch 2 --steps 1 > "$TMP/mem$stage.txt" 2>&1
  "$GEN" size --model tiny --hw host-cpu --dtype fp32 --zero $stage --dp 2 --json > "$TMP/size$stage.json"
  for key in params grads optimizer; do
    want=$(json_num "$TMP/size$stage.json" $key)
    [ $stage -eq 3 ] && [ $key = params ] && want=$(awk -v a="$want" -v b="$(json_num "$TMP/size$stage.json" gather)" 'BEGIN { print a + b }')
    got=$(grep "rank 0/2 memory" "$TMP/mem$stage.txt" | grep -oE "$key [0-9]+ B" | grep -oE "[0-9]+")
    echo "stage $stage $key: measured $got B, formula $want B"
    check "test_v2104_stage${stage}_${key}_memory_matches_formula" within "$got" "$want"
  done
done
half_gather=$(awk -v g="$(json_num "$TMP/size3.json" gather)" 'BEGIN { print g / 2 }')
# v2104 stage 2 keeps only the gradient shard: backward writes each layer group's gradients into a
# one-group workspace, reduce-scattered into the shard as soon as the group is done (as stage 3),
# instead of a full-size gradient arena (3.4 MB for tiny) reduce-scattered after backward
for stage in 2 3; do
  ws=$(grep "rank 0/2 memory" "$TMP/mem$stage.txt" | grep -oE "workspace [0-9]+ B" | grep -oE "[0-9]+")
  echo "stage $stage gradient workspace: measured $ws B, one gather unit $half_gather B (full arena $(json_num "$TMP/size0.json" grads) B)"
  check "test_v2104_stage${stage}_grad_workspace_is_one_layer" within "$ws" "$half_gather"
done
mem_of() { grep "rank 0/2 memory" "$TMP/mem$1.txt" | grep -oE "$2 [0-9]+ B" | grep -oE "[0-9]+"; }
check "test_v2104_stage3_params_smaller_than_full_copy" awk -v a="$(mem_of 3 params)" -v b="$(mem_of 2 params)" 'BEGIN { exit !(a < b) }'

# v2104 prefetch_layers: 0 (gather just in time: one layer buffer) and 3 (four buffers) compute
# the same numbers as the default 1 (same collectives, same sums: losses bit-identical) and hold
# prefetch + 1 layer buffers: params(k) - params(1) = (k - 1) x one buffer (= the gradient
# workspace, also one largest group)
for k in 0 3; do
  expect "gen_zero3_prefetch$k" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,memory-planning,dp,zero3 --set v2104.prefetch_layers=$k --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/zp$k"
  $MPI "$TMP/zp$k/train" "${COMMON[@]}" --batch 2 --metrics "$TMP/np2_p$k.jsonl" > "$TMP/memp$k.txt" 2>&1
  check "test_v2104_prefetch${k}_same_losses_as_prefetch1" test "$(losses "$TMP/np2_p$k.jsonl")" = "$(losses "$TMP/np2_3.jsonl")"
  got=$(grep "rank 0/2 memory" "$TMP/memp$k.txt" | grep -oE "params [0-9]+ B" | grep -oE "[0-9]+")
  want=$(awk -v p="$(mem_of 3 params)" -v w="$ws" -v k=$k 'BEGIN { printf "%d", p + (k - 1) * w }')
  echo "stage 3 prefetch $k: params measured $got B, expected $want B"
  check "test_v2104_prefetch${k}_holds_k_plus_1_layer_buffers" test "$got" = "$want"
done

# ZeRO-3 at 3 ranks: layer groups do not split evenly in 3 (each is padded), same losses and
# weights as 1 rank with the 3 ranks' whole batch
expect np1_zero3_b3 0 "done: 4 steps" -- "$TMP/z3/train" "${COMMON[@]}" --batch 3 --metrics "$TMP/np1b3.jsonl" --ckpt-dir "$TMP/ck1b3"
expect np3_zero3 0 "rank 2/3 memory \(ZeRO stage 3\)" -- mpirun -np 3 --oversubscribe -x OMP_NUM_THREADS "$TMP/z3/train" "${COMMON[@]}" --batch 1 --metrics "$TMP/np3.jsonl" --ckpt-dir "$TMP/ck3"
check "test_v2104_stage3_np3_losses_equal_np1" close "$TMP/np1b3.jsonl" "$TMP/np3.jsonl"
expect "test_v2104_stage3_np3_weights_equal_np1" 0 "max" -- "$DIFF" "$TMP/ck1b3/step_00000004/model.safetensors" "$TMP/ck3/step_00000004" 2e-4

# elastic resume (v2175 / v2181): 2 ranks for 4 steps, then 1 rank for 4 more == 8 steps at 1 rank
expect np1_8_steps 0 "done: 8 steps" -- "$TMP/z2/train" "${COMMON[@]}" --steps 8 --batch 4 --metrics "$TMP/e1.jsonl"
expect np2_first_4 0 "done: 4 steps" -- $MPI "$TMP/z2/train" "${COMMON[@]}" --steps 8 --stop-after 4 --batch 2 --metrics "$TMP/e2.jsonl" --ckpt-dir "$TMP/eck"
expect np1_resumes_last_4 0 "resumed from .*now 1 rank" -- "$TMP/z2/train" "${COMMON[@]}" --steps 8 --batch 4 --metrics "$TMP/e2.jsonl" --ckpt-dir "$TMP/eck" --resume
check "test_v2175_resume_at_other_world_size" close "$TMP/e1.jsonl" "$TMP/e2.jsonl"
# without v2175 the same checkpoint is refused at another world size (and nothing is lost);
# without v2110 a trainer refuses to run on several ranks
expect gen_without_elastic 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,memory-planning,dp --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/noel"
expect np2_noel_first_4 0 "done: 4 steps" -- $MPI "$TMP/noel/train" "${COMMON[@]}" --steps 8 --stop-after 4 --batch 2 --ckpt-dir "$TMP/nck"
expect test_v2175_off_refuses_other_world_size 2 "saved by 2 ranks, resumed on 1: this trainer was generated without elastic resume" -- "$TMP/noel/train" "${COMMON[@]}" --steps 8 --batch 4 --ckpt-dir "$TMP/nck" --resume
check test_v2175_off_refusal_keeps_the_checkpoint test -s "$TMP/nck/step_00000004/model.safetensors"
expect test_v2175_off_same_world_size_resumes 0 "resumed from .*now 2 ranks" -- $MPI "$TMP/noel/train" "${COMMON[@]}" --steps 8 --batch 2 --ckpt-dir "$TMP/nck" --resume
expect gen_without_dp 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,memory-planning --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/nodp"
expect test_v2110_off_refuses_several_ranks 2 "generated without data parallelism, and mpirun started 2 ranks" -- $MPI "$TMP/nodp/train" "${COMMON[@]}" --steps 2 --batch 2

# v2181 elastic resume of a sharded ZeRO-3 checkpoint: saved at np=2 after 3 steps, resumed at
# np=1 and at np=3 (global batch 6 at every world size), each continues like 8 straight steps
expect gen_zero3_b6 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,memory-planning,dp,v2175,zero3 --model tiny --target cpu --batch 6 --seq 64 -o "$TMP/z36"
E8=("${COMMON[@]}" --steps 8)
expect z3_np1_8_steps 0 "done: 8 steps" -- "$TMP/z36/train" "${E8[@]}" --batch 6 --metrics "$TMP/s1.jsonl"
expect z3_np2_first_3 0 "done: 3 steps" -- $MPI "$TMP/z36/train" "${E8[@]}" --stop-after 3 --batch 3 --metrics "$TMP/s2.jsonl" --ckpt-dir "$TMP/sck"
cp "$TMP/s2.jsonl" "$TMP/s3.jsonl"; cp "$TMP/s2.jsonl" "$TMP/s4.jsonl"
cp -r "$TMP/sck" "$TMP/sck3"; cp -r "$TMP/sck" "$TMP/sckbad"; cp -r "$TMP/sck" "$TMP/sck1"
expect z3_np1_resumes_shards 0 "resumed from .*saved by tiny on 2 ranks, ZeRO stage 3; now 1 rank" -- "$TMP/z36/train" "${E8[@]}" --batch 6 --metrics "$TMP/s2.jsonl" --ckpt-dir "$TMP/sck" --resume
check "test_v2181_sharded_resume_np2_to_np1" close "$TMP/s1.jsonl" "$TMP/s2.jsonl"
expect z3_np3_resumes_shards 0 "now 3 ranks" -- mpirun -np 3 --oversubscribe -x OMP_NUM_THREADS "$TMP/z36/train" "${E8[@]}" --batch 2 --metrics "$TMP/s3.jsonl" --ckpt-dir "$TMP/sck3" --resume
check "test_v2181_sharded_resume_np2_to_np3" close "$TMP/s1.jsonl" "$TMP/s3.jsonl"
check "test_v2181_np3_writes_three_shards" test -s "$TMP/sck3/step_00000008/shard_00002.safetensors"
# ...and under another ZeRO stage of the same plan (the checkpoint's config hash leaves the ZeRO
# settings out): the np=2 stage-3 shards resumed by a stage-1 trainer at np=2
expect gen_zero1_b6 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,memory-planning,dp,v2175,zero1 --model tiny --target cpu --batch 6 --seq 64 -o "$TMP/z16"
expect z1_np2_resumes_z3_shards 0 "resumed from .*ZeRO stage 3; now 2 ranks" -- $MPI "$TMP/z16/train" "${E8[@]}" --batch 3 --metrics "$TMP/s4.jsonl" --ckpt-dir "$TMP/sck1" --resume
check "test_v2181_stage3_shards_resume_at_stage1" close "$TMP/s1.jsonl" "$TMP/s4.jsonl"
expect "test_v2181_sample_from_sharded_checkpoint" 0 "resumed from .*3 ranks" -- "$TMP/z36/train" sample --ckpt-dir "$TMP/sck3" --sample 20
# a corrupt or missing shard: one clear line, exit 2, and the checkpoint is left as it was
bad="$TMP/sckbad/step_00000003"
printf '\x55' | dd of="$bad/shard_00001.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
expect "test_v2181_corrupt_shard_refused" 2 "shard_00001.safetensors: checksum mismatch" -- $MPI "$TMP/z36/train" "${E8[@]}" --batch 3 --ckpt-dir "$TMP/sckbad" --resume
mv "$bad/shard_00001.safetensors" "$TMP/moved"
expect "test_v2181_missing_shard_refused" 2 "shard_00001.safetensors: .*incomplete" -- "$TMP/z36/train" "${E8[@]}" --batch 6 --ckpt-dir "$TMP/sckbad" --resume
mv "$TMP/moved" "$bad/shard_00001.safetensors"
check "v2181_failed_resume_leaves_the_checkpoint" test "$(ls "$TMP/sckbad")" = "$(printf 'latest\nstep_00000003')"

# FP8 + flash + ZeRO-3 at np=2: a run resumed from its sharded checkpoint at step 4 (the FP8
# scaling states travel in train_state.safetensors) gives the losses of 8 straight steps bit for bit
expect gen_fp8_zero3 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,memory-planning,dp,zero3,fp8,flash --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/f3"
expect f3_np2_8_steps 0 "done: 8 steps" -- $MPI "$TMP/f3/train" "${E8[@]}" --batch 2 --metrics "$TMP/f8a.jsonl"
expect f3_np2_first_4 0 "done: 4 steps" -- $MPI "$TMP/f3/train" "${E8[@]}" --batch 2 --stop-after 4 --metrics "$TMP/f8b.jsonl" --ckpt-dir "$TMP/f8ck"
expect f3_np2_resume 0 "resumed from .*step_00000004" -- $MPI "$TMP/f3/train" "${E8[@]}" --batch 2 --resume --metrics "$TMP/f8b.jsonl" --ckpt-dir "$TMP/f8ck"
check test_v2181_fp8_zero3_sharded_resume_is_bit_exact test "$(losses "$TMP/f8a.jsonl")" = "$(losses "$TMP/f8b.jsonl")"
check fp8_sharded_checkpoint_holds_scaling_state test -s "$TMP/f8ck/step_00000004/train_state.safetensors"

# v2104 stages 2 and 3 under gradient accumulation (each micro-batch's layer gradients
# reduce-scattered into the shard and summed there) and with fp16 and v2162 dynamic loss scaling (the
# inf/NaN check and the unscale on the reduced shard): np=2 gives np=1 stage 0's losses
expect gen_ga0 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,dp,accum,fp16,loss-scaling --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/ga0"
expect np1_ga0 0 "done: 4 steps" -- "$TMP/ga0/train" "${COMMON[@]}" --batch 4 --grad-accum 2 --metrics "$TMP/ga0.jsonl"
for stage in 2 3; do
  expect "gen_ga$stage" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,dp,accum,fp16,loss-scaling,zero$stage --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/ga$stage"
  expect "np2_ga$stage" 0 "done: 4 steps" -- $MPI "$TMP/ga$stage/train" "${COMMON[@]}" --batch 2 --grad-accum 2 --metrics "$TMP/ga$stage.jsonl"
  check "test_v2104_stage${stage}_accum_loss_scale_np2_equals_np1" close "$TMP/ga0.jsonl" "$TMP/ga$stage.jsonl"
done
finish
