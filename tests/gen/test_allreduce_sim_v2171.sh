#!/usr/bin/env bash
# v2171 on the sim target: the device layer's gradient buckets (dev_sim.c, all-reduced on the comm
# stream while backward runs) go through the same communicator, so `--set v2171.algorithm=ring`
# makes them run the runtime's ring (runtime/coll/coll_algo.c). At np 2 every algorithm forms each
# element as the one sum g0 + g1 (IEEE addition is commutative: docs/test-tolerances.md E0, E7), so
# 2 steps of tiny on the KJV (the second loss follows the first all-reduce) give the default
# trainer's losses bit for bit; a ring without its add moves the second loss (4.9047 -> 4.9137).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
if ! command -v mpirun >/dev/null; then echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; fi
kjv_corpus "$TMP/corpus.txt" 200000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target sim --batch 2 --seq 16)
RUN=(--data "$TMP/data" --steps 2 --eval-every 0 --lr 3e-3)
expect gen_default 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp "${SHAPE[@]}" -o "$TMP/base"
expect gen_ring 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dp,allreduce --set v2171.algorithm=ring "${SHAPE[@]}" -o "$TMP/ring"
expect np2_default 0 "done: 2 steps" -- mpirun -np 2 -x OMP_NUM_THREADS "$TMP/base/train" "${RUN[@]}" --metrics "$TMP/base.jsonl"
expect np2_ring 0 "all-reduce: ring on MPI point-to-point" -- mpirun -np 2 -x OMP_NUM_THREADS "$TMP/ring/train" "${RUN[@]}" --metrics "$TMP/ring.jsonl"
echo "    losses default: $(losses "$TMP/base.jsonl" | tr '\n' ' ')"
echo "    losses ring:    $(losses "$TMP/ring.jsonl" | tr '\n' ' ')"
check test_v2171_sim_np2_ring_losses_bit_identical same_losses "$TMP/base.jsonl" "$TMP/ring.jsonl" 2
finish
