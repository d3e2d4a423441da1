#!/usr/bin/env bash
# The README's predicted ladder (seed-003 stack on an H100, `gen perf`) equals what
# scripts/perf_ladder.sh computes now from the plans and kernel costs: a change to a template's
# cost, a plan or the hardware file that moves a prediction shows here, and the README is updated
# with it (bash scripts/perf_ladder.sh build ladder, pasted between the perf-ladder markers).
source "$(dirname "$0")/lib.sh" "$1"
bash "$ROOT/scripts/perf_ladder.sh" "$BUILD" ladder > "$TMP/now.md" 2>"$TMP/err"
check ladder_script_runs test -s "$TMP/now.md" -a ! -s "$TMP/err"
sed -n '/<!-- perf-ladder:begin -->/,/<!-- perf-ladder:end -->/p' "$ROOT/README.md" | sed '1d;$d' > "$TMP/readme.md"
if ! check test_v2187_readme_ladder_equals_the_model cmp -s "$TMP/now.md" "$TMP/readme.md"; then
  diff "$TMP/readme.md" "$TMP/now.md" | sed 's/^/    /'
  echo "    README.md's ladder is stale: run bash scripts/perf_ladder.sh build ladder and paste it between the perf-ladder markers"
fi
echo "perf ladder: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
