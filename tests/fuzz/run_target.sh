#!/usr/bin/env bash
# Runs one fuzz target briefly, as ctest's test_fuzz_<target>: first every committed input of
# tests/fuzz/corpus/<target>/ (the seeds and the crash regressions, which must all pass), then
# SECONDS of fuzzing from them. New corpus entries go to a temp dir that is deleted (never into
# git); a crash, leak, UB report, timeout or out-of-memory fails the test, and the input that
# caused it is kept as BUILD/fuzz/artifacts/<target>-crash-* with the command to replay it.
# Usage: run_target.sh BUILD TARGET SECONDS
set -uo pipefail
BUILD="$1" T="$2" SECS="$3"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="$BUILD/fuzz/fuzz_$T"
SEEDS="$ROOT/tests/fuzz/corpus/$T"
[ -x "$BIN" ] || { echo "$BIN: missing — build with clang and libclang-rt-14-dev installed (scripts/install-deps.sh)"; exit 1; }
ART="$BUILD/fuzz/artifacts"
mkdir -p "$ART"
NEW="$(mktemp -d)"
trap 'rm -rf "$NEW"' EXIT
# -max_len: the largest seed plus room to grow; -timeout: any input over 10 s is a hang;
# -rss_limit_mb / -malloc_limit_mb: an allocation sized by a field of the file fails the run
COMMON=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 "-artifact_prefix=$ART/$T-")
echo "replaying $(ls "$SEEDS" | wc -l) committed inputs of $SEEDS"
"$BIN" "${COMMON[@]}" $(ls -d "$SEEDS"/*) 2>&1 | tail -n 40 || { echo "FAILED: a committed input of $SEEDS"; exit 1; }
"$BIN" "${COMMON[@]}" -max_total_time="$SECS" -max_len=16384 "$NEW" "$SEEDS" > "$NEW.log" 2>&1
rc=$?
grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|stat::average_exec_per_sec|Done )" "$NEW.log"
if [ $rc -ne 0 ]; then
  tail -n 60 "$NEW.log"
  echo "FAILED: fuzz_$T found a crash; replay: $BIN $ART/$T-crash-* (add the file to $SEEDS once fixed)"
fi
rm -f "$NEW.log"
exit $rc
