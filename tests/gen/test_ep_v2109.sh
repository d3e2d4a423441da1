#!/usr/bin/env bash
# v2109 expert parallelism on the cpu trainer (docs/moe.md "Expert parallelism"): tiny-moe (4
# experts, top-2, 2 MoE layers) generated with dp,ep (ep 2) runs under mpirun -np 2 as one ep group:
# rank r computes experts 2r..2r+1, each rank routes its own micro-batch and sends every routed row
# to its expert's rank and back by all-to-all (hyp_coll_alltoallv), forward and backward.
#
# Equivalence, bit for bit (no tolerance): its 20 steps equal those of the np=2 data-parallel
# trainer without ep on the same tokens per rank — losses, gradient norms, per-expert loads and aux
# losses. Why they are identical: the router runs on the rank's own rows as in dp; an expert runs
# once per source rank on exactly that rank's rows in token order (the same GEMM shapes and
# operands as that rank's dp op, so the same bits); its weight gradient from each source goes into
# zeroed scratch (what that dp rank adds to its zeroed gradient) and the two are added, a + b, the
# sum Open MPI forms for 2 ranks (docs/test-tolerances.md E7: commutative, the same on both); the
# rows' outputs and input gradients come back and are combined in the dp op's order (expert by
# expert, token order); the other gradients are all-reduced over the same 2 ranks; the norm is
# summed per parameter in plan order with each expert's square sum from its owner plus exact zeros.
# Traffic: the step's all-to-all bytes summed over the ranks (moe_ep_a2a_bytes, counted by coll on
# what MPI_Alltoallv was given) equal the formula from the routing, per MoE layer and micro-batch
# W ranks x 2 count exchanges x (P-1) peers x El experts x 4 B, plus every routed row whose expert
# is on another rank (moe_ep_remote_rows, counted from the saved routing) x 4 B x (C forward
# dispatch + C combine + 2C+1 backward dispatch (x, dout, gate) + C+1 return (dx, <dout,y>)).
# Checkpoints: the 20-step checkpoint's weights and AdamW states equal the dp run's tensor for
# tensor (every expert gathered from its owner before the save), and 10 + 10 resumed steps equal
# the 20 straight ones.
# Refused (exit 2, one line, nothing written): ep without an MoE model, with ZeRO, a degree that
# does not divide n_experts, --set of a parameter the model owns; at run time one rank for ep 2
# and a checkpoint of an optimizer whose states are not gathered (Lion).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
if ! command -v mpirun >/dev/null; then echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; fi
MPI2="mpirun -np 2 -x OMP_NUM_THREADS"
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
B=4; T=64; K=2; E=4; C=64; L=2; STEPS=20
G=("$GEN" specs/v2500.yaml --model tiny-moe --target cpu --batch $B --seq $T)
COMMON=(--data "$TMP/data" --eval-every 0 --lr 3e-3 --steps $STEPS)
expect gen_ep2 0 "wrote" -- "${G[@]}" --enable adamw,dp,ep -o "$TMP/ep"
expect gen_dp 0 "wrote" -- "${G[@]}" --enable adamw,dp -o "$TMP/dp"
check test_v2109_plan_ep2 grep -q '"ep":[[:space:]]*2' "$TMP/ep/plan.json"
$MPI2 "$TMP/dp/train" "${COMMON[@]}" --metrics "$TMP/dp.jsonl" --ckpt-dir "$TMP/ckdp" > "$TMP/dp.log" 2>&1
$MPI2 "$TMP/ep/train" "${COMMON[@]}" --metrics "$TMP/ep.jsonl" --ckpt-dir "$TMP/ckep" > "$TMP/ep.log" 2>&1
check test_v2109_ep2_np2_trains grep -q "done: $STEPS steps" "$TMP/ep.log"
grep -E "expert parallel|ep traffic|communication per step" "$TMP/ep.log" "$TMP/dp.log"
check test_v2109_ep2_describes grep -q "expert parallel (v2109): ep 2 x 1 groups = 2 ranks .* rank 0 computes experts 0-1 of 4 in each of 2 MoE layers" "$TMP/ep.log"
# everything but timings, communication counters and the ep entries, bit for bit
same() { untimed "$1" | sed -E 's/"moe_ep_[a-z0-9_]*":[^,}]*,?//g; s/,}/}/g'; }
check test_v2109_ep2_equals_dp_np2_bitwise test "$(same "$TMP/ep.jsonl")" = "$(same "$TMP/dp.jsonl")"
check test_v2109_ep2_losses_20 test "$(losses "$TMP/ep.jsonl" | wc -l)" = $STEPS
# loads: per step and layer the experts' loads sum to the tokens of both ranks x top_k
python3 - "$TMP/ep.jsonl" $((2 * B * T * K)) $L $E $C 2 2 > "$TMP/chk.txt" <<'EOF'
import json, sys
f, want, L, E, C, W, P = sys.argv[1], *map(int, sys.argv[2:])
El = E // P
rows = [json.loads(l) for l in open(f)]
bad_loads = [r['step'] for r in rows for l in range(L) if sum(r['moe_load_l%d_e%d' % (l, e)] for e in range(E)) != want]
form = lambda r: L * W * 2 * (P - 1) * El * 4 + r['moe_ep_remote_rows'] * 4 * (5 * C + 2)
bad_bytes = [(r['step'], r['moe_ep_a2a_bytes'], form(r)) for r in rows if r['moe_ep_a2a_bytes'] != form(r)]
# remote rows: some, and at most every routed row of every layer
bad_remote = [r['step'] for r in rows if not 0 < r['moe_ep_remote_rows'] <= L * want]
print(len(rows), 'loads', bad_loads[:3], 'bytes', bad_bytes[:3], 'remote', bad_remote[:3])
print('step 1: %d remote rows, %d B all-to-all (formula %d)' % (rows[0]['moe_ep_remote_rows'], rows[0]['moe_ep_a2a_bytes'], form(rows[0])))
sys.exit(0)
EOF
cat "$TMP/chk.txt"
check test_v2109_loads_sum_tokens_x_k grep -q "^$STEPS loads \[\]" "$TMP/chk.txt"
check test_v2109_a2a_bytes_equal_routing_formula grep -q " bytes \[\] " "$TMP/chk.txt"
check test_v2109_remote_rows_in_range grep -q "remote \[\]$" "$TMP/chk.txt"

# checkpoints: before a save every expert's weights and AdamW states are broadcast from its owner,
# so rank 0 writes the whole model — tensor for tensor the data-parallel run's checkpoint; and a
# run stopped at step 10 and resumed to 20 equals the straight run bit for bit
tensors_equal() {
  python3 - "$1" "$2" <<'EOF'
import json, struct, sys
def load(f):
    b = open(f, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: d[v['data_offsets'][0]:v['data_offsets'][1]] for k, v in h.items() if k != '__metadata__'}
a, b = load(sys.argv[1]), load(sys.argv[2])
diff = [k for k in a if a[k] != b.get(k)]
print(sys.argv[1].split('/')[-1], len(a), 'tensors,', len(diff), 'differ', diff[:3])
sys.exit(1 if diff or set(a) != set(b) or not a else 0)
EOF
}
s20="step_$(printf %08d $STEPS)"
check test_v2109_ckpt_weights_equal_dp tensors_equal "$TMP/ckep/$s20/model.safetensors" "$TMP/ckdp/$s20/model.safetensors"
check test_v2109_ckpt_adamw_states_equal_dp tensors_equal "$TMP/ckep/$s20/optimizer.safetensors" "$TMP/ckdp/$s20/optimizer.safetensors"
$MPI2 "$TMP/ep/train" "${COMMON[@]}" --steps 10 --metrics "$TMP/r.jsonl" --ckpt-dir "$TMP/ckr" > "$TMP/r1.log" 2>&1
$MPI2 "$TMP/ep/train" "${COMMON[@]}" --metrics "$TMP/r.jsonl" --ckpt-dir "$TMP/ckr" --resume > "$TMP/r2.log" 2>&1
check test_v2109_resume_bit_exact test "$(untimed "$TMP/r.jsonl")" = "$(untimed "$TMP/ep.jsonl")"

# refusals (gen: nothing written; train: before the first step)
expect test_v2109_dense_model_refused 2 "model tiny has no mixture-of-experts layers .* — use an MoE model" -- "$GEN" specs/v2500.yaml --model tiny --target cpu --enable adamw,dp,ep -o "$TMP/r1"
check test_v2109_refused_no_output test ! -e "$TMP/r1"
expect test_v2109_zero_refused 2 "expert parallelism with ZeRO/FSDP.* — drop zero1/zero2/zero3/fsdp, or drop ep" -- "${G[@]}" --enable adamw,zero1,ep -o "$TMP/r2"
expect test_v2109_degree_not_dividing_refused 2 "n_experts 4 of tiny-moe is not divisible by degree 3" -- "${G[@]}" --enable adamw,dp,ep --set v2109.degree=3 -o "$TMP/r3"
expect test_v2109_model_param_set_refused 2 "v2109.top_k is the model's" -- "${G[@]}" --enable adamw,dp,ep --set v2109.top_k=1 -o "$TMP/r4"
expect test_v2109_one_rank_refused 2 "places its experts over ep=2 ranks \(v2109\) and 1 rank was started: the world size must be a multiple of 2 — start it with mpirun -np 2" -- "$TMP/ep/train" "${COMMON[@]}" --steps 1
expect gen_ep2_lion 0 "wrote" -- "${G[@]}" --enable lion,dp,ep -o "$TMP/lion"
expect test_v2109_ckpt_of_lion_refused 2 "checkpoints \(--ckpt-dir\) of an optimizer other than AdamW with fp32 states with expert parallelism \(v2109 ep=2\) is not implemented" -- $MPI2 "$TMP/lion/train" "${COMMON[@]}" --steps 1 --ckpt-dir "$TMP/ck"
check test_v2109_ckpt_refused_nothing_written test ! -e "$TMP/ck"
finish
