#!/usr/bin/env bash
# Times `gen` for the gpt2-124m trainer at sm_90 (issue #4 targets: cold under 3 s on 2 cores,
# warm under 100 ms): cold = an empty kernel cache each run (every kernel compiled by NVRTC, in
# parallel worker processes), warm = every kernel from the cache. Also times the kernel step alone
# (gen's own "render + compile/cache" figure) and, for comparison, nvcc compiling the same
# rendered sources to cubins (one at a time, and two at a time).
# Usage: bench/bench_gen_kernels.sh [BUILD_DIR] [RUNS] [CPUS]   (CPUS: e.g. 0,1 to pin with taskset)
# Prints CSV: what,p20_ms,p50_ms,p80_ms.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; RUNS=${2:-5}; CPUS=${3:-}
GEN="$BUILD/generator/gen"
TMP=$(mktemp -d /tmp/hyp-bench-kernels.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PIN=()
if [ -n "$CPUS" ] && command -v taskset >/dev/null; then PIN=(taskset -c "$CPUS"); fi
ARGS=(specs/v2500.yaml --enable adamw,clip,memory-planning --model gpt2-124m --target sm_90 -o "$TMP/out")
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}

pct() { # name, then one value (ms) per line on stdin
  sort -n | awk -v name="$1" '{a[NR]=$1} END {
    printf "%s,%.1f,%.1f,%.1f\n", name, a[int(NR*0.2)+1], a[int(NR*0.5)+1], a[int(NR*0.8)+1] }'
}
ms() { # runs a command, prints its wall time in ms (stdout of the command goes to $TMP/last)
  local t0 t1
  t0=$(date +%s%N); "$@" >"$TMP/last" 2>&1; t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
}
cpu_ms() { # like ms, but prints user+sys CPU time of the command and its children (load-independent)
  /usr/bin/time -f "%U %S" -o "$TMP/cpu_t" "$@" >"$TMP/last" 2>&1
  awk '{printf "%d\n", ($1 + $2) * 1000}' "$TMP/cpu_t"
}
kstep() { grep -oE 'kernels: .* ([0-9.]+) s \(render' "$TMP/last" | grep -oE '[0-9.]+ s \(render' | awk '{printf "%d\n", $1 * 1000}'; }

echo "# cpus: $(nproc) online${CPUS:+, pinned to $CPUS}; $("$GEN" --version); nvrtc workers: ${HYP_JOBS:-all available}" >&2
echo "what,p20_ms,p50_ms,p80_ms"
: >"$TMP/cold"; : >"$TMP/cold_k"
for i in $(seq "$RUNS"); do
  rm -rf "$TMP/cache"
  HYPERION_CACHE="$TMP/cache" ms "${PIN[@]}" "$GEN" "${ARGS[@]}" >>"$TMP/cold"
  grep -q " 0 cached" "$TMP/last" || { echo "cold run hit the cache?" >&2; cat "$TMP/last" >&2; exit 1; }
  kstep >>"$TMP/cold_k"
done
pct "gen gpt2-124m sm_90 cold (empty cache)" <"$TMP/cold"
: >"$TMP/cold_cpu"
for i in $(seq "$RUNS"); do
  rm -rf "$TMP/cache"
  HYPERION_CACHE="$TMP/cache" cpu_ms "${PIN[@]}" "$GEN" "${ARGS[@]}" >>"$TMP/cold_cpu"
done
pct "  cold, CPU time of gen + its NVRTC workers (user+sys; /2 = the 2-core bound)" <"$TMP/cold_cpu"
pct "  kernel step only (render + NVRTC)" <"$TMP/cold_k"
: >"$TMP/warm"; : >"$TMP/warm_k"
for i in $(seq $((RUNS * 4))); do
  HYPERION_CACHE="$TMP/cache" ms "${PIN[@]}" "$GEN" "${ARGS[@]}" >>"$TMP/warm"
  grep -q " 0 compiled" "$TMP/last" || { echo "warm run missed the cache?" >&2; cat "$TMP/last" >&2; exit 1; }
  kstep >>"$TMP/warm_k"
done
pct "gen gpt2-124m sm_90 warm (all cached)" <"$TMP/warm"
pct "  kernel step only (render + cache)" <"$TMP/warm_k"
: >"$TMP/cpu"
for i in $(seq $((RUNS * 4))); do ms "${PIN[@]}" "$GEN" "${ARGS[@]:0:5}" --target cpu -o "$TMP/cpuout" >>"$TMP/cpu"; done
pct "gen gpt2-124m cpu (no kernels: the baseline)" <"$TMP/cpu"

# nvcc on the same rendered sources, same options as NVRTC (-default-device is NVRTC-only; the
# templates mark every device function explicitly)
if [ -x "$NVCC" ]; then
  SRC=("$TMP/out/kernels/"*.cu)
  NV=(-cubin -arch=sm_90 -std=c++17 -lineinfo -Xptxas -v -I kernels)
  : >"$TMP/nv1"; : >"$TMP/nv2"
  for i in $(seq "$RUNS"); do
    t0=$(date +%s%N)
    for f in "${SRC[@]}"; do "${PIN[@]}" "$NVCC" "${NV[@]}" "$f" -o "$TMP/$(basename "$f" .cu).cubin" >/dev/null 2>&1; done
    t1=$(date +%s%N); echo $(( (t1 - t0) / 1000000 )) >>"$TMP/nv1"
    t0=$(date +%s%N)
    printf '%s\n' "${SRC[@]}" | "${PIN[@]}" xargs -P 2 -I{} sh -c '"$0" "$@" {} -o "{}.cubin" >/dev/null 2>&1' "$NVCC" "${NV[@]}"
    t1=$(date +%s%N); echo $(( (t1 - t0) / 1000000 )) >>"$TMP/nv2"
  done
  pct "nvcc -cubin sm_90, ${#SRC[@]} files one at a time" <"$TMP/nv1"
  pct "nvcc -cubin sm_90, ${#SRC[@]} files two at a time" <"$TMP/nv2"
else
  echo "# nvcc not found at $NVCC: no comparison" >&2
fi
