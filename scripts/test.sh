#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole ctest suite, then builds the
# runtime, gen and the C unit tests with ASan+UBSan into build-asan/ and runs the unit tests there
# (ctest label "unit"). HYP_SKIP_SANITIZE=1 skips the sanitizer pass (e.g. for a quick local run).
# Never: weakens a test to save time (what the suite shares to be fast: docs/testing.md, "Suite time").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh

# Shared by every test of the run: one kernel cache inside the build folder (gen's NVRTC cubins and
# the simulator's g++ modules: a kernel that several tests use is compiled once, a clean clone
# starts cold, nothing is written to $HOME; tests that check the cache itself use their own);
# waiting OpenMP threads sleep and waiting MPI ranks yield instead of spinning (ctest -j2 runs two
# tests on the 2 cores, so a spinning waiter takes the core its neighbour needs).
export HYPERION_CACHE="$PWD/build/cache" HYP_SIM_CACHE="$PWD/build/tests/sim_cache"
export OMP_WAIT_POLICY=passive OMPI_MCA_mpi_yield_when_idle=1
# The longest tests (label "slow") carry a COST, so ctest starts them first even on a clean build
# with no timing history, and the run does not end on one long test.
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@")

if [ "${HYP_SKIP_SANITIZE:-}" != "1" ]; then
  WERROR=OFF; [ "${CI:-}" = "true" ] && WERROR=ON
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DHYP_SANITIZE=ON -DHYP_WERROR=$WERROR >/dev/null
  # only what the unit tests run: their programs, gen (which some of them call) and the trainer
  # gen copies; the benchmarks, tools, stand-ins and GPU programs are built (and -Werror checked)
  # by the build above
  mapfile -t UNIT < <(cd tests/unit && ls test_*.c | sed 's/\.c$//')
  cmake --build build-asan -j"$(nproc)" --target gen hyperion-train "${UNIT[@]}"
  # its simulator cache starts as a copy of the first pass's: a module's code does not depend on
  # the build that compiles it (the key names the source, the prelude, the compiler and its
  # flags), so compiling the same kernels again was g++ time, not a sanitizer check; test_sim
  # compiles its modules into a cold cache of its own (tests/CMakeLists.txt), so the compile and
  # cache-writing path (g++ processes, the precompiled prelude, locks) still runs under the sanitizers
  rm -rf build-asan/sim-cache build-asan/sim-cache-cold
  if [ -d build/tests/sim_cache ]; then cp -r build/tests/sim_cache build-asan/sim-cache; fi
  export HYP_SIM_CACHE="$PWD/build-asan/sim-cache"
  # one retry: LeakSanitizer's exit-time tracer occasionally crashes itself ("Tracer caught signal
  # 11") after every check of a test passed (seen once in test_exec_sim); a real finding repeats
  (cd build-asan && ctest --output-on-failure -j"$(nproc)" --timeout 900 -L unit --repeat until-pass:2)
fi
