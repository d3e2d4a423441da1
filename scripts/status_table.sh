#!/usr/bin/env bash
# status_table.sh — the README's status table by branch, generated from the specs so nobody keeps
# it by hand: for each branch of specs/v2500.yaml (in the tree's order) the ids whose spec file says
# `status: implemented|partial|planned|advisory`. Prints the markdown table; with --update it
# replaces the block between the README's `<!-- status-table:begin -->` and `<!-- status-table:end -->`
# lines. Never edits anything else; tests/gen/test_docs.sh checks the README's block equals this.
# It reads the two top-level keys `branch:` and `status:` of each spec file (the closed schema of
# specs/SCHEMA.md keeps them top-level scalars).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

table() {
  # one pass: the tree gives the branches in order, each spec file its branch and status
  awk 'FNR == 1 { tree = (FILENAME ~ /v2500\.yaml$/) }
       tree && /^branches:/ { b = 1; next } tree && b && /^[a-z]/ { b = 0 }
       tree && b && /^  - id:/ { nb++; order[nb] = $3; cur = $3 }
       tree && b && /^    title:/ { t = $0; sub(/^    title: */, "", t); gsub(/"/, "", t); title[cur] = t }
       !tree && FNR == 1 { n = split(FILENAME, parts, "/"); sid[FILENAME] = substr(parts[n], 1, 5); total++ }
       !tree && /^branch: / { br[FILENAME] = $2 }
       !tree && /^status: / { st[FILENAME] = $2 }
       END {
         ns = split("implemented partial planned advisory", S, " ")
         print "| branch | specs | implemented | partial | planned | advisory |"
         print "|---|---|---|---|---|---|"
         # file names sort by id (vNNNN_...), so each cell lists ids in order
         m = 0; for (f in sid) files[++m] = f
         for (i = 2; i <= m; i++) { x = files[i]; j = i - 1; while (j > 0 && files[j] > x) { files[j + 1] = files[j]; j-- } files[j + 1] = x }
         for (k = 1; k <= nb; k++) {
           b = order[k]; row = ""; cnt = 0
           for (s = 1; s <= ns; s++) {
             ids = ""; c = 0
             for (i = 1; i <= m; i++) { f = files[i]; if (br[f] == b && st[f] == S[s]) { ids = ids (c ? " " : "") sid[f]; c++ } }
             cnt += c; all[s] += c
             row = row " | " c (c ? ": " ids : "")
           }
           print "| " title[b] " (`" b "`) | " cnt row " |"
         }
         printf "| all | %d", total; for (s = 1; s <= ns; s++) printf " | %d", all[s]; print " |"
       }' "$ROOT/specs/v2500.yaml" "$ROOT"/specs/*/v2[0-9][0-9][0-9]_*.yaml
}

case "${1:-}" in
  "") table ;;
  --update)
    t=$(mktemp); trap 'rm -f "$t"' EXIT
    table > "$t.tab"
    awk -v tab="$t.tab" '/^<!-- status-table:begin -->$/ { print; while ((getline l < tab) > 0) print l; skip = 1; next }
         /^<!-- status-table:end -->$/ { skip = 0 } !skip' "$ROOT/README.md" > "$t"
    grep -q '^<!-- status-table:end -->$' "$t" || { echo "README.md: no status-table block — add the begin/end lines"; rm -f "$t.tab"; exit 2; }
    cat "$t" > "$ROOT/README.md"; rm -f "$t.tab"
    echo "README.md: status table updated" ;;
  *) echo "status_table.sh: unknown argument '$1' — run it without arguments (print) or with --update"; exit 2 ;;
esac
