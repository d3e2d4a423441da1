#!/usr/bin/env bash
# test_grpo_v2194.sh — v2194 RLHF at small scale (GRPO, runtime/train/grpo.c) on the cpu:
#   from random weights (tiny, byte tokenizer, uniform samples: ~27/256 of the bytes are in
#   "a-z "), 20 GRPO steps with the byte-set reward raise the held-out prompts' mean reward
#   (sampled at the same temperature with a fixed stream) by > 0.2 while the KL to the frozen
#   starting weights grows from 0; with --lr 0 the reward does not move (the check can fail);
#   refusals: a batch that is not a multiple of the group, a resume, GRPO + DPO at gen time.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
for i in $(seq 1 40); do
  echo "{\"prompt\": \"Question $i: say something.\", \"chosen\": \" ok\", \"rejected\": \" no\"}" >> "$TMP/p.jsonl"
done
expect "v2194_gen_data_prompts" 0 "preference examples" -- "$GEN" data --pref "$TMP/p.jsonl" -o "$TMP/pr" --val-fraction 0.2
expect "v2194_gen_grpo" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,grpo --set v2194.max_new_tokens=12 --model tiny --target cpu --batch 8 --seq 32 -o "$TMP/g"
check "v2194_audit_names_grpo" grep -q "post: GRPO on the prompts" "$TMP/g/audit.md"
"$TMP/g/train" --data "$TMP/pr" --steps 20 --lr 3e-3 --eval-every 20 --metrics "$TMP/g.jsonl" --ckpt-dir "$TMP/ck" > "$TMP/g.log" 2>&1
check "v2194_grpo_trains" grep -q "done: 20 grpo steps" "$TMP/g.log"
v0=$(sed -n 's/^eval step 0 | val reward \([0-9.]*\)/\1/p' "$TMP/g.log"); v1=$(last_metric "$TMP/g.jsonl" val_reward)
k1=$(last_metric "$TMP/g.jsonl" kl); k0=$(first_metric "$TMP/g.jsonl" kl)
check "v2194_grpo_raises_heldout_reward (val reward $v0 -> $v1, kl $k0 -> $k1)" \
  awk -v a="${v0:-nan}" -v b="${v1:-nan}" -v k0="$k0" -v k1="$k1" 'BEGIN { exit !(b > a + 0.2 && k0 == 0 && k1 > 0) }'
"$TMP/g/train" --data "$TMP/pr" --steps 3 --lr 0 --eval-every 3 --metrics "$TMP/g0.jsonl" >/dev/null 2>&1
w1=$(last_metric "$TMP/g0.jsonl" val_reward)
check "v2194_lr0_leaves_reward ($v0 -> $w1)" awk -v a="${v0:-nan}" -v b="${w1:-nan}" 'BEGIN { exit !(a == b) }'
expect "v2194_refuses_batch_not_multiple_of_group" 2 "multiple of the group size 4" -- "$TMP/g/train" --data "$TMP/pr" --steps 1 --batch 6
expect "v2194_refuses_resume" 2 "cannot resume" -- "$TMP/g/train" --data "$TMP/pr" --steps 25 --ckpt-dir "$TMP/ck" --resume
expect "v2194_conflicts_with_dpo_at_gen" 2 "both replace the loss" -- "$GEN" specs/v2500.yaml --enable adamw,grpo,dpo --model tiny --target cpu -o "$TMP/x"
finish
