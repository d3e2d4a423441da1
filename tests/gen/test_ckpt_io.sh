#!/usr/bin/env bash
# Checkpoint I/O: v2179 async checkpoints in the trainer — the files written by the background
# writer are byte-identical to a blocking trainer's (state.json but for its saved_unix clock), a
# resume from them continues bit-exactly, and the step is held up less (metrics ckpt_s, summed).
# Tiny model, B=16 x T=64, one thread; ~15 s.
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
finish
