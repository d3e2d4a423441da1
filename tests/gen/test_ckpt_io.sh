#!/usr/bin/env bash
# Checkpoint I/O: v2179 async checkpoints in the trainer — the files written by the background
# writer are byte-identical to a blocking trainer's (state.json but for its saved_unix clock and
# the plan copy's checksum), a resume from them continues bit-exactly, and the step is held up
# less (metrics ckpt_s, summed).
# v2180 incremental checkpoints: 10 checkpoints of a tiny run (every step, full_every 5: two full,
# eight XOR+zstd deltas) against 10 full ones — the size ratio measured (du), at the plan's LR and
# at a fine-tuning LR (1e-5); a resume from a delta continues bit-exactly; keep=3 keeps the full
# base of the kept deltas too.
# v2181: a ZeRO-1 checkpoint of mpirun -np 2 (two shards) merged by `gen consolidate` into one
# file set; resuming from it under np=2 gives the same losses as resuming from the shards and as
# the straight run (the merge is lossless), and it resumes on one rank (v2175 elastic plan).
# Tiny model, B=16 x T=64, one thread; ~35 s.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
unset HYP_FAULT_INJECT
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SEL=adamw,clip
G=(specs/v2500.yaml --model tiny --target cpu --batch 16 --seq 64)
cd "$ROOT"
expect gen_plain 0 "wrote" -- "$GEN" "${G[@]}" --enable $SEL -o "$TMP/b"
expect gen_v2179 0 "wrote" -- "$GEN" "${G[@]}" --enable $SEL,async-ckpt -o "$TMP/a"
check test_v2179_plan_has_async grep -q '"async":	1' "$TMP/a/plan.json"
C=(--data "$TMP/data" --seq 64 --eval-every 0)
expect v2179_async_run 0 "done: 16 steps" -- "$TMP/a/train" "${C[@]}" --steps 16 --ckpt-dir "$TMP/cka" --ckpt-every 2 --keep 0 --metrics "$TMP/a.jsonl"
expect v2179_blocking_run 0 "done: 16 steps" -- "$TMP/b/train" "${C[@]}" --steps 16 --ckpt-dir "$TMP/ckb" --ckpt-every 2 --keep 0 --metrics "$TMP/b.jsonl"
same_ckpts() {
  local n=0
  for d in "$TMP"/ckb/step_*; do
    s=$(basename "$d")
    for f in model.safetensors optimizer.safetensors; do cmp -s "$d/$f" "$TMP/cka/$s/$f" || return 1; n=$((n + 1)); done
    # state.json equal but for the save time and the plan copy's checksum (the two plans differ
    # in checkpoint.async, which the plan's state hash leaves out)
    python3 -c "import json,sys; f=lambda p: {k: v for k, v in json.load(open(p)).items() if k not in ('saved_unix', 'plan_json')}; sys.exit(f(sys.argv[1]) != f(sys.argv[2]))" \
      "$d/state.json" "$TMP/cka/$s/state.json" || return 1
  done
  echo "$n files compared"; test $n = 16
}
check test_v2179_async_files_byte_identical_to_blocking same_ckpts
check test_v2179_latest test "$(cat "$TMP/cka/latest")" = step_00000016
sum_ckpt() { metric "$1" ckpt_s | awk '{ s += $1 } END { printf "%.4f", s }'; }
sa=$(sum_ckpt "$TMP/a.jsonl"); sb=$(sum_ckpt "$TMP/b.jsonl")
echo "v2179 checkpoint stall over 7 saves (metrics ckpt_s, summed): async $sa s, blocking $sb s"
check test_v2179_async_stalls_less awk -v a="$sa" -v b="$sb" 'BEGIN { exit !(a < b) }'
# resume from an async checkpoint in the middle: the losses of the straight run
rm -rf "$TMP/cka2"; mkdir -p "$TMP/cka2"; cp -r "$TMP/cka/step_00000008" "$TMP/cka2/"; echo step_00000008 > "$TMP/cka2/latest"
head -8 "$TMP/a.jsonl" > "$TMP/r.jsonl"
expect v2179_resume 0 "resumed from .*step_00000008 at step 8" -- "$TMP/a/train" "${C[@]}" --steps 16 --ckpt-dir "$TMP/cka2" --resume --metrics "$TMP/r.jsonl"
check test_v2179_resume_bit_exact test "$(losses "$TMP/r.jsonl")" = "$(losses "$TMP/a.jsonl")"

# v2180
expect gen_v2180 0 "wrote" -- "$GEN" "${G[@]}" --enable $SEL,incremental-ckpt --set v2180.full_every=5 -o "$TMP/i"
check test_v2180_plan_has_full_every grep -q '"full_every":	5' "$TMP/i/plan.json"
ratio() { # ratio NAME LR: 10 checkpoints incremental vs full; prints the ratio
  "$TMP/i/train" "${C[@]}" --steps 10 --lr $2 --ckpt-dir "$TMP/$1_i" --ckpt-every 1 --keep 0 --metrics "$TMP/$1_i.jsonl" >/dev/null 2>&1 || return 1
  "$TMP/b/train" "${C[@]}" --steps 10 --lr $2 --ckpt-dir "$TMP/$1_f" --ckpt-every 1 --keep 0 --metrics "$TMP/$1_f.jsonl" >/dev/null 2>&1 || return 1
  local bi bf
  bi=$(du -sb "$TMP/$1_i" | cut -f1); bf=$(du -sb "$TMP/$1_f" | cut -f1)
  awk -v a="$bi" -v b="$bf" -v lr="$2" 'BEGIN { printf "v2180 10 checkpoints at lr %s: incremental %d bytes, full %d bytes, ratio %.3f\n", lr, a, b, a / b > "/dev/stderr"; printf "%.4f", a / b }'
}
r1=$(ratio pre 2e-3); r2=$(ratio ft 1e-5)
check test_v2180_ratio_below_1_pretraining awk -v r="$r1" 'BEGIN { exit !(r > 0 && r < 0.95) }'
check test_v2180_ratio_smaller_at_fine_tuning_lr awk -v a="$r2" -v b="$r1" 'BEGIN { exit !(a > 0 && a < b) }'
check test_v2180_deltas_written test -e "$TMP/pre_i/step_00000002/model.safetensors.zdelta" -a -e "$TMP/pre_i/step_00000006/model.safetensors" -a ! -e "$TMP/pre_i/step_00000007/model.safetensors"
# the plan copy (ckpt.h) once per full checkpoint: a delta keeps none and reads its base's
check test_v2180_plan_copy_in_full_checkpoints_only test -e "$TMP/pre_i/step_00000001/plan.json" -a -e "$TMP/pre_i/step_00000006/plan.json" \
  -a "$(ls "$TMP"/pre_i/step_*/plan.json | wc -l)" = 2
expect v2180_export_delta_alone 0 "exported" -- "$GEN" export "$TMP/pre_i/step_00000004" -o "$TMP/hf_delta"
check test_v2180_same_losses test "$(losses "$TMP/pre_i.jsonl")" = "$(losses "$TMP/pre_f.jsonl")"
# resume from step 4, a delta against step 1
rm -rf "$TMP/res"; mkdir -p "$TMP/res"; cp -r "$TMP/pre_i/step_00000001" "$TMP/pre_i/step_00000004" "$TMP/res/"; echo step_00000004 > "$TMP/res/latest"
head -4 "$TMP/pre_i.jsonl" > "$TMP/res.jsonl"
expect v2180_resume_from_delta 0 "resumed from .*step_00000004 at step 4" -- "$TMP/i/train" "${C[@]}" --steps 10 --lr 2e-3 --ckpt-dir "$TMP/res" --resume --metrics "$TMP/res.jsonl"
check test_v2180_resume_from_delta_bit_exact test "$(losses "$TMP/res.jsonl")" = "$(losses "$TMP/pre_i.jsonl")"
check test_v2180_no_restore_temp_left test -z "$(ls -A "$TMP/res" | grep tmp)"
expect v2180_keep3 0 "done: 10 steps" -- "$TMP/i/train" "${C[@]}" --steps 10 --ckpt-dir "$TMP/k3" --ckpt-every 1 --keep 3
check test_v2180_keep3_keeps_the_base test "$(ls "$TMP/k3" | tr '\n' ' ')" = "latest step_00000006 step_00000008 step_00000009 step_00000010 "

# v2181
MPI="mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS"
expect gen_v2181 0 "wrote" -- "$GEN" specs/v2500.yaml --model tiny --target cpu --batch 8 --seq 64 --enable $SEL,dp,zero1,v2175 -o "$TMP/z"
expect v2181_straight_np2 0 "done: 12 steps" -- $MPI "$TMP/z/train" "${C[@]}" --batch 8 --steps 12 --metrics "$TMP/z12.jsonl"
expect v2181_sharded_np2 0 "done: 6 steps" -- $MPI "$TMP/z/train" "${C[@]}" --batch 8 --steps 6 --ckpt-dir "$TMP/zs" --metrics "$TMP/z6.jsonl"
check test_v2181_two_shards test -e "$TMP/zs/step_00000006/shard_00001.safetensors" -a ! -e "$TMP/zs/step_00000006/model.safetensors"
expect v2181_consolidate 0 "consolidated .*2 shards \(ZeRO stage 1\) -> 52 tensors with 2 optimizer states" -- "$GEN" consolidate "$TMP/zs" -o "$TMP/zc" --plan "$TMP/z/plan.json"
check test_v2181_one_file_set test -e "$TMP/zc/step_00000006/model.safetensors" -a -e "$TMP/zc/step_00000006/optimizer.safetensors" -a ! -e "$TMP/zc/step_00000006/shard_00000.safetensors" -a "$(cat "$TMP/zc/latest")" = step_00000006
check test_v2181_plan_copy_in_shards_and_consolidated sh -c "cmp -s '$TMP/zs/step_00000006/plan.json' '$TMP/z/plan.json' && cmp -s '$TMP/zc/step_00000006/plan.json' '$TMP/z/plan.json'"
cp "$TMP/z6.jsonl" "$TMP/rs.jsonl"; cp "$TMP/z6.jsonl" "$TMP/rc.jsonl"
cp -r "$TMP/zc" "$TMP/zc_np2"; cp -r "$TMP/zc" "$TMP/zc_np1" # each resume writes its own checkpoints
expect v2181_resume_shards_np2 0 "resumed from .*zs/step_00000006 at step 6" -- $MPI "$TMP/z/train" "${C[@]}" --batch 8 --steps 12 --ckpt-dir "$TMP/zs" --resume --metrics "$TMP/rs.jsonl"
expect v2181_resume_consolidated_np2 0 "resumed from .*zc_np2/step_00000006 at step 6" -- $MPI "$TMP/z/train" "${C[@]}" --batch 8 --steps 12 --ckpt-dir "$TMP/zc_np2" --resume --metrics "$TMP/rc.jsonl"
check test_v2181_consolidated_resume_equals_shards_and_straight bash -c "test \"\$(grep -o '\"loss\":[^,]*' '$TMP/rc.jsonl')\" = \"\$(grep -o '\"loss\":[^,]*' '$TMP/rs.jsonl')\" && test \"\$(grep -o '\"loss\":[^,]*' '$TMP/rc.jsonl')\" = \"\$(grep -o '\"loss\":[^,]*' '$TMP/z12.jsonl')\""
expect v2181_consolidated_resumes_on_1_rank 0 "resumed from .*zc/step_00000006 at step 6 .*now 1 rank\)" -- "$TMP/z/train" "${C[@]}" --batch 8 --steps 8 --ckpt-dir "$TMP/zc" --resume
expect v2181_consolidate_plan_beside 0 "consolidated" -- bash -c "cp -r '$TMP/zs' '$TMP/z/ckpt' && '$GEN' consolidate '$TMP/z/ckpt' -o '$TMP/zc2'"
expect v2181_consolidate_full_refused 2 "not a sharded checkpoint .*one file set already" -- "$GEN" consolidate "$TMP/zc" -o "$TMP/zc3" --plan "$TMP/z/plan.json"
check test_v2181_refusal_wrote_nothing test ! -e "$TMP/zc3"
expect v2181_consolidate_no_o 2 "needs -o DIR" -- "$GEN" consolidate "$TMP/zs"
expect gen_other_model 0 "wrote" -- "$GEN" specs/v2500.yaml --model tiny-llama --target cpu --batch 8 --seq 64 --enable $SEL -o "$TMP/ol"
expect v2181_consolidate_wrong_plan 2 "gen consolidate: .*(different model|no optimizer state tensors named after a parameter of the plan)" -- "$GEN" consolidate "$TMP/zs" -o "$TMP/zc4" --plan "$TMP/ol/plan.json"
check test_v2181_wrong_plan_wrote_nothing test ! -e "$TMP/zc4/latest"
finish
