#!/usr/bin/env bash
# Fuzzes the runtime's readers at length: every target of tests/fuzz (or the ones named) for
# SECONDS each, one after another, starting from the committed corpus. What the fuzzer learns
# (new corpus entries) stays in build/fuzz/corpus/<target>/, which git ignores, and grows across
# runs; crashes land in build/fuzz/artifacts/<target>-crash-* — fix the reader, then commit the
# crash file as tests/fuzz/corpus/<target>/crash-<what> so CI replays it.
# Usage: scripts/fuzz.sh SECONDS [TARGET...]     (FUZZ_JOBS=N runs N processes per target)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:?usage: scripts/fuzz.sh SECONDS_PER_TARGET [TARGET...]}
shift
[ -d build/fuzz ] || bash scripts/build.sh
cmake --build build --target hyp_fuzz >/dev/null
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(plan safetensors ckpt ckpt_delta hf tokenizer data docs chat)
JOBS=${FUZZ_JOBS:-1}
mkdir -p build/fuzz/artifacts
fail=0
for t in "${TARGETS[@]}"; do
  mkdir -p "build/fuzz/corpus/$t"
  echo "== fuzz_$t: $SECS s"
  args=(-max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=16384
        -print_final_stats=1 "-artifact_prefix=build/fuzz/artifacts/$t-")
  [ "$JOBS" -gt 1 ] && args+=(-fork="$JOBS" -ignore_crashes=1)
  if ! build/fuzz/fuzz_"$t" "${args[@]}" "build/fuzz/corpus/$t" "tests/fuzz/corpus/$t" > "build/fuzz/$t.log" 2>&1; then
    fail=1
    echo "   FOUND: $(grep -m1 -E 'ERROR|runtime error|fuzz:' "build/fuzz/$t.log" || tail -n 1 "build/fuzz/$t.log")"
  fi
  grep -E "stat::(number_of_executed_units|average_exec_per_sec)" "build/fuzz/$t.log" | sed 's/^/   /'
done
ls build/fuzz/artifacts 2>/dev/null | sed 's/^/artifact: build\/fuzz\/artifacts\//'
exit $fail
