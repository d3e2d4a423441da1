#!/usr/bin/env bash
# Shared experts in the cpu MoE op (docs/moe.md "Shared experts"; numerics against an independent
# reference: tests/unit/test_moe.c): `n_shared_experts: S` gives every MoE layer one ungated SwiGLU
# MLP of S x expert_hidden on every token, added to the routed output, under DeepSeek-V3's names
# (block_sparse_moe.shared_experts.{gate,up,down}_proj.weight). The plan's parameters equal the
# model's `gen size` count (which counts the shared experts as active); tiny-moe with one shared
# expert trains; under v2109 (np 2, ep 2) the shared MLP is replicated like the router (its
# gradients all-reduced over the world) and the run equals np 2 data parallelism bit for bit.
# Refused: MixtralForCausalLM export, non-cpu targets.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
json() { python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
B=4; T=64; STEPS=10
sed "s/n_shared_experts: 0/n_shared_experts: 1/" "$ROOT/specs/models/tiny-moe.yaml" > "$TMP/tiny-moe-sh.yaml"
SEL=(specs/v2500.yaml --model "$TMP/tiny-moe-sh.yaml" --target cpu --batch $B --seq $T)
COMMON=(--data "$TMP/data" --eval-every 0 --lr 3e-3)

expect gen_moe_shared 0 "wrote" -- "$GEN" "${SEL[@]}" --enable adamw -o "$TMP/sh"
P="$TMP/sh/plan.json"
check test_moe_shared_names test "$(json "$P" "[(q['name'], q['shape']) for q in p['params'] if 'shared' in q['name'] and q['name'].startswith('model.layers.0.')]")" = \
  "[('model.layers.0.block_sparse_moe.shared_experts.gate_proj.weight', [128, 64]), ('model.layers.0.block_sparse_moe.shared_experts.up_proj.weight', [128, 64]), ('model.layers.0.block_sparse_moe.shared_experts.down_proj.weight', [64, 128])]"
check test_moe_shared_attr test "$(json "$P" "sorted(set(o['attrs'].get('Hs') for o in p['forward'] + p['backward'] if o['op'].startswith('moe_')))")" = "[128]"
# gen size counts them: total and active both grow by 2 layers x 3 x 128 x 64 = 49,152
read -r tot act < <("$GEN" size --model "$TMP/tiny-moe-sh.yaml" --hw h100-sxm --json | python3 -c "import json,sys; p=json.load(sys.stdin)['model']; print(int(p['params']), int(p['params_active']))")
echo "tiny-moe + 1 shared expert: gen size $tot total, $act active (tiny-moe: 254784 / 156480)"
check test_moe_shared_size_counts test "$tot $act" = "$((254784 + 49152)) $((156480 + 49152))"
check test_moe_shared_plan_equals_size test "$(json "$P" "sum(q['numel'] for q in p['params'])")" = "$tot"
expect moe_shared_trains 0 "done: $STEPS steps" -- "$TMP/sh/train" "${COMMON[@]}" --steps $STEPS --metrics "$TMP/sh.jsonl" --ckpt-dir "$TMP/shck"
l1=$(losses "$TMP/sh.jsonl" | head -1); lN=$(losses "$TMP/sh.jsonl" | tail -1)
echo "tiny-moe + 1 shared expert: loss step 1 $l1, step $STEPS $lN"
check test_moe_shared_loss_falls awk -v a="$l1" -v b="$lN" 'BEGIN { exit !(a > 5.0 && b < a - 0.5) }'
expect test_moe_shared_export_refused 2 "MixtralForCausalLM does not compute \(shared experts\)" -- "$GEN" export "$TMP/shck" -o "$TMP/hf"
for t in sim sm_90; do
  expect test_moe_shared_refused_on_$t 2 "model tiny-moe \(mixture of experts\): (shared experts are in the cpu op only|no $t trainer runs)" \
    -- "$GEN" specs/v2500.yaml --model "$TMP/tiny-moe-sh.yaml" --target $t --enable adamw -o "$TMP/r-$t"
  check test_moe_shared_refused_on_${t}_no_output test ! -e "$TMP/r-$t"
done
if command -v mpirun >/dev/null; then
  MPI2="mpirun -np 2 -x OMP_NUM_THREADS"
  expect gen_sh_ep2 0 "wrote" -- "$GEN" "${SEL[@]}" --enable adamw,dp,ep -o "$TMP/ep"
  expect gen_sh_dp 0 "wrote" -- "$GEN" "${SEL[@]}" --enable adamw,dp -o "$TMP/dp"
  $MPI2 "$TMP/dp/train" "${COMMON[@]}" --steps 6 --metrics "$TMP/dp.jsonl" > "$TMP/dp.log" 2>&1
  $MPI2 "$TMP/ep/train" "${COMMON[@]}" --steps 6 --metrics "$TMP/ep.jsonl" > "$TMP/ep.log" 2>&1
  check test_v2109_shared_ep2_trains grep -q "done: 6 steps" "$TMP/ep.log"
  same() { untimed "$1" | sed -E 's/"moe_ep_[a-z0-9_]*":[^,}]*,?//g; s/,}/}/g'; }
  check test_v2109_shared_ep2_equals_dp_np2_bitwise test "$(same "$TMP/ep.jsonl")" = "$(same "$TMP/dp.jsonl")"
else
  echo "FAIL: mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; FAIL=$((FAIL + 1))
fi
finish
