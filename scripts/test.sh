#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole ctest suite, then builds the
# runtime, gen and the C unit tests with ASan+UBSan into build-asan/ and runs the unit tests there
# (ctest label "unit"). HYP_SKIP_SANITIZE=1 skips the sanitizer pass (e.g. for a quick local run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@")

if [ "${HYP_SKIP_SANITIZE:-}" != "1" ]; then
  WERROR=OFF; [ "${CI:-}" = "true" ] && WERROR=ON
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DHYP_SANITIZE=ON -DHYP_WERROR=$WERROR >/dev/null
  cmake --build build-asan -j"$(nproc)"
  # one retry: LeakSanitizer's exit-time tracer occasionally crashes itself ("Tracer caught signal
  # 11") after every check of a test passed (seen once in test_exec_sim); a real finding repeats
  (cd build-asan && ctest --output-on-failure -j"$(nproc)" --timeout 900 -L unit --repeat until-pass:2)
fi
