#!/usr/bin/env bash
# scripts/coverage.sh [BUILD_DIR] — line coverage (gcov) of the device layer and of the rendered
# kernels (issue #5) under the whole ctest suite. Builds BUILD_DIR (default build-cov) with
# --coverage, runs every ctest test once (serially, niced: 34 min measured on a shared 2-core box,
# most of it test_train at -O0), then parses `gcov -n` / `gcov -t` (gcovr/lcov are not needed).
#   host code   runtime/device.c, device_gemm.c, dev_sim.c, sim.c, exec_dev.c, backend_dev.c — the
#               shared layer, the sim device, the simulator, the device executor and training step;
#               runtime/dev_cuda.c separately: without a GPU only its loader and error paths run.
#   kernels     every .cu the simulator compiled during the suite (tests/device/*.cu, the templates
#               test_kernels_sim renders, the kernels of the generated sim trainers), compiled with
#               coverage through HYP_SIM_CXXFLAGS; per template family, then the total (one line
#               per distinct rendered source in BUILD_DIR/cov-kernels.txt).
# --only REGEX runs only the ctest tests matching REGEX and adds their counts to those of an
# earlier run in BUILD_DIR (to measure what new tests add without the whole suite again).
# Prints the figures; exits 1 when a test fails.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$ROOT/build-cov
ARGS=; [ $# -eq 0 ] || ARGS=$(printf ' %q' "$@")
ONLY=
while [ $# -gt 0 ]; do
  case $1 in
    --kernels) ;; # kept for old command lines: the kernels are always measured now
    --only) ONLY=${2:?--only needs a ctest regex}; shift ;;
    *) B=$(mkdir -p "$1" && cd "$1" && pwd) ;;
  esac
  shift
done
cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Debug -DHYP_NATIVE=OFF \
  -DCMAKE_C_FLAGS="--coverage -fprofile-update=atomic" -DCMAKE_EXE_LINKER_FLAGS=--coverage >/dev/null
# every target but the benchmarks (ctest never runs them; bench_gemm's asm needs -O2)
targets=$(cmake --build "$B" --target help | awk '/^\.\.\. /{ print $2 }' |
  grep -Ev '^(all|clean|depend|edit_cache|rebuild_cache|test|bench_.*|.*\.[ois])$')
nice cmake --build "$B" -j2 --target $targets > "$B/cov-build.log" 2>&1 || { tail -20 "$B/cov-build.log"; exit 1; }
if [ -z "$ONLY" ]; then
  find "$B" -name '*.gcda' -delete
  # simulator modules of earlier runs: their objects and notes are gone or stale
  rm -rf "$B/cov-sim-cache" "$B/tests/sim_cache" "$B/tests/kernels_sim"
fi
export HYP_SIM_CACHE="$B/cov-sim-cache" HYP_SIM_CXXFLAGS="--coverage -fprofile-update=atomic -O0"

fail=0
log=$B/cov-ctest${ONLY:+-only}.log
nice ctest --test-dir "$B" --output-on-failure ${ONLY:+-R "$ONLY"} > "$log" 2>&1 || { echo "FAILED: ctest (see $log)"; fail=1; }
grep -E "tests passed|tests failed" "$log" | sed 's/^/ctest: /'

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
for f in device.c device_reg.c device_gemm.c dev_sim.c sim.c exec_dev.c backend_dev.c dev_cuda.c; do
  read -r _ e n < <(lines -o "$OBJ/$f.o" "$ROOT/runtime/$f" | grep "runtime/$f " || echo "x 0 0")
  pct=$(awk -v e="$e" -v n="$n" 'BEGIN { printf "%.1f", n ? 100 * e / n : 0 }')
  if [ $f = dev_cuda.c ]; then
    printf "  %-16s %5s%% of %4d lines  (needs a GPU: only the loader and no-driver paths run here)\n" "$f" "$pct" "$n"
  else
    printf "  %-16s %5s%% of %4d lines\n" "$f" "$pct" "$n"
    tot_e=$((tot_e + e)) tot_n=$((tot_n + n))
  fi
done
awk -v e=$tot_e -v n=$tot_n 'BEGIN { printf "  %-16s %5.1f%% of %4d lines  (all above but dev_cuda.c)\n", "total", 100 * e / n, n }'

echo
echo "kernels run by the simulator (gcov line coverage; the rendered files with the same text count as one"
echo "source, whose line is run when any module built from any of them ran it; per source in"
echo "$B/cov-kernels.txt):"
# gcov -t prints every source of a module annotated ("count:line:text", "#####" = never run). gcov
# needs the source: the kernels of trainers that shell tests generate in their temp dirs (deleted
# at exit) drop out. The family is the template whose name starts the file's name (FAMILY[_TAG].cu).
fams=$(cd "$ROOT/templates" && ls *.cu.lua | sed 's/\.cu\.lua$//' | tr '\n' ' ')
for g in $(find "$B" -name '*.gcda' -not -path '*/CMakeFiles/*' | sort); do
  (cd "$(dirname "$g")" && gcov -t "$g" 2>/dev/null)
done | awk -v fams="$fams" -v perfile="$B/cov-kernels.txt" '
  function family(path,   b, i, best) {
    b = path; sub(/.*\//, "", b); sub(/\.cu$/, "", b); best = ""
    for (i in fam) if ((b == fam[i] || index(b, fam[i] "_") == 1) && length(fam[i]) > length(best)) best = fam[i]
    return best != "" ? best : "(test) " b
  }
  BEGIN { split(fams, fam, " ") }
  /^ *-: *0:Source:/ { src = substr($0, index($0, "Source:") + 7); next }
  {
    c = substr($0, 1, index($0, ":") - 1); gsub(/ /, "", c)
    rest = substr($0, index($0, ":") + 1); ln = substr(rest, 1, index(rest, ":") - 1); gsub(/ /, "", ln)
    if (src !~ /\.cu$/ || src ~ /\.sim\.cu$/ || ln + 0 < 1) next
    if (!((src, ln) in seen)) { seen[src, ln] = 1; text[src] = text[src] "\n" substr(rest, index(rest, ":") + 1) }
    if (c == "-") next
    k = src SUBSEP ln; exe[k] = 1; if (c !~ /^(#####|=====)$/) hit[k] = 1
  }
  END {
    for (f in text) { if (!(text[f] in id)) { id[text[f]] = f; nsame[f] = 0 } else nsame[id[text[f]]]++; canon[f] = id[text[f]] }
    for (k in exe) { split(k, q, SUBSEP); u = canon[q[1]] SUBSEP q[2]; uexe[u] = 1; if (k in hit) uhit[u] = 1 }
    for (u in uexe) { split(u, q, SUBSEP); n[q[1]]++; if (u in uhit) h[q[1]]++ }
    for (f in n) {
      tn += n[f]; th += h[f]; fm = family(f); fn[fm] += n[f]; fh[fm] += h[f]; nf[fm]++
      printf "  %-70s %5.1f%% of %4d lines%s\n", f, 100 * h[f] / n[f], n[f], nsame[f] ? " (+" nsame[f] " identical)" : "" | "sort > " perfile
    }
    for (fm in fn) printf "  %-24s %5.1f%% of %5d lines  (%d sources)\n", fm, 100 * fh[fm] / fn[fm], fn[fm], nf[fm] | "sort"
    close("sort")
    if (tn) printf "  %-24s %5.1f%% of %5d lines\n", "total", 100 * th / tn, tn
  }'
echo
echo "command: bash scripts/coverage.sh$ARGS"
exit $fail
