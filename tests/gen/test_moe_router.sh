#!/usr/bin/env bash
# The sigmoid router and DeepSeek-V3's aux-loss-free bias in the cpu MoE op (docs/moe.md "Router";
# numerics against an independent reference and the update's arithmetic: tests/unit/test_moe.c).
# tiny-moe with `router: sigmoid`, `router_bias: aux_free` and no aux loss carries per MoE layer
# a parameter `block_sparse_moe.gate.e_score_correction_bias` [E] (DeepSeek-V3's name) that no
# gradient reaches and that the trainer moves after each step by u * sign(mean load - load) from
# the step's loads over all micro-batches and ranks. Measured: with u = 0.05 the loads of the last
# 10 of 20 steps are more even than with no bias (the same model, batches and seeds); the bias is
# in the checkpoint (non-zero after training, and the saved one equals what the update rule gives
# from the logged loads, replayed here in float32) and a run of 3 + 3 resumed steps equals 6
# straight ones bit for bit; under v2109 (np 2, ep 2) the run equals np 2 data parallelism bit for
# bit (every rank applies the same update from the same all-reduced loads). Refused: an aux loss
# with the sigmoid router, the bias with another optimizer than AdamW, non-cpu targets,
# bias_update_rate without the bias.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
B=4; T=64; K=2; E=4; STEPS=20; U=0.05
mk() { sed -e "s/router: softmax/router: sigmoid/" -e "s/aux_loss_coef: 0.02/aux_loss_coef: 0$2/" "$ROOT/specs/models/tiny-moe.yaml" > "$TMP/$1.yaml"; }
mk sig ""
mk bias "\n  router_bias: aux_free\n  bias_update_rate: $U"
COMMON=(--data "$TMP/data" --eval-every 0 --lr 3e-3)
gen() { "$GEN" specs/v2500.yaml --model "$TMP/$1.yaml" --target cpu --batch $B --seq $T "${@:2}"; }

expect gen_moe_sigmoid 0 "wrote" -- gen sig --enable adamw -o "$TMP/sig"
expect gen_moe_aux_free 0 "wrote" -- gen bias --enable adamw -o "$TMP/bias"
check test_moe_router_attrs python3 -c "
import json; p = json.load(open('$TMP/bias/plan.json'))
ops = [o for o in p['forward'] if o['op'] == 'moe_fwd']
assert len(ops) == 2 and all(o['attrs']['sigmoid'] == 1 and abs(o['attrs']['bias_rate'] - $U) < 1e-9 for o in ops), ops[0]['attrs']
assert all(o['ins'][3].endswith('gate.e_score_correction_bias') for o in ops), [o['ins'] for o in ops]"
expect moe_sigmoid_trains 0 "done: $STEPS steps" -- "$TMP/sig/train" "${COMMON[@]}" --steps $STEPS --metrics "$TMP/sig.jsonl"
expect moe_aux_free_trains 0 "done: $STEPS steps" -- "$TMP/bias/train" "${COMMON[@]}" --steps $STEPS --metrics "$TMP/bias.jsonl" --ckpt-dir "$TMP/ck"
imbalance() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][-10:]
tot = [sum(r['moe_load_l%d_e%d' % (l, e)] for r in rows) for l in range(2) for e in range(4)]
print('%.4f' % max(max(tot[0:4]) / (sum(tot[0:4]) / 4), max(tot[4:8]) / (sum(tot[4:8]) / 4)))
PY
}
i0=$(imbalance "$TMP/sig.jsonl"); i1=$(imbalance "$TMP/bias.jsonl")
echo "sigmoid router, max/mean expert load over the last 10 of $STEPS steps: no bias $i0, aux-free bias (u $U) $i1; final loss $(losses "$TMP/sig.jsonl" | tail -1) / $(losses "$TMP/bias.jsonl" | tail -1)"
check test_moe_aux_free_balances awk -v a="$i0" -v b="$i1" 'BEGIN { exit !(b < a - 0.3) }'
check test_moe_sigmoid_loss_falls awk -v a="$(losses "$TMP/sig.jsonl" | head -1)" -v b="$(losses "$TMP/sig.jsonl" | tail -1)" 'BEGIN { exit !(a > 5.0 && b < a - 1.5) }'
# the saved bias = the update rule replayed in float32 from the logged loads of every step
check test_moe_aux_free_bias_checkpointed python3 - "$TMP/ck/latest" "$TMP/bias.jsonl" $U <<'PY'
import json, struct, sys, os
d = sys.argv[1] if os.path.isdir(sys.argv[1]) else os.path.join(os.path.dirname(sys.argv[1]), open(sys.argv[1]).read().strip())
f = open(os.path.join(d, 'model.safetensors'), 'rb'); n = struct.unpack('<Q', f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
rows = [json.loads(l) for l in open(sys.argv[2])]
u = struct.unpack('f', struct.pack('f', float(sys.argv[3])))[0]
f32 = lambda x: struct.unpack('f', struct.pack('f', x))[0]
for l in range(2):
    t = h['model.layers.%d.block_sparse_moe.gate.e_score_correction_bias' % l]
    f.seek(base + t['data_offsets'][0]); saved = struct.unpack('<4f', f.read(16))
    b = [0.0] * 4
    for r in rows:
        ld = [r['moe_load_l%d_e%d' % (l, e)] for e in range(4)]; m = sum(ld) / 4
        b = [f32(b[e] + (u if ld[e] < m else -u if ld[e] > m else 0.0)) for e in range(4)]
    print('layer', l, 'saved bias', saved, 'replayed', b)
    assert list(saved) == b and any(b), (saved, b)
PY
"$TMP/bias/train" "${COMMON[@]}" --steps 6 --metrics "$TMP/r8.jsonl" > /dev/null 2>&1
"$TMP/bias/train" "${COMMON[@]}" --steps 3 --metrics "$TMP/r44.jsonl" --ckpt-dir "$TMP/ck44" > /dev/null 2>&1
"$TMP/bias/train" "${COMMON[@]}" --steps 6 --metrics "$TMP/r44.jsonl" --ckpt-dir "$TMP/ck44" --resume > /dev/null 2>&1
check test_moe_aux_free_resume_bit_exact test "$(untimed "$TMP/r8.jsonl")" = "$(untimed "$TMP/r44.jsonl")"

# the model file with all of DeepSeek-V3's routing pieces the op has (sigmoid, aux-free bias, a
# shared expert) generates and trains; its plan holds the model's count plus the 2 x 4 bias entries
expect gen_tiny_deepseek_moe 0 "wrote" -- "$GEN" specs/v2500.yaml --model tiny-deepseek-moe --target cpu --batch $B --seq $T --enable adamw -o "$TMP/ds"
check test_tiny_deepseek_moe_params python3 -c "
import json; p = json.load(open('$TMP/ds/plan.json')); n = sum(q['numel'] for q in p['params']); print(n); assert n == 303936 + 8"
expect tiny_deepseek_moe_trains 0 "done: 3 steps" -- "$TMP/ds/train" "${COMMON[@]}" --steps 3

# refusals (exit 2, one line, nothing written)
mk sigaux ".02"
expect test_moe_sigmoid_aux_loss_refused 2 "the sigmoid router has no load-balancing aux loss .* — set moe.aux_loss_coef: 0" -- gen sigaux --enable adamw -o "$TMP/r1"
check test_moe_sigmoid_aux_loss_refused_no_output test ! -e "$TMP/r1"
expect test_moe_aux_free_lion_refused 2 "the aux-loss-free bias needs AdamW .* lion — use adamw" -- gen bias --enable lion -o "$TMP/r2"
check test_moe_aux_free_lion_refused_no_output test ! -e "$TMP/r2"
mk rate "\n  bias_update_rate: 0.01"
expect test_moe_bias_rate_without_bias_refused 2 "bias_update_rate is the aux-loss-free bias's step, and router_bias is not aux_free — set router_bias: aux_free" -- gen rate --enable adamw -o "$TMP/r3"
for t in sim sm_90; do
  expect test_moe_sigmoid_refused_on_$t 2 "model tiny-moe \(mixture of experts\): (the sigmoid router is in the cpu op only|no $t trainer runs)" \
    -- "$GEN" specs/v2500.yaml --model "$TMP/bias.yaml" --target $t --enable adamw -o "$TMP/r-$t"
  check test_moe_sigmoid_refused_on_${t}_no_output test ! -e "$TMP/r-$t"
done
if command -v mpirun >/dev/null; then
  MPI2="mpirun -np 2 -x OMP_NUM_THREADS"
  expect gen_bias_ep2 0 "wrote" -- gen bias --enable adamw,dp,ep -o "$TMP/ep"
  expect gen_bias_dp 0 "wrote" -- gen bias --enable adamw,dp -o "$TMP/dp"
  $MPI2 "$TMP/dp/train" "${COMMON[@]}" --steps 4 --metrics "$TMP/dp.jsonl" > "$TMP/dp.log" 2>&1
  $MPI2 "$TMP/ep/train" "${COMMON[@]}" --steps 4 --metrics "$TMP/ep.jsonl" > "$TMP/ep.log" 2>&1
  check test_v2109_aux_free_ep2_trains grep -q "done: 4 steps" "$TMP/ep.log"
  same() { untimed "$1" | sed -E 's/"moe_ep_[a-z0-9_]*":[^,}]*,?//g; s/,}/}/g'; }
  check test_v2109_aux_free_ep2_equals_dp_np2_bitwise test "$(same "$TMP/ep.jsonl")" = "$(same "$TMP/dp.jsonl")"
else
  echo "FAIL: mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; FAIL=$((FAIL + 1))
fi
finish
