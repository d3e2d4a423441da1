#!/usr/bin/env bash
# v2132 state_dtype q8 (8-bit block-wise quantized AdamW states, bitsandbytes' AdamW8bit) through
# the whole trainer: `gen --set v2132.state_dtype=q8` makes the plan's optimizer kind adamw8bit
# with m and v packed per tensor (ceil(n/256) absmax floats + n uint8 codes); gen refuses it beside
# a replacement optimizer and under ZeRO (the sim device: test_v2132_q8_dev.sh); on the cpu backend
# the trainer's memory line shows the optimizer state the plan lays out (2.03 B/param for the 8-bit
# tensors, 8 for the fp32-rule ones: the embeddings and tensors under 4096 elements), training on tiny
# keeps the loss decrease of the fp32-state run, and a stopped run resumes bit for bit. (The step
# itself against the published algorithm, bit for bit: test_adamw8_v2132.)
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
DIFF="$BUILD/tests/st_diff"
STEPS=60
# a fixed corpus, as the other trainer tests (quantizing every tensor diverged on the specs' text of
# commit 148a19c: docs/optimizer-8bit.md "Why some tensors keep fp32 states")
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
COMMON=(--data "$TMP/data" --seq 64 --eval-every 0 --batch 4)
SEL=(specs/v2500.yaml --enable adamw --set v2132.weight_decay=0.1 --model tiny --batch 4 --seq 64)
json() { python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

expect gen_q8 0 "wrote" -- "$GEN" "${SEL[@]}" --set v2132.state_dtype=q8 --target cpu -o "$TMP/q8"
expect gen_f32 0 "wrote" -- "$GEN" "${SEL[@]}" --target cpu -o "$TMP/f32"
check test_v2132_q8_plan_kind test "$(json "$TMP/q8/plan.json" "p['optimizer']['kind'] + ' ' + p['optimizer']['shard']")" = "adamw8bit matrix"
# packed per tensor, except the tensors of the rule-f32 groups (under q8_min_size 4096 elements, the
# embeddings): plain fp32 m and v, as bitsandbytes' min_8bit_size and StableEmbedding
RULE="{g['name']: g.get('rule', '') for g in p['optimizer']['groups']}"
check test_v2132_q8_packed_numel test "$(json "$TMP/q8/plan.json" "all(s['numel'][i] == (q['numel'] if $RULE[q['group']] == 'f32' else (q['numel'] + 255) // 256 + (q['numel'] + 3) // 4) for s in p['optimizer']['state'] for i, q in enumerate(p['params']))")" = True
check test_v2132_q8_f32_rule_tensors test "$(json "$TMP/q8/plan.json" "sorted(set(q['numel'] < 4096 or 'wte' in q['name'] or 'wpe' in q['name'] for q in p['params'] if $RULE[q['group']] == 'f32')) + sorted(set(q['numel'] < 4096 or 'wte' in q['name'] or 'wpe' in q['name'] for q in p['params'] if $RULE[q['group']] != 'f32'))")" = "[True, False]"
expect gen_q8_all 0 "wrote" -- "$GEN" "${SEL[@]}" --set v2132.state_dtype=q8 --set v2132.q8_min_size=0 --set v2132.q8_embeddings=q8 --target cpu -o "$TMP/q8all"
check test_v2132_q8_all_packed test "$(json "$TMP/q8all/plan.json" "[g.get('rule', '') for g in p['optimizer']['groups']]")" = "['', '']"
expect test_v2132_q8_audit 0 "8-bit AdamW states" -- "$GEN" audit "$TMP/q8"
expect test_v2132_q8_refuses_lion 2 "replaces AdamW" -- "$GEN" "${SEL[@]}" --enable lion --set v2132.state_dtype=q8 --target cpu -o "$TMP/x1"
expect test_v2132_q8_refuses_zero1 2 "ZeRO stage 1 shards" -- "$GEN" "${SEL[@]}" --enable dp,zero1 --set v2132.state_dtype=q8 --target cpu -o "$TMP/x2"

# gen size --opt-state: optimizer bytes per parameter (fp32 training: m, v; bf16: + fp32 master)
sz() { "$GEN" size --model gpt2-124m --hw h100-sxm --dtype "$1" --opt-state "$2" --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('%.3f' % (d['hardware'][0]['memory']['optimizer'] / d['model']['params']))"; }
# gpt2-124m under q8: the embeddings (50304 x 768 + 1024 x 768) and the 4 x 768 + 2304 + 768 + 3072
# + 768 = 9984 vector floats of each of 12 layers (+ 2 x 768 final norm) keep 8 B (39548928 of
# 124439808 parameters), the rest 2 x (1 + 4/256): (8 x 39548928 + 2.03125 x 84890880) / 124439808
check test_v2132_q8_size_fp32 test "$(sz fp32 f32) $(sz fp32 q8)" = "8.000 3.928"
check test_v2132_q8_size_bf16 test "$(sz bf16 f32) $(sz bf16 q8)" = "12.000 7.928"
expect test_v2132_q8_size_rejects_bad_state 2 "is not one of f32 \| q8" -- "$GEN" size --model gpt2-124m --hw h100-sxm --opt-state q4

# optimizer-state bytes per parameter from the trainer's memory line
nparams=$(json "$TMP/q8/plan.json" "sum(q['numel'] for q in p['params'])")
bpp() { grep "rank 0/1 memory" "$1" | grep -oE "optimizer [0-9]+ B" | grep -oE "[0-9]+" | awk -v n="$nparams" '{ printf "%.3f", $1 / n }'; }
expect q8_trains 0 "done: $STEPS steps" -- "$TMP/q8/train" "${COMMON[@]}" --steps $STEPS --metrics "$TMP/q8.jsonl" --ckpt-dir "$TMP/ck"
"$TMP/q8/train" "${COMMON[@]}" --steps 1 > "$TMP/q8mem.txt" 2>&1
expect f32_trains 0 "done: $STEPS steps" -- "$TMP/f32/train" "${COMMON[@]}" --steps $STEPS --metrics "$TMP/f32.jsonl"
"$TMP/f32/train" "${COMMON[@]}" --steps 1 > "$TMP/f32mem.txt" 2>&1
bq=$(bpp "$TMP/q8mem.txt"); bf=$(bpp "$TMP/f32mem.txt")
echo "optimizer-state bytes per parameter ($nparams params, tiny): q8 $bq, f32 $bf"
# q8: the plan's state floats (2 x (1 code + 4/256 absmax) per 8-bit parameter, 8 B per fp32-rule
# one) x 4 B / params, plus at most each tensor's 16-float alignment of each of the two states
want=$(json "$TMP/q8/plan.json" "'%.4f %.4f' % (8.0 * sum(p['optimizer']['state'][0]['numel']) / $nparams, 2 * 16 * 4.0 * len(p['params']) / $nparams)")
echo "q8 plan: $want (bytes/param of state, alignment allowance)"
check test_v2132_q8_state_bytes_per_param awk -v a="$bq" -v b="$bf" -v w="${want% *}" -v al="${want#* }" 'BEGIN { exit !(a >= w - 0.0005 && a <= w + al + 0.0005 && w > 2.03 && w < 8 && b >= 8.0 && b <= 8.05) }'

# the loss: both runs see the same batches; the 8-bit states change each step by the map's code
# spacing (no closed-form bound on the loss after many steps), so the criterion is the paper's claim
# in measured form: over the last 10 steps, q8's mean loss is within 5% of the f32 run's decrease
# from step 1 of the f32 run's mean
mean10() { losses "$1" | tail -10 | awk '{ s += $1 } END { printf "%.4f", s / NR }'; }
l1=$(losses "$TMP/f32.jsonl" | head -1); mf=$(mean10 "$TMP/f32.jsonl"); mq=$(mean10 "$TMP/q8.jsonl")
echo "loss: step 1 $l1; mean of steps $((STEPS - 9))-$STEPS: f32 states $mf, q8 states $mq"
check test_v2132_q8_loss_close_to_f32 awk -v a="$l1" -v f="$mf" -v q="$mq" 'BEGIN { d = q - f; if (d < 0) d = -d; exit !(f < a - 1.0 && d <= 0.05 * (a - f)) }'
check test_v2132_q8_differs_from_f32 test "$(losses "$TMP/q8.jsonl" | tail -1)" != "$(losses "$TMP/f32.jsonl" | tail -1)"

# resume: 8 steps stopped after 4 and resumed == 8 straight (the packed codes and absmax saved raw)
expect q8_8 0 "done: 8 steps" -- "$TMP/q8/train" "${COMMON[@]}" --steps 8 --metrics "$TMP/s.jsonl" --ckpt-dir "$TMP/cs"
expect q8_first_4 0 "done: 4 steps" -- "$TMP/q8/train" "${COMMON[@]}" --steps 8 --stop-after 4 --metrics "$TMP/r.jsonl" --ckpt-dir "$TMP/cr"
expect q8_resumes 0 "resumed from" -- "$TMP/q8/train" "${COMMON[@]}" --steps 8 --metrics "$TMP/r.jsonl" --ckpt-dir "$TMP/cr" --resume
check test_v2132_q8_resume_losses_bit_exact test "$(losses "$TMP/r.jsonl")" = "$(losses "$TMP/s.jsonl")"
expect test_v2132_q8_resume_weights_bit_exact 0 "max" -- "$DIFF" "$TMP/cs/step_00000008/model.safetensors" "$TMP/cr/step_00000008/model.safetensors" 0
check test_v2132_q8_resume_states_bit_exact cmp -s "$TMP/cs/step_00000008/optimizer.safetensors" "$TMP/cr/step_00000008/optimizer.safetensors"
check test_v2132_q8_checkpoint_holds_packed_states grep -qa "transformer.h.0.attn.c_attn.weight.state1_q8\"" "$TMP/cr/step_00000008/optimizer.safetensors"
finish
