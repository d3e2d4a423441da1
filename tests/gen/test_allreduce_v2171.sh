#!/usr/bin/env bash
# v2171 all-reduce algorithm in a trainer: `--enable dp,allreduce --set v2171.algorithm=ring`
# writes plan.train.allreduce, and the tiny cpu trainer at np 2 all-reduces its gradients with the
# runtime's ring (runtime/coll/coll_algo.c) instead of MPI_Allreduce; 5 steps on the KJV give the
# default trainer's losses and weights bit for bit: with two ranks every algorithm forms each
# gradient element as the one sum g0 + g1, which IEEE addition makes independent of operand order
# (docs/test-tolerances.md E0, E7). At np 3 the ring sums two of its three blocks in another order
# than Open MPI's rank order ((x1 + x2) + x0, (x2 + x0) + x1): losses within 2e-5 relative (E2 + E3:
# two fp32 summation orders through tiny and 5 AdamW steps). gen refuses the algorithm under ZeRO-2 (no all-reduce)
# and halving_doubling/hierarchical for cuda (NCCL has neither). The collective layer's own
# per-algorithm checks (exact sums, bytes and rounds per rank) are test_coll_algo_v2171.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
if ! command -v mpirun >/dev/null; then echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; fi
kjv_corpus "$TMP/corpus.txt" 200000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
DIFF="$BUILD/tests/st_diff"
T=specs/v2500.yaml
SHAPE=(--model tiny --target cpu --batch 2 --seq 32)
RUN=(--data "$TMP/data" --steps 5 --eval-every 0 --lr 3e-3)

expect gen_default 0 "wrote" -- "$GEN" $T --enable adamw,dp "${SHAPE[@]}" -o "$TMP/base"
expect gen_ring 0 "wrote" -- "$GEN" $T --enable adamw,dp,allreduce --set v2171.algorithm=ring "${SHAPE[@]}" -o "$TMP/ring"
check test_v2171_plan_names_ring grep -q '"algorithm":[[:space:]]*"ring"' "$TMP/ring/plan.json"
check test_v2171_default_plan_has_none bash -c "! grep -q '\"allreduce\"' '$TMP/base/plan.json'"
expect np2_default 0 "done: 5 steps" -- mpirun -np 2 -x OMP_NUM_THREADS "$TMP/base/train" "${RUN[@]}" --metrics "$TMP/base.jsonl" --ckpt-dir "$TMP/ck_base"
expect np2_ring 0 "all-reduce: ring on MPI point-to-point" -- mpirun -np 2 -x OMP_NUM_THREADS "$TMP/ring/train" "${RUN[@]}" --metrics "$TMP/ring.jsonl" --ckpt-dir "$TMP/ck_ring"
echo "    losses default: $(losses "$TMP/base.jsonl" | tr '\n' ' ')"
echo "    losses ring:    $(losses "$TMP/ring.jsonl" | tr '\n' ' ')"
check test_v2171_np2_ring_losses_bit_identical same_losses "$TMP/base.jsonl" "$TMP/ring.jsonl" 5
expect test_v2171_np2_ring_weights_bit_identical 0 "max \|a-b\| = 0 " -- "$DIFF" "$TMP/ck_base/step_00000005/model.safetensors" "$TMP/ck_ring/step_00000005/model.safetensors" 0

# np 3, ring: three-term sums in another order than MPI's
expect np3_default 0 "done: 5 steps" -- mpirun -np 3 -x OMP_NUM_THREADS "$TMP/base/train" "${RUN[@]}" --metrics "$TMP/base3.jsonl" --ckpt-dir "$TMP/ck_base3"
expect np3_ring 0 "all-reduce: ring" -- mpirun -np 3 -x OMP_NUM_THREADS "$TMP/ring/train" "${RUN[@]}" --metrics "$TMP/ring3.jsonl" --ckpt-dir "$TMP/ck_ring3"
echo "    np3 weights, ring vs default: $("$DIFF" "$TMP/ck_base3/step_00000005/model.safetensors" "$TMP/ck_ring3/step_00000005/model.safetensors" 0 2>&1 | grep -o 'max |a-b| = [^ ]*')"
close() { # every loss within 2e-5 relative, 5 of them
  paste <(losses "$1") <(losses "$2") | awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5 * $1) bad = 1; if (d / $1 > w) w = d / $1 } END { printf "    np3 worst relative loss difference %.2g\n", w; exit bad || n != 5 }'
}
check test_v2171_np3_ring_losses_close close "$TMP/base3.jsonl" "$TMP/ring3.jsonl"

expect test_v2171_refused_under_zero2 2 "ZeRO stage 2 reduce-scatters" -- "$GEN" $T --enable adamw,zero2,allreduce --set v2171.algorithm=tree "${SHAPE[@]}" -o "$TMP/bad1"
expect test_v2171_cuda_refuses_halving_doubling 2 "NCCL has no such all-reduce" -- "$GEN" $T --enable adamw,dp,allreduce --set v2171.algorithm=halving_doubling --model tiny --target sm_90 -o "$TMP/bad2"
# a plan naming an algorithm the runtime does not have: one line, exit 2, before any rank trains
mkdir -p "$TMP/badplan" && cp -r "$TMP/ring/." "$TMP/badplan/"
sed -i 's/"algorithm":[[:space:]]*"ring"/"algorithm": "butterfly"/' "$TMP/badplan/plan.json"
expect test_v2171_trainer_refuses_unknown_algorithm 2 "train.allreduce.algorithm. = \"butterfly\" is none of ring, tree" -- "$TMP/badplan/train" "${RUN[@]}"
check test_v2171_refusal_wrote_nothing test ! -e "$TMP/bad1" -a ! -e "$TMP/bad2"

# gen size's all-reduce model (v2171 with the v2169 link and v2170 NIC facts of the hardware YAML):
# every algorithm's time at p = 16 (two HGX nodes of 8) and p = 4 (one node) equals its closed
# form, recomputed here from h100-sxm.yaml's numbers; the pick is the fastest. Tolerance 1e-12
# relative: the same double-precision formulas in another operation order.
"$GEN" size --model gpt2-124m --hw h100-sxm,host-cpu --dp 16 --json > "$TMP/size16.json"
"$GEN" size --model gpt2-124m --hw h100-sxm --dp 4 --json > "$TMP/size4.json"
model_ok() { python3 - "$1" "$2" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1])); p = int(sys.argv[2])
ar = d["hardware"][0]["allreduce"]
a_in, b_in, a_out, b_out, k = 3.4e-6, 450e9 * 0.8, 9.6e-6, 400e9 / 8 * 0.8, 8  # specs/hardware/h100-sxm.yaml
lg = lambda x: math.ceil(math.log2(x))
def t(algo, p, n, flat_in):
    a, b = (a_in, b_in) if flat_in else (a_out, b_out)
    if algo == "ring": return 2 * (p - 1) * a + 2 * (p - 1) / p * n / b
    if algo == "tree": return 2 * lg(p) * (a + n / b)
    if algo == "halving_doubling":
        q = 2 ** int(math.log2(p)); x = 2 * math.log2(q) * a + 2 * (q - 1) / q * n / b
        return x + (2 * (a + n / b) if p > q else 0)
    m = math.ceil(p / k)
    return 2 * lg(k) * (a_in + n / b_in) + 2 * (m - 1) * a_out + 2 * (m - 1) / m * n / b_out
bad = 0
for row in ar["rows"]:
    n, times = row["bytes"], row["times"]
    for algo in ("ring", "tree", "halving_doubling", "hierarchical"):
        if algo == "hierarchical" and p <= k:
            bad += algo in times; continue
        want = t(algo, p, n, p <= k)
        if abs(times[algo] - want) > 1e-12 * want: bad += 1; print("  %s n=%d: %g, closed form %g" % (algo, n, times[algo], want))
    if times[row["best"]] != min(times.values()): bad += 1; print("  pick %s is not the fastest at n=%d" % (row["best"], n))
print("    p=%d picks: %s" % (p, ", ".join("%d B %s" % (r["bytes"], r["best"]) for r in ar["rows"])))
sys.exit(1 if bad else 0)
PY
}
check test_v2171_size_model_p16_two_nodes model_ok "$TMP/size16.json" 16
check test_v2171_size_model_p4_one_node model_ok "$TMP/size4.json" 4
check test_v2171_size_says_why_not_modelled grep -q '"missing":.*link_latency_us' "$TMP/size16.json"
finish
