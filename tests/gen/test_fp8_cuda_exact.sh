# test_fp8_cuda_exact.sh — runtime/core/fp8.c against CUDA's cuda_fp8.h, bit for bit (issue #6, v2160).
# Needs only the CUDA toolkit HEADERS (cuda_fp8.h's host code path; no GPU, no nvcc): compiles
# runtime/core/fp8.c as C and tests/fp8/fp8_exact.cpp as C++ against it, then
#   1. fp8_exact check: all 256 codes of E4M3 and E5M2 (fp8 -> fp32) and ~4.5M fp32 patterns per
#      format (strided sweep of all 2^32, denormals, every tie, the saturation threshold, inf,
#      NaN, -0) through hyp_fp8_from_float, hyp_fp8_cast and hyp_fp8_fake_quantize;
#   2. the committed tests/fixtures/fp8_reference.txt (which tests/unit/test_fp8.c checks on
#      machines without CUDA) equals what cuda_fp8.h produces here;
#   3. with HYP_FP8_EXHAUSTIVE=1, all 2^32 fp32 patterns (~2 min).
# Without the headers it prints "skipped: ..." and passes. To regenerate the fixture:
#   HYP_FP8_REGEN=1 bash tests/gen/test_fp8_cuda_exact.sh BUILD_DIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" "$@"
cd "$ROOT"

CUDA_INC="${CUDA_HOME:-/usr/local/cuda}/include"
if [ ! -f "$CUDA_INC/cuda_fp8.h" ]; then
  echo "skipped: $CUDA_INC/cuda_fp8.h not found (no CUDA toolkit headers here; set CUDA_HOME);" \
       "tests/unit/test_fp8.c still checks runtime/core/fp8.c against the committed cuda_fp8.h table"
  exit 0
fi
CC_=${CC:-cc}
CXX_=${CXX:-c++}
if ! command -v "$CXX_" >/dev/null 2>&1; then
  echo "skipped: no C++ compiler ($CXX_) to build the cuda_fp8.h reference"
  exit 0
fi

expect "compile runtime/core/fp8.c (C11)" 0 "" -- \
  "$CC_" -std=c11 -O2 -fopenmp -Wall -Wextra -Werror -Iruntime/cpu -Iruntime/core -c runtime/core/fp8.c -o "$TMP/fp8.o"
expect "compile tests/fp8/fp8_exact.cpp against cuda_fp8.h" 0 "" -- \
  "$CXX_" -std=c++17 -O2 -fopenmp -Wall -Wextra -I"$CUDA_INC" -Iruntime/cpu -Iruntime/core tests/fp8/fp8_exact.cpp \
  "$TMP/fp8.o" -o "$TMP/fp8_exact"
expect "bit-exact with cuda_fp8.h (codes, sweep, ties, saturation, specials)" 0 \
  "8 passed, 0 failed" -- "$TMP/fp8_exact" check
expect "generate the reference table" 0 "" -- "$TMP/fp8_exact" gen "$TMP/fp8_reference.txt"
if [ "${HYP_FP8_REGEN:-0}" = 1 ]; then
  cp "$TMP/fp8_reference.txt" tests/fixtures/fp8_reference.txt && echo "regenerated tests/fixtures/fp8_reference.txt"
fi
check "committed tests/fixtures/fp8_reference.txt == cuda_fp8.h output" \
  cmp -s "$TMP/fp8_reference.txt" tests/fixtures/fp8_reference.txt
if [ "${HYP_FP8_EXHAUSTIVE:-0}" = 1 ]; then
  expect "exhaustive: all 2^32 fp32 patterns, both formats" 0 "2 passed, 0 failed" -- \
    "$TMP/fp8_exact" exhaustive
fi
finish
