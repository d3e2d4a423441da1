#!/usr/bin/env bash
# Capacity with token dropping in the cpu MoE op (docs/moe.md "Capacity"; the op's numerics against
# an independent reference: tests/unit/test_moe.c): a model with `capacity_factor` instead of
# `dropless: true` gets attrs.capacity on its moe ops, trains, and logs per step and layer
# `moe_dropped_l<layer>`, the routed assignments dropped over capacity. On one rank and one
# micro-batch that count is exactly sum_e max(0, load_e - cap), cap = ceil(cf * B*T * top_k / E):
# the loads are the router's choices before dropping and every expert keeps its first cap. Under
# v2109 expert parallelism (np 2, ep 2) every rank drops from its own routing before the dispatch,
# so the run equals the np 2 data-parallel run without ep bit for bit — losses, norms, loads,
# drops (the argument of test_ep_v2109.sh, with the dropped rows simply not sent: the all-to-all
# bytes are test_ep_v2109's formula over the kept rows). Refused: the
# export as MixtralForCausalLM (transformers' Mixtral is dropless) and any non-cpu target.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
json() { python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
B=4; T=64; K=2; E=4; CF=1.0; STEPS=10
sed "s/dropless: true/capacity_factor: $CF/" "$ROOT/specs/models/tiny-moe.yaml" > "$TMP/tiny-moe-cap.yaml"
SEL=(specs/v2500.yaml --model "$TMP/tiny-moe-cap.yaml" --target cpu --batch $B --seq $T)
COMMON=(--data "$TMP/data" --eval-every 0 --lr 3e-3)

expect gen_moe_capacity 0 "wrote" -- "$GEN" "${SEL[@]}" --enable adamw -o "$TMP/cap"
check test_moe_capacity_plan_attr test "$(json "$TMP/cap/plan.json" "sorted(set(o['attrs'].get('capacity') for o in p['forward'] + p['backward'] if o['op'].startswith('moe_')))")" = "[1.0]"
expect moe_capacity_trains 0 "done: $STEPS steps" -- "$TMP/cap/train" "${COMMON[@]}" --steps $STEPS --metrics "$TMP/cap.jsonl" --ckpt-dir "$TMP/capck"
l1=$(losses "$TMP/cap.jsonl" | head -1); lN=$(losses "$TMP/cap.jsonl" | tail -1)
echo "tiny-moe capacity_factor $CF: loss step 1 $l1, step $STEPS $lN"
check test_moe_capacity_loss_falls awk -v a="$l1" -v b="$lN" 'BEGIN { exit !(a > 5.0 && b < a - 0.5) }'
# every step and layer: dropped == sum_e max(0, load_e - cap), some drops on the run, loads sum B*T*K
python3 - "$TMP/cap.jsonl" $B $T $K $E $CF > "$TMP/drops.txt" <<'EOF'
import json, math, sys
f, B, T, K, E, cf = sys.argv[1], *map(int, sys.argv[2:6]), float(sys.argv[6])
cap = math.ceil(cf * B * T * K / E)
rows = [json.loads(l) for l in open(f)]
bad, tot = [], 0
for r in rows:
    for l in range(2):
        loads = [r['moe_load_l%d_e%d' % (l, e)] for e in range(E)]
        want = sum(max(0, x - cap) for x in loads)
        tot += r['moe_dropped_l%d' % l]
        if r['moe_dropped_l%d' % l] != want or sum(loads) != B * T * K: bad.append((r['step'], l, loads, r['moe_dropped_l%d' % l]))
print('cap', cap, 'steps', len(rows), 'dropped in all', tot, 'bad', bad[:3])
sys.exit(1 if bad or tot == 0 or len(rows) != 10 else 0)
EOF
rc=$?
cat "$TMP/drops.txt"
check test_moe_capacity_dropped_equals_overflow test $rc = 0
expect test_moe_capacity_export_refused 2 "MixtralForCausalLM does not compute \(a capacity factor \(token dropping; Mixtral is dropless\)\)" \
  -- "$GEN" export "$TMP/capck" -o "$TMP/hf"
check test_moe_capacity_export_no_output test ! -e "$TMP/hf"
for t in sim sm_90; do
  expect test_moe_capacity_refused_on_$t 2 "model tiny-moe \(mixture of experts\): (capacity_factor \(token dropping\) is in the cpu op only|no $t trainer runs)" \
    -- "$GEN" specs/v2500.yaml --model "$TMP/tiny-moe-cap.yaml" --target $t --enable adamw -o "$TMP/r-$t"
  check test_moe_capacity_refused_on_${t}_no_output test ! -e "$TMP/r-$t"
done

# v2109: ep 2 at np 2 drops exactly what np 2 data parallelism drops
if command -v mpirun >/dev/null; then
  MPI2="mpirun -np 2 -x OMP_NUM_THREADS"
  expect gen_cap_ep2 0 "wrote" -- "$GEN" "${SEL[@]}" --enable adamw,dp,ep -o "$TMP/ep"
  expect gen_cap_dp 0 "wrote" -- "$GEN" "${SEL[@]}" --enable adamw,dp -o "$TMP/dp"
  $MPI2 "$TMP/dp/train" "${COMMON[@]}" --steps 8 --metrics "$TMP/dp.jsonl" > "$TMP/dp.log" 2>&1
  $MPI2 "$TMP/ep/train" "${COMMON[@]}" --steps 8 --metrics "$TMP/ep.jsonl" > "$TMP/ep.log" 2>&1
  check test_v2109_capacity_ep2_trains grep -q "done: 8 steps" "$TMP/ep.log"
  same() { untimed "$1" | sed -E 's/"moe_ep_[a-z0-9_]*":[^,}]*,?//g; s/,}/}/g'; }
  check test_v2109_capacity_ep2_equals_dp_np2_bitwise test "$(same "$TMP/ep.jsonl")" = "$(same "$TMP/dp.jsonl")"
  d=$(metric "$TMP/ep.jsonl" moe_dropped_l0 | awk '{ s += $1 } END { print s + 0 }')
  echo "ep 2 x np 2, capacity $CF: $d assignments dropped in layer 0 over 8 steps (the dp run: $(metric "$TMP/dp.jsonl" moe_dropped_l0 | awk '{ s += $1 } END { print s + 0 }'))"
  check test_v2109_capacity_ep2_drops test "$d" -gt 0
  # dropped rows are never sent: the all-to-all bytes equal test_ep_v2109's formula with the remote
  # rows counted from the kept routing (L 2 layers, W 2 ranks, P 2, El 2, C 64)
  check test_v2109_capacity_a2a_bytes_kept_rows_only python3 -c "
import json
rows = [json.loads(l) for l in open('$TMP/ep.jsonl')]
bad = [(r['step'], r['moe_ep_a2a_bytes'], r['moe_ep_remote_rows']) for r in rows
       if r['moe_ep_a2a_bytes'] != 2 * 2 * 2 * 1 * 2 * 4 + r['moe_ep_remote_rows'] * 4 * (5 * 64 + 2)
       or r['moe_ep_remote_rows'] > 2 * 2 * 512 - r['moe_dropped_l0'] - r['moe_dropped_l1']]
print(len(rows), bad[:3]); assert rows and not bad"
else
  echo "FAIL: mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; FAIL=$((FAIL + 1))
fi
finish
