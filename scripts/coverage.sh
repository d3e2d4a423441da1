#!/usr/bin/env bash
# scripts/coverage.sh [BUILD_DIR] [--kernels] — line coverage (gcov) of the device layer (issue #5)
# under its tests. Builds BUILD_DIR (default build-cov) with --coverage, runs test_device, the MPI
# collectives (tests/gen/test_device_mpi.sh) and test_gpu_device, then parses `gcov -n`
# (gcovr/lcov are not needed).
#   host code   runtime/device.c, device_gemm.c, dev_sim.c — the shared layer and the sim device;
#               runtime/dev_cuda.c separately: without a GPU only its loader and error paths run.
#   kernels     every .cu the simulator compiled during the runs, compiled with coverage through
#               HYP_SIM_CXXFLAGS into a private cache: tests/device/basic.cu, and with --kernels
#               also the rendered templates that tests/unit/test_kernels_sim.c runs (~1 min more).
# Prints one line per file and the totals; exits 1 when a test fails.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$ROOT/build-cov
KERNELS=0
for a in "$@"; do
  case $a in
    --kernels) KERNELS=1 ;;
    *) B=$(mkdir -p "$a" && cd "$a" && pwd) ;;
  esac
done
cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Debug -DHYP_NATIVE=OFF \
  -DCMAKE_C_FLAGS="--coverage -fprofile-update=atomic" -DCMAKE_EXE_LINKER_FLAGS=--coverage >/dev/null
targets="test_device test_gpu_device"
[ $KERNELS = 1 ] && targets="$targets test_kernels_sim gen"
cmake --build "$B" -j2 --target $targets > "$B/cov-build.log" 2>&1 || { tail -20 "$B/cov-build.log"; exit 1; }
find "$B" -name '*.gcda' -delete
rm -f "$B"/*.so.tmp.*.gcno # modules compiled by earlier runs
export HYP_SIM_CACHE="$B/cov-sim-cache" HYP_SIM_CXXFLAGS="--coverage -fprofile-update=atomic -O0"
rm -rf "$HYP_SIM_CACHE"

fail=0
run() { # run NAME command...
  local name=$1; shift
  if (cd "$ROOT" && "$@") > "$B/cov-$name.log" 2>&1; then :; else echo "FAILED: $* (see $B/cov-$name.log)"; fail=1; fi
  tail -1 "$B/cov-$name.log" | sed "s/^/$name: /"
}
run test_device "$B/tests/test_device"
run test_device_mpi bash "$ROOT/tests/gen/test_device_mpi.sh" "$B"
run test_gpu_device "$B/tests/test_gpu_device"
[ $KERNELS = 1 ] && run test_kernels_sim "$B/tests/test_kernels_sim"

# gcov -n prints, per source file of an object: File '<path>' / Lines executed:P% of N
OBJ="$B/runtime/CMakeFiles/hyp_runtime.dir"
lines() { # lines GCOV_ARGS... -> "path executed total" per file
  gcov -n "$@" 2>/dev/null | awk '
    /^File / { f = $2; gsub("\047", "", f) }
    /^Lines executed:/ { split($2, a, ":"); p = a[2]; sub("%", "", p); n = $4; printf "%s %d %d\n", f, int(p * n / 100 + 0.5), n }'
}
echo
echo "device-layer host code (gcov line coverage):"
tot_e=0 tot_n=0
for f in device.c device_gemm.c dev_sim.c dev_cuda.c; do
  read -r _ e n < <(lines -o "$OBJ/$f.o" "$ROOT/runtime/$f" | grep "runtime/$f " || echo "x 0 0")
  pct=$(awk -v e="$e" -v n="$n" 'BEGIN { printf "%.1f", n ? 100 * e / n : 0 }')
  if [ $f = dev_cuda.c ]; then
    printf "  %-16s %5s%% of %4d lines  (needs a GPU: only the loader and no-driver paths run here)\n" "$f" "$pct" "$n"
  else
    printf "  %-16s %5s%% of %4d lines\n" "$f" "$pct" "$n"
    tot_e=$((tot_e + e)) tot_n=$((tot_n + n))
  fi
done
awk -v e=$tot_e -v n=$tot_n 'BEGIN { printf "  %-16s %5.1f%% of %4d lines  (device.c + device_gemm.c + dev_sim.c)\n", "total", 100 * e / n, n }'

echo
echo "kernels run by the simulator (gcov line coverage of each .cu, lines executed by any module built from it):"
# gcov -t prints every source of a module annotated ("count:line:text", "#####" = never run);
# a file compiled into several modules counts a line as run when any of them ran it
for g in $( (find "$HYP_SIM_CACHE" -name '*.gcda'; find "$B" -maxdepth 1 -name '*.gcda') | sort); do
  (cd "$(dirname "$g")" && gcov -t "$g" 2>/dev/null)
done | awk '
  /^ *-: *0:Source:/ { src = substr($0, index($0, "Source:") + 7); next }
  {
    c = substr($0, 1, index($0, ":") - 1); gsub(/ /, "", c)
    rest = substr($0, index($0, ":") + 1); ln = substr(rest, 1, index(rest, ":") - 1); gsub(/ /, "", ln)
    if (c == "-" || src !~ /\.cu$/ || src ~ /\.sim\.cu$/) next
    k = src SUBSEP ln; exe[k] = 1; if (c !~ /^(#####|=====)$/) hit[k] = 1
  }
  END {
    for (k in exe) { split(k, q, SUBSEP); n[q[1]]++; if (k in hit) h[q[1]]++ }
    for (f in n) { tn += n[f]; th += h[f]; b = f; sub(/.*\//, "", b); printf "  %-44s %5.1f%% of %4d lines\n", b, 100 * h[f] / n[f], n[f] | "sort" }
    close("sort")
    if (tn) printf "  %-44s %5.1f%% of %4d lines\n", "total", 100 * th / tn, tn
  }'
echo
echo "command: bash scripts/coverage.sh $([ $KERNELS = 1 ] && echo '--kernels')"
exit $fail
