#!/usr/bin/env bash
# v2140 norm placement through gen and the trainer: `--enable norm-placement --set
# v2140.placement=pre|post|sandwich` is recorded as a decision in the audit; pre leaves the plan
# exactly as it was (same ops and params); post keeps the param count, sandwich adds two norms per
# layer (GPT-2: ln_attn_out/ln_mlp_out with bias; Llama: Gemma-2's post_attention/pre_feedforward/
# post_feedforward_layernorm); post-LN and sandwich GPT-2 and Llama train a few steps on cpu (loss
# falls) and on sim (losses equal cpu's within 1e-4 relative: the same fp32 math in two summation
# orders over 12 AdamW steps, docs/test-tolerances.md E2 + E3: 2e-5 for <= 8 steps, growing at most
# linearly: <= 3e-5; a norm applied at the wrong place or with the wrong eps/affine moves the loss
# by >= 1e-3). Forward/backward exactness against
# PyTorch is in test_reference (reference_ref-gpt2_v2140_*). A bad placement is refused (exit 2).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/corpus.txt" 50000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
json() { python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
NP=(--enable adamw,norm-placement --batch 2 --seq 16)

# --- gen: decisions, params, pre = unchanged ----------------------------------------------------
expect gen_base 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny --target cpu --batch 2 --seq 16 -o "$TMP/base"
expect gen_pre 0 "wrote" -- "$GEN" specs/v2500.yaml "${NP[@]}" --set v2140.placement=pre --model tiny --target cpu -o "$TMP/pre"
check test_v2140_pre_leaves_ops_and_params_unchanged test "$(json "$TMP/base/plan.json" "[o['op'] for o in p['forward']+p['backward']], [q['name'] for q in p['params']]")" = "$(json "$TMP/pre/plan.json" "[o['op'] for o in p['forward']+p['backward']], [q['name'] for q in p['params']]")"
for m in tiny tiny-llama; do
  for pl in post sandwich; do
    expect gen_${m}_$pl 0 "wrote" -- "$GEN" specs/v2500.yaml "${NP[@]}" --set v2140.placement=$pl --model $m --target cpu -o "$TMP/$m-$pl"
    expect gen_sim_${m}_$pl 0 "rendered for sim" -- "$GEN" specs/v2500.yaml "${NP[@]}" --set v2140.placement=$pl --model $m --target sim -o "$TMP/sim-$m-$pl"
  done
done
expect test_v2140_audit_records_the_decision 0 "model.norm_placement.*post" -- "$GEN" audit "$TMP/tiny-post"
nbase=$(json "$TMP/base/plan.json" "sum(q['numel'] for q in p['params'])")
npost=$(json "$TMP/tiny-post/plan.json" "sum(q['numel'] for q in p['params'])")
nsand=$(json "$TMP/tiny-sandwich/plan.json" "sum(q['numel'] for q in p['params'])")
L=$(json "$TMP/base/plan.json" "p['model']['L']"); C=$(json "$TMP/base/plan.json" "p['model']['C']")
check test_v2140_post_same_param_count test "$npost" = "$nbase"
check test_v2140_sandwich_adds_two_layernorms_per_layer test "$nsand" = "$((nbase + L * 4 * C))"
check test_v2140_sandwich_gpt2_names grep -q '"transformer.h.0.ln_mlp_out.bias"' "$TMP/tiny-sandwich/plan.json"
check test_v2140_sandwich_llama_gemma2_names grep -q '"model.layers.0.post_feedforward_layernorm.weight"' "$TMP/tiny-llama-sandwich/plan.json"
check test_v2140_sandwich_llama_pre_feedforward grep -q '"model.layers.0.pre_feedforward_layernorm.weight"' "$TMP/tiny-llama-sandwich/plan.json"
expect test_v2140_bad_placement_refused 2 "v2140" -- "$GEN" specs/v2500.yaml "${NP[@]}" --set v2140.placement=middle --model tiny --target cpu -o "$TMP/bad"
check test_v2140_bad_placement_no_output test ! -e "$TMP/bad"

# --- train: cpu loss falls, sim equals cpu ------------------------------------------------------
for m in tiny tiny-llama; do
  for pl in post sandwich; do
    expect cpu_${m}_$pl 0 "done: 12 steps" -- "$TMP/$m-$pl/train" --data "$TMP/data" --steps 12 --eval-every 0 --lr 1e-3 --metrics "$TMP/$m-$pl.jsonl"
    first=$(losses "$TMP/$m-$pl.jsonl" | head -1); last=$(losses "$TMP/$m-$pl.jsonl" | tail -1)
    echo "v2140 $m $pl cpu: loss $first -> $last over 12 steps"
    check test_v2140_${m}_${pl}_cpu_loss_falls awk -v a="$first" -v b="$last" 'BEGIN { exit !(a + 0 > 0 && b < a - 0.3) }'
    expect sim_${m}_$pl 0 "backend: sim" -- "$TMP/sim-$m-$pl/train" --data "$TMP/data" --steps 12 --eval-every 0 --lr 1e-3 --metrics "$TMP/sim-$m-$pl.jsonl"
    check test_v2140_${m}_${pl}_sim_matches_cpu bash -c "paste <(grep -o '\"loss\":[^,]*' '$TMP/sim-$m-$pl.jsonl' | cut -d: -f2) <(grep -o '\"loss\":[^,]*' '$TMP/$m-$pl.jsonl' | cut -d: -f2) | awk '{ n++; d = \$1 - \$2; if (d < 0) d = -d; if (d > 1e-4 * \$2) bad = 1 } END { exit bad || n != 12 }'"
  done
done
finish
