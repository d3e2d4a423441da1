#!/usr/bin/env bash
# v2174 async dp under mpirun -np 2 (tiny, the KJV): what it communicates and that it trains.
# - Bytes, exact (the coll layer's ring-model count, coll.h): every step, the first s included,
#   starts one gradient all-reduce of the N-float arena, so a step sends what a synchronous dp step
#   sends, 4N + 16 B at p=2 (the 16 B: the token-count and loss scalars), in 3 collectives; the
#   metrics' comm_wait_s (the time the step spent in them: the exposed communication) is written.
# - staleness 2 trains: over 40 steps (38 updates) the median of the last 10 losses and the
#   validation loss fall below 0.65 x the first loss (ln 256 = 5.55 at the start; synchronous dp
#   ends near 3.0 as in test_local_sgd_comm_v2173, an untrained model stays at 5.5).
# - A resumed run (checkpoint at step 3, resume to 5) says it drops the reductions in flight and
#   runs: its first step applies nothing and the next waits only for a reduction it started.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
if ! command -v mpirun >/dev/null; then echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; fi
MPI="mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS"
kjv_corpus "$TMP/corpus.txt" 400000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target cpu --batch 4 --seq 64)
RUN=(--data "$TMP/data" --seq 32 --batch 2)
expect gen_v2174_s2 0 "wrote" -- "$GEN" specs/v2500.yaml --enable dp,v2174 --set v2174.staleness=2 "${SHAPE[@]}" -o "$TMP/a2"
pf=$(( $(tr -d ' \n\t' < "$TMP/a2/plan.json" | grep -oE '"param_bytes":[0-9]+' | cut -d: -f2) / 4 ))
N=$(( 2 * ( ( (pf + 1) / 2 + 15 ) / 16 * 16 ) ))
G=$(( 4 * N ))
echo "    parameters $pf floats, arena $N floats: a gradient all-reduce sends $G B per rank"
expect test_v2174_s2_np2_40_steps 0 "communication per step \(rank 0, data-parallel group\): $((G + 16)).0 bytes sent in 3.000 collectives \(v2174 async dp\)" -- \
  $MPI "$TMP/a2/train" "${RUN[@]}" --steps 40 --eval-every 40 --eval-batches 8 --metrics "$TMP/a2.jsonl"
check test_v2174_sends_4N_plus_16_bytes_every_step [ "$(metric "$TMP/a2.jsonl" comm_bytes | sort -u)" = "$((G + 16))" ]
check test_v2174_3_collectives_every_step [ "$(metric "$TMP/a2.jsonl" comm_calls | sort -u)" = 3 ]
check test_v2174_exposed_comm_time_in_metrics [ "$(metric "$TMP/a2.jsonl" comm_wait_s | grep -cE '^[0-9.e+-]+$')" = 40 ]
first=$(first_metric "$TMP/a2.jsonl" loss)
med=$(losses "$TMP/a2.jsonl" | tail -10 | sort -g | awk '{ a[NR] = $1 } END { print (a[5] + a[6]) / 2 }')
val=$(metric "$TMP/a2.jsonl" val_loss | grep -v null | tail -1)
echo "    staleness 2: first loss $first, median of the last 10 $med, validation at step 40 $val"
check test_v2174_s2_loss_falls awk -v a="$first" -v m="$med" -v v="$val" 'BEGIN { exit !(m < 0.65 * a && v > 0 && v < 0.65 * a) }'
$MPI "$TMP/a2/train" "${RUN[@]}" --steps 3 --eval-every 0 --ckpt-dir "$TMP/ck" > "$TMP/r1.log" 2>&1
expect test_v2174_resume_drops_in_flight_and_runs 0 "do not hold the gradient reductions in flight \(staleness 2\)" -- \
  $MPI "$TMP/a2/train" "${RUN[@]}" --steps 6 --eval-every 0 --ckpt-dir "$TMP/ck" --resume
finish
