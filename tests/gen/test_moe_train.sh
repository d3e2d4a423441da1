#!/usr/bin/env bash
# A mixture-of-experts model trains on the cpu target (docs/moe.md): gen emits one fused moe_fwd /
# moe_bwd op pair per MoE layer with the router and every expert's w1/w3/w2 as parameters under
# transformers' Mixtral names; tiny-moe trains on the KJV and its loss falls; the metrics log holds
# per step each expert's load (summing, per layer, to the step's tokens x top_k) and the
# load-balancing loss (within its bounds), which is part of what the step minimises: with a large
# coefficient the loads end up more even than without it; loads sum over micro-batches and
# data-parallel ranks; a stopped run resumes bit for bit; it exports as MixtralForCausalLM (a dense
# first layer is refused); the
# plan loader refuses a hand-edited MoE op (exit 2, one line). (What gen refuses for an MoE model:
# test_moe_models.sh.)
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
json() { python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
B=4; T=64; K=2; E=4; STEPS=30
SEL=(specs/v2500.yaml --enable adamw --model tiny-moe --target cpu --batch $B --seq $T)
COMMON=(--data "$TMP/data" --eval-every 0 --lr 3e-3)

expect gen_tiny_moe 0 "wrote" -- "$GEN" "${SEL[@]}" -o "$TMP/moe"
P="$TMP/moe/plan.json"
check test_moe_plan_one_op_pair_per_layer test "$(json "$P" "[o['op'] for o in p['forward'] + p['backward']].count('moe_fwd'), [o['op'] for o in p['backward']].count('moe_bwd')")" = "(2, 2)"
check test_moe_plan_no_dense_mlp test "$(json "$P" "sum('mlp.' in q['name'] for q in p['params'])")" = 0
check test_moe_plan_mixtral_names test "$(json "$P" "sorted(q['name'] for q in p['params'] if q['name'].startswith('model.layers.1.block_sparse_moe.'))[:4]")" = \
  "['model.layers.1.block_sparse_moe.experts.0.w1.weight', 'model.layers.1.block_sparse_moe.experts.0.w2.weight', 'model.layers.1.block_sparse_moe.experts.0.w3.weight', 'model.layers.1.block_sparse_moe.experts.1.w1.weight']"
check test_moe_plan_shapes test "$(json "$P" "[q['shape'] for q in p['params'] if q['name'].startswith('model.layers.0.block_sparse_moe.') and q['name'].endswith(('gate.weight', 'experts.3.w1.weight', 'experts.3.w2.weight'))]")" = "[[4, 64], [128, 64], [64, 128]]"
# the plan's parameters are the model file's count (gen size: 254,784)
check test_moe_plan_param_count test "$(json "$P" "sum(q['numel'] for q in p['params'])")" = 254784
expect test_moe_plan_attrs 0 "True" -- json "$P" "all(o['attrs']['E'] == 4 and o['attrs']['K'] == 2 and o['attrs']['H'] == 128 and o['attrs']['norm_topk'] == 1 and o['attrs']['aux_coef'] == 0.02 for o in p['forward'] if o['op'] == 'moe_fwd')"

expect moe_trains 0 "done: $STEPS steps" -- "$TMP/moe/train" "${COMMON[@]}" --steps $STEPS --metrics "$TMP/moe.jsonl"
l1=$(losses "$TMP/moe.jsonl" | head -1)
l5=$(losses "$TMP/moe.jsonl" | tail -5 | awk '{ s += $1 } END { printf "%.4f", s / NR }')
echo "tiny-moe on the KJV: loss step 1 $l1, mean of steps $((STEPS - 4))-$STEPS $l5"
# a byte model starts at ln 256 = 5.55; the dense tiny-llama drops below 3.2 in 30 such steps
check test_moe_loss_falls awk -v a="$l1" -v b="$l5" 'BEGIN { exit !(a > 5.0 && b < a - 1.5) }'

# loads: per step and layer the experts' loads sum to B*T tokens x top_k (integers, exact)
loads_ok() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
want = int(sys.argv[2])
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = [(r['step'], l, sum(r['moe_load_l%d_e%d' % (l, e)] for e in range(4))) for r in rows for l in range(2)
       if sum(r['moe_load_l%d_e%d' % (l, e)] for e in range(4)) != want]
print(len(rows), bad[:3])
sys.exit(1 if bad or not rows else 0)
EOF
}
check test_moe_loads_sum_tokens_x_k loads_ok "$TMP/moe.jsonl" $((B * T * K))
# the aux loss: coef * E * sum_e f_e P_e with sum_e f_e = top_k and sum_e P_e = 1, so in
# (0, coef * E * top_k] per layer; 2 layers
aux_ok() { metric "$1" moe_aux_loss | awk -v hi="$2" '{ n++; if (!($1 > 0 && $1 <= hi)) bad++ } END { exit !(n == '"$STEPS"' && !bad) }'; }
check test_moe_aux_loss_in_bounds aux_ok "$TMP/moe.jsonl" "$(awk 'BEGIN { print 2 * 0.02 * 4 * 2 }')"

# the aux loss is trained on: with coefficient 1 the loads over the last 10 steps are more even
# (smaller max/mean) than with coefficient 0 on the same batches
imbalance() {
  python3 - "$1" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][-10:]
tot = [sum(r['moe_load_l%d_e%d' % (l, e)] for r in rows) for l in range(2) for e in range(4)]
print('%.4f' % max(max(tot[0:4]) / (sum(tot[0:4]) / 4), max(tot[4:8]) / (sum(tot[4:8]) / 4)))
EOF
}
for c in 0 1; do
  sed "s/aux_loss_coef: 0.02/aux_loss_coef: $c/" specs/models/tiny-moe.yaml > "$TMP/tiny-moe-aux$c.yaml"
  "$GEN" specs/v2500.yaml --enable adamw --model "$TMP/tiny-moe-aux$c.yaml" --target cpu --batch $B --seq $T -o "$TMP/aux$c" >/dev/null 2>&1
  "$TMP/aux$c/train" "${COMMON[@]}" --steps $STEPS --metrics "$TMP/aux$c.jsonl" > "$TMP/aux$c.log" 2>&1
done
i0=$(imbalance "$TMP/aux0.jsonl"); i1=$(imbalance "$TMP/aux1.jsonl")
echo "max/mean expert load, last 10 steps: aux coefficient 0: $i0, 1: $i1"
check test_moe_aux_loss_balances awk -v a="$i0" -v b="$i1" 'BEGIN { exit !(b < a) }'
check test_moe_aux_coef0_no_aux_metric_term test "$(metric "$TMP/aux0.jsonl" moe_aux_loss | sort -u)" = 0

# resume: 8 steps straight == 4 steps, stop, --resume 4 more (metrics bit for bit, loads included)
"$TMP/moe/train" "${COMMON[@]}" --steps 8 --metrics "$TMP/r8.jsonl" --ckpt-dir "$TMP/ck8" > /dev/null 2>&1
"$TMP/moe/train" "${COMMON[@]}" --steps 4 --metrics "$TMP/r44.jsonl" --ckpt-dir "$TMP/ck44" > /dev/null 2>&1
"$TMP/moe/train" "${COMMON[@]}" --steps 8 --metrics "$TMP/r44.jsonl" --ckpt-dir "$TMP/ck44" --resume > /dev/null 2>&1
check test_moe_resume_bit_exact test "$(untimed "$TMP/r8.jsonl")" = "$(untimed "$TMP/r44.jsonl")"
expect test_moe_eval 0 "val [0-9.]+" -- "$TMP/moe/train" --data "$TMP/data" --steps 2 --eval-every 2 --eval-batches 2

# full recomputation (the moe_fwd replayed before its layer's backward) with the memory planner
# (state and scratch buffers sharing the arena): the same losses and loads bit for bit
expect gen_moe_recompute 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,recompute,memory-planning --model tiny-moe --target cpu --batch $B --seq $T -o "$TMP/rc"
"$TMP/rc/train" "${COMMON[@]}" --steps 8 --metrics "$TMP/rc8.jsonl" > "$TMP/rc.log" 2>&1
check test_moe_recompute_memory_planning_bit_identical test "$(untimed "$TMP/rc8.jsonl")" = "$(untimed "$TMP/r8.jsonl")"

# gradient accumulation and data parallelism (2 ranks, ZeRO-1/2/3): a step's loads are summed over
# its micro-batches and ranks
"$TMP/moe/train" "${COMMON[@]}" --steps 3 --grad-accum 2 --metrics "$TMP/ga.jsonl" > "$TMP/ga.log" 2>&1
check test_moe_loads_grad_accum2 loads_ok "$TMP/ga.jsonl" $((2 * B * T * K))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for z in zero1 zero2 zero3; do
  expect gen_moe_dp_$z 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp,$z --model tiny-moe --target cpu --batch $B --seq $T -o "$TMP/$z"
  expect moe_dp2_${z}_trains 0 "done: 3 steps" -- mpirun -np 2 "$TMP/$z/train" "${COMMON[@]}" --steps 3 --metrics "$TMP/$z.jsonl"
done
check test_moe_loads_dp2 loads_ok "$TMP/zero1.jsonl" $((2 * B * T * K))
# ZeRO-2 and -3 run the op on their layer groups (the experts' fused view inside its layer's group)
# and reduce the same gradients: losses, loads and aux bit-identical to ZeRO-1
check test_moe_zero2_equals_zero1 test "$(untimed "$TMP/zero2.jsonl")" = "$(untimed "$TMP/zero1.jsonl")"
check test_moe_zero3_equals_zero1 test "$(untimed "$TMP/zero3.jsonl")" = "$(untimed "$TMP/zero1.jsonl")"
# Hugging Face export as MixtralForCausalLM (its numerics against transformers: test_hf_io's
# hf_mixtral_*); an MoE model Mixtral does not compute (a dense first layer) is refused
expect test_moe_hf_export_mixtral 0 "exported" -- "$GEN" export "$TMP/ck8" -o "$TMP/hf"
check test_moe_hf_export_class grep -q '"MixtralForCausalLM"' "$TMP/hf/config.json"
expect test_moe_hf_init_from_export 0 "done: 1 steps" -- "$TMP/moe/train" "${COMMON[@]}" --steps 1 --init-from "$TMP/hf"
sed 's/  dropless: true/  dropless: true\n  first_dense_layers: 1/' specs/models/tiny-moe.yaml > "$TMP/tiny-moe-dense1.yaml"
"$GEN" specs/v2500.yaml --enable adamw --model "$TMP/tiny-moe-dense1.yaml" --target cpu --batch $B --seq $T -o "$TMP/d1" >/dev/null 2>&1
"$TMP/d1/train" "${COMMON[@]}" --steps 1 --ckpt-dir "$TMP/d1ck" > "$TMP/d1.log" 2>&1
expect test_moe_hf_export_refuses_dense_layer 2 "model tiny-moe is a mixture of experts that MixtralForCausalLM does not compute \(dense layers\)" \
  -- "$GEN" export "$TMP/d1ck" -o "$TMP/hf-d1"
check test_moe_hf_export_refused_no_output test ! -e "$TMP/hf-d1"

# the plan loader checks the MoE op like every op (a hand-edited plan: one line, exit 2)
edit() { python3 - "$P" "$1" "$2" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(p, open(sys.argv[2], 'w'))
EOF
}
mkdir -p "$TMP/bad1" "$TMP/bad2"
edit "$TMP/bad1/plan.json" "[o for o in p['forward'] if o['op'] == 'moe_fwd'][0]['attrs']['K'] = 5"
expect test_moe_plan_k_over_e 2 "plan.json: field 'forward\[[0-9]+\].attrs': op 'moe_fwd' needs K <= E" -- "$TMP/moe/train" --plan "$TMP/bad1/plan.json" --data "$TMP/data" --steps 1
edit "$TMP/bad2/plan.json" "[o for o in p['forward'] if o['op'] == 'moe_fwd'][0]['attrs']['E'] = 8"
expect test_moe_plan_router_too_small 2 "op 'moe_fwd' needs 512 elements in 'model.layers.0.block_sparse_moe.gate.weight', which has 256" -- "$TMP/moe/train" --plan "$TMP/bad2/plan.json" --data "$TMP/data" --steps 1

finish
