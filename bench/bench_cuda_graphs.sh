#!/usr/bin/env bash
# v2165: host calls and host issue time per step of the device trainer with and without CUDA
# graphs, tiny at B=2 T=16 ($STEPS steps, default 12), on sim (fp32 and bf16 activations) and on
# the cuda stand-ins (sm_90, when built): the same trainer run with HYP_CUDA_GRAPHS=0 and =1,
# alternating, so a load change on this shared machine hits both. Prints the trainer's own
# summary lines: "device calls per step" (host calls of the last step: launches, GEMMs, memsets,
# copies; a graph launch is one) with the region issue time (host time spent issuing the
# captured regions' work, eagerly or as graph launches: mean from step 3) and "done:" (wall
# time; on sim the simulated kernels dominate it). Never a test: timings depend on the load.
# Usage: bench/bench_cuda_graphs.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${STEPS:-12}
GEN="$BUILD/generator/gen"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} HYP_SIM_CACHE="$BUILD/tests/sim_cache"
W=$(mktemp -d /tmp/hyp-bench-graphs.XXXXXX)
trap 'rm -rf "$W"' EXIT
cat specs/memory/*.yaml specs/SCHEMA.md > "$W/c.txt"
"$GEN" data "$W/c.txt" -o "$W/data" >/dev/null
OUT="$BUILD/bench/cuda_graphs" # fixed: the simulator's module cache keys on a kernel's path
mkdir -p "$OUT"
G=(specs/v2500.yaml --model tiny --batch 2 --seq 16)
runs=("sim_fp32 sim adamw,clip,cuda-graphs" "sim_bf16 sim adamw,clip,bf16,cuda-graphs")
[ -f "$BUILD/standins/libcuda.so.1" ] && runs+=("sm90_standin sm_90 adamw,clip,cuda-graphs")
echo "uptime: $(uptime)"
for r in "${runs[@]}"; do
  read -r name target sel <<< "$r"
  rm -rf "$OUT/$name"
  "$GEN" "${G[@]}" --target "$target" --enable "$sel" -o "$OUT/$name" >/dev/null 2>&1
  env=()
  [ "$target" = sim ] || env=(HYP_CUDA_LIBDIR="$BUILD/standins")
  for g in 0 1; do
    out=$(env "${env[@]}" HYP_CUDA_GRAPHS=$g "$OUT/$name/train" --data "$W/data" --eval-every 0 --sample 0 --steps "$STEPS" 2>&1)
    echo "$name graphs=$g | $(grep '^done:' <<< "$out") | $(grep '^device calls' <<< "$out")"
  done
done
