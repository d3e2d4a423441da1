#!/usr/bin/env bash
# coverage.sh — line coverage of runtime/device/dev_cuda.c from the cuda stand-in tests: configures
# a second build (default build-cov/) with dev_cuda.c alone instrumented for gcov
# (HYP_COVERAGE_DEV_CUDA), builds it, runs the ctest tests labelled "standin" and the trainer test
# (test_standin_trainers), and prints gcov's summary and the lines never executed. Never touches
# build/. Usage: bash tests/standins/coverage.sh [BUILD_DIR] [ctest -R regex]
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-cov}
TESTS=${2:-'^test_standin_'}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DHYP_COVERAGE_DEV_CUDA=ON >/dev/null
cmake --build "$B" -j"$(nproc)" >/dev/null
OBJ=$(dirname "$(find "$B/runtime" -name 'dev_cuda.c.o' | head -1)")
find "$B" -name 'dev_cuda.c.gcda' -delete
(cd "$B" && ctest -R "$TESTS" --output-on-failure) || echo "coverage.sh: some tests failed (coverage below is still what ran)"
cd "$OBJ"
gcov -b dev_cuda.c.gcda > gcov.txt 2>&1 || gcov -o . "$OLDPWD/runtime/device/dev_cuda.c" > gcov.txt 2>&1
grep -A3 "dev_cuda.c'" gcov.txt | head -4
echo "never executed (gcov '#####'):"
grep -n "#####" dev_cuda.c.gcov | cut -c1-140 | head -80
