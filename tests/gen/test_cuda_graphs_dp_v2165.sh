#!/usr/bin/env bash
# v2165 CUDA graphs with data parallelism on the sim trainer (mpirun -np 2): regions form only
# where no collective runs inside them (runtime/device/exec_dev_graph.c). Stage 0 without the
# v2110 overlap: all four regions captured (the gradient all-reduce runs eagerly between the
# backward and the norm); ZeRO-2 (its gradient schedule reduces each layer group inside the
# backward, the norm's partial sums are all-reduced): the forward alone. Each against the same
# trainer with HYP_CUDA_GRAPHS=0: every loss and gradient norm of both ranks bit-identical (the
# same kernels and collectives, in the same order: no tolerance), and the trainer names the
# regions it captured. ~20 s.
source "$(dirname "$0")/lib.sh"
if ! command -v mpirun >/dev/null; then echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; fi
export OMP_NUM_THREADS=1 HYP_SIM_CACHE="$BUILD/tests/sim_cache" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS -x HYP_SIM_CACHE -x HYP_COMM_OVERLAP -x HYP_CUDA_GRAPHS)
kjv_corpus "$TMP/c.txt" 50000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" --val-fraction 0.1 >/dev/null
OUT="$BUILD/tests/cuda_graphs_dp_v2165" # fixed: the simulator's module cache keys on a kernel's path
rm -rf "$OUT" && mkdir -p "$OUT"
R=(--data "$TMP/data" --eval-every 0 --sample 0 --steps 3 --seq 8)
numbers() { grep -oE '"(loss|grad_norm)":[^,}]*' "$1"; }
glaunch() { sed -nE 's/^device calls per step: .*, ([0-9]+) graph launches.*/\1/p' "$1" | head -1; }
pair() { # pair NAME SELECTION OVERLAP REGIONS-REGEX GRAPH-LAUNCHES
  local n=$1 sel=$2
  export HYP_COMM_OVERLAP=$3
  expect "gen_$n" 0 "rendered for sim" -- "$GEN" specs/v2500.yaml --batch 2 --seq 16 --model tiny --target sim --enable "$sel" -o "$OUT/$n"
  HYP_CUDA_GRAPHS=0 "${MPI[@]}" "$OUT/$n/train" "${R[@]}" --metrics "$TMP/$n.e.jsonl" > "$TMP/$n.e.out" 2>&1
  HYP_CUDA_GRAPHS=1 "${MPI[@]}" "$OUT/$n/train" "${R[@]}" --metrics "$TMP/$n.g.jsonl" > "$TMP/$n.g.out" 2>&1
  check "${n}_np2_trains_both_ways" test "$(numbers "$TMP/$n.g.jsonl" | wc -l)" = 6 -a "$(numbers "$TMP/$n.e.jsonl" | wc -l)" = 6
  check "${n}_names_its_regions" grep -qE "$4" "$TMP/$n.g.out"
  check "${n}_graph_launches_per_step_$5" test "$(glaunch "$TMP/$n.g.out")" = "$5"
  check "test_v2165_${n}_np2_graphs_equal_eager_bit_for_bit" test "$(numbers "$TMP/$n.g.jsonl")" = "$(numbers "$TMP/$n.e.jsonl")"
}
pair dp0 adamw,clip,dp,cuda-graphs 0 "replayed: the forward, the backward up to the loss and after it, the norm;" 4
pair zero2 adamw,clip,dp,zero2,cuda-graphs 1 "replayed: the forward; eager: .*the backward \(collectives inside\)" 1
finish
