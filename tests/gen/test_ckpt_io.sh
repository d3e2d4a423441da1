#!/usr/bin/env bash
# Checkpoint I/O: v2179 async checkpoints in the trainer — the files written by the background
# writer are byte-identical to a blocking trainer's (state.json but for its saved_unix clock), a
# resume from them continues bit-exactly, and the step is held up less (metrics ckpt_s, summed).
# v2180 incremental checkpoints: 10 checkpoints of a tiny run (every step, full_every 5: two full,
# eight XOR+zstd deltas) against 10 full ones — the size ratio measured (du), at the plan's LR and
# at a fine-tuning LR (1e-5); a resume from a delta continues bit-exactly; keep=3 keeps the full
# base of the kept deltas too.
# Tiny model, B=16 x T=64, one thread; ~25 s.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
unset HYP_FAULT_INJECT
cat "$ROOT"/specs/*/*.yaml > "$TMP/corpus.txt"
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
    diff <(grep -v saved_unix "$d/state.json") <(grep -v saved_unix "$TMP/cka/$s/state.json") >/dev/null || return 1
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
check test_v2180_same_losses test "$(losses "$TMP/pre_i.jsonl")" = "$(losses "$TMP/pre_f.jsonl")"
# resume from step 4, a delta against step 1
rm -rf "$TMP/res"; mkdir -p "$TMP/res"; cp -r "$TMP/pre_i/step_00000001" "$TMP/pre_i/step_00000004" "$TMP/res/"; echo step_00000004 > "$TMP/res/latest"
head -4 "$TMP/pre_i.jsonl" > "$TMP/res.jsonl"
expect v2180_resume_from_delta 0 "resumed from .*step_00000004 at step 4" -- "$TMP/i/train" "${C[@]}" --steps 10 --lr 2e-3 --ckpt-dir "$TMP/res" --resume --metrics "$TMP/res.jsonl"
check test_v2180_resume_from_delta_bit_exact test "$(losses "$TMP/res.jsonl")" = "$(losses "$TMP/pre_i.jsonl")"
check test_v2180_no_restore_temp_left test -z "$(ls -A "$TMP/res" | grep tmp)"
expect v2180_keep3 0 "done: 10 steps" -- "$TMP/i/train" "${C[@]}" --steps 10 --ckpt-dir "$TMP/k3" --ckpt-every 1 --keep 3
check test_v2180_keep3_keeps_the_base test "$(ls "$TMP/k3" | tr '\n' ' ')" = "latest step_00000006 step_00000008 step_00000009 step_00000010 "
finish
