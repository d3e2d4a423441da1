#!/usr/bin/env bash
# v2109 expert parallelism composed with data parallelism on the cpu trainer: tiny-moe generated
# with dp,ep under mpirun -np 4 --oversubscribe: ep 2 makes 2 ep groups ({0,1}, {2,3}: ep ranks
# contiguous) whose ep rank r holds experts 2r..2r+1, replicated over {0,2} / {1,3} (an expert's
# gradient is summed over its replicas only); ep 4 makes one group of 4 (one expert per rank, no
# replicas). Every rank reads its own micro-batch (batch 2), as the np=4 data-parallel trainer
# without ep, whose 20 losses both equal within the bound below; loads sum to the 4 ranks' tokens
# x top_k; all-to-all bytes equal the routing formula of test_ep_v2109.sh with W = 4.
#
# Tolerance (docs/test-tolerances.md): the one difference is the order of each expert weight
# gradient's sum over the 4 ranks' contributions — dp: Open MPI's 4-rank all-reduce; ep 2: the
# owner's a + b, then the replicas' all-reduce of two such sums; ep 4: ((a + b) + c) + d on the
# owner — two fp32 orders of a 4-term sum (E1, K = 4), carried through AdamW into the losses: E2 +
# E3, 2e-5 relative for <= 8 steps, the E3 part (sign flips of near-zero coordinates) growing with
# the steps that accumulate flips: 20/8 x 2e-5 = 5e-5 relative. (When Open MPI's all-reduce happens
# to pair the ranks (0+1)+(2+3), ep 2 is bit-identical; the bound does not count on it.)
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
if ! command -v mpirun >/dev/null; then echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; fi
MPI4="mpirun -np 4 --oversubscribe -x OMP_NUM_THREADS"
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
B=2; T=64; K=2; E=4; C=64; L=2; STEPS=20
G=("$GEN" specs/v2500.yaml --model tiny-moe --target cpu --batch $B --seq $T)
COMMON=(--data "$TMP/data" --eval-every 0 --lr 3e-3 --steps $STEPS)
expect gen_dp 0 "wrote" -- "${G[@]}" --enable adamw,dp -o "$TMP/dp"
expect gen_ep2 0 "wrote" -- "${G[@]}" --enable adamw,dp,ep -o "$TMP/ep2"
expect gen_ep4 0 "wrote" -- "${G[@]}" --enable adamw,dp,ep --set v2109.degree=4 -o "$TMP/ep4"
for r in dp ep2 ep4; do $MPI4 "$TMP/$r/train" "${COMMON[@]}" --metrics "$TMP/$r.jsonl" > "$TMP/$r.log" 2>&1; done
check test_v2109_ep2_dp2_np4_trains grep -q "done: $STEPS steps" "$TMP/ep2.log"
check test_v2109_ep4_np4_trains grep -q "done: $STEPS steps" "$TMP/ep4.log"
check test_v2109_ep2_dp2_mesh grep -q "expert parallel (v2109): ep 2 x 2 groups = 4 ranks" "$TMP/ep2.log"
check test_v2109_ep4_mesh grep -q "rank 0 computes experts 0-0 of 4" "$TMP/ep4.log"
paste <(losses "$TMP/dp.jsonl") <(losses "$TMP/ep2.jsonl") <(losses "$TMP/ep4.jsonl") |
  awk '{ printf "    step %2d: dp %s  ep2 x dp2 %s  ep4 %s\n", NR, $1, $2, $3 }' | sed -n '1p;10p;20p'
close() { # every one of the 20 losses within 5e-5 relative
  paste <(losses "$1") <(losses "$2") | awk -v n0="$STEPS" 'BEGIN { n = 0 } { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 5e-5 * $1) bad = 1 } END { exit bad || n != n0 }'
}
check test_v2109_ep2_dp2_losses_equal_dp_np4 close "$TMP/dp.jsonl" "$TMP/ep2.jsonl"
check test_v2109_ep4_losses_equal_dp_np4 close "$TMP/dp.jsonl" "$TMP/ep4.jsonl"
counts() { # FILE P: loads per layer = 4 ranks x B x T x K; bytes = the routing formula (W = 4)
  python3 - "$1" $((4 * B * T * K)) $L $E $C 4 "$2" <<'EOF'
import json, sys
f, want, L, E, C, W, P = sys.argv[1], *map(int, sys.argv[2:])
El = E // P
rows = [json.loads(l) for l in open(f)]
form = lambda r: L * W * 2 * (P - 1) * El * 4 + r['moe_ep_remote_rows'] * 4 * (5 * C + 2)
bad = [r['step'] for r in rows for l in range(L) if sum(r['moe_load_l%d_e%d' % (l, e)] for e in range(E)) != want]
bad += [r['step'] for r in rows if r['moe_ep_a2a_bytes'] != form(r) or not 0 < r['moe_ep_remote_rows'] <= L * want]
print('ep %d: step 1 %d remote rows, %d B all-to-all (formula %d); bad steps %s' % (P, rows[0]['moe_ep_remote_rows'], rows[0]['moe_ep_a2a_bytes'], form(rows[0]), bad[:3]))
sys.exit(1 if bad or len(rows) != 20 else 0)
EOF
}
check test_v2109_ep2_dp2_loads_and_bytes counts "$TMP/ep2.jsonl" 2
check test_v2109_ep4_loads_and_bytes counts "$TMP/ep4.jsonl" 4
finish
