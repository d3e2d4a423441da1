#!/usr/bin/env bash
# The predicted tables the README and docs/perf-model.md show (the seed-003 ladder on an H100 for
# llama-176m-qknorm B=8 and gpt2-124m B=64; gpt2-124m and llama3-8b on A100/H100/H200) equal what
# scripts/perf_ladder.sh computes now from the plans and kernel costs: a change to a template's
# cost, a plan, the executor's launches or a hardware file that moves a prediction fails here, and
# the tables are regenerated with it (bash scripts/perf_ladder.sh build TABLE, pasted between the
# markers: README perf-ladder, docs perf-table:ladder|gpt2|llama3). ~5 s (16 trainers rendered with --no-compile: the model reads no cubin).
source "$(dirname "$0")/lib.sh" "$1"
bash "$ROOT/scripts/perf_ladder.sh" "$BUILD" all > "$TMP/now.md" 2>"$TMP/err"
check ladder_script_runs test -s "$TMP/now.md" -a ! -s "$TMP/err"
cat "$TMP/err" | head -5
# the script prints the tables in the order ladder, gpt2, llama3, blank-line separated
awk -v d="$TMP" 'BEGIN { n = split("ladder gpt2 llama3", names, " "); i = 1 }
  /^$/ { i++; next } { print > (d "/now_" names[i] ".md") }' "$TMP/now.md"
section() { # section FILE MARKER: the lines between <!-- MARKER:begin --> and <!-- MARKER:end -->
  sed -n "/<!-- $2:begin -->/,/<!-- $2:end -->/p" "$1" | sed '1d;$d'
}
same() { # same NAME WANT-FILE HAVE-FILE WHERE
  if ! check "$1" cmp -s "$2" "$3"; then
    diff "$3" "$2" | sed 's/^/    /'
    echo "    $4 is stale: run bash scripts/perf_ladder.sh build and paste the table between its markers"
  fi
}
section "$ROOT/README.md" perf-ladder > "$TMP/readme.md"
same test_v2187_readme_ladder_equals_the_model "$TMP/now_ladder.md" "$TMP/readme.md" "README.md's ladder"
for t in ladder gpt2 llama3; do
  section "$ROOT/docs/perf-model.md" "perf-table:$t" > "$TMP/doc_$t.md"
  same "test_perf_doc_${t}_equals_the_model" "$TMP/now_$t.md" "$TMP/doc_$t.md" "docs/perf-model.md's $t table"
done
echo "perf ladder: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
