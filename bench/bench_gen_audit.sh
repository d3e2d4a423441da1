#!/usr/bin/env bash
# Times `gen audit` on the full tree (100 specs, all validation and resolution) — target < 50 ms.
# Usage: bench/bench_gen_audit.sh [BUILD_DIR] [RUNS]. Prints CSV: command,p20_ms,p50_ms,p80_ms.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; RUNS=${2:-30}
GEN="$BUILD/generator/gen"
run() {
  local name=$1; shift
  local times=()
  for _ in $(seq "$RUNS"); do
    local t0 t1
    t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
    times+=($(( (t1 - t0) / 1000 )))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v name="$name" '{a[NR]=$1} END {
    printf "%s,%.1f,%.1f,%.1f\n", name, a[int(NR*0.2)+1]/1000, a[int(NR*0.5)+1]/1000, a[int(NR*0.8)+1]/1000 }'
}
echo "command,p20_ms,p50_ms,p80_ms"
run "gen list" "$GEN" list specs/v2500.yaml
run "gen audit fp8,flash,zero3 sm_90" "$GEN" audit specs/v2500.yaml --enable fp8,flash,zero3 --target sm_90
run "gen audit --json quick-wins" "$GEN" audit specs/v2500.yaml --enable quick-wins --target sm_90 --json
