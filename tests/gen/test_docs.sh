#!/usr/bin/env bash
# test_docs.sh — the README and docs/ say what the tree is (tests/gen/docs_check.py does the reading):
# every repository path they name exists, every gen/train command they show uses a real subcommand
# and only flags the tool's usage lists (the cheap complete ones — gen list/explain/audit of the
# tree, gen size of a model — are run), the README's folder map equals the tree's folders, and its
# status table equals scripts/status_table.sh's. Then the checker itself is shown to fail on planted
# pages: a renamed path, a stale link, a flag no tool has, an unknown subcommand, a folder map missing
# a folder and naming a gone one, a status table that disagrees with specs/. Never writes outside $TMP.
source "$(dirname "$0")/lib.sh"
TRAIN="$BUILD/runtime/hyperion-train"
CHECK=(python3 "$ROOT/tests/gen/docs_check.py" "$ROOT" "$GEN" "$TRAIN")

expect test_docs_readme_and_docs_match_the_tree 0 "docs_check: [0-9]+ pages, [0-9]+ repository paths, [0-9]+ commands \([1-9][0-9]* run\), 0 problems" -- "${CHECK[@]}"
expect test_docs_design_page_present 0 "" -- test -s "$ROOT/docs/DESIGN.md"
expect test_docs_status_table_script_prints_every_spec 0 "^\| all \| 100 \|" -- bash -c "bash '$ROOT/scripts/status_table.sh' | tail -1"
expect test_docs_status_table_bad_argument 2 "status_table.sh: unknown argument '--bogus'" -- bash "$ROOT/scripts/status_table.sh" --bogus

# --- planted pages: the checker must fail on each ---------------------------------------------------
cat > "$TMP/planted.md" <<'EOF'
The device layer lives in `runtime/device.h` and `runtime/device/device.h`; see [the plan](runtime/core/PLAN.md).
The optimizer registry is `optim_registry.c`; the kernel dialect `kernels/DIALECTS.md`.

```sh
build/generator/gen size --model tiny --no-such-flag 3
$G frobnicate specs/v2500.yaml
gen list specs/v2500.yaml --json
out/tiny/train --data data/kjv --steps 10 --warp-speed
```
EOF
out=$("${CHECK[@]}" "$TMP/planted.md" 2>&1); rc=$?
check test_docs_planted_page_fails test "$rc" = 1
check test_docs_catches_renamed_path grep -q 'planted.md:1: `runtime/device.h` names no file' <<< "$out"
check test_docs_existing_path_passes bash -c "! grep -q '\`runtime/device/device.h\`' <<< \"\$1\"" _ "$out"
check test_docs_catches_stale_link grep -q 'planted.md:1: link (runtime/core/PLAN.md) points at nothing' <<< "$out"
check test_docs_catches_unknown_file_name grep -q 'planted.md:2: `optim_registry.c` is no file' <<< "$out"
check test_docs_catches_renamed_upper_case_doc grep -q 'planted.md:2: `kernels/DIALECTS.md` names no file' <<< "$out"
check test_docs_catches_unknown_gen_flag grep -q 'gen size does not list --no-such-flag' <<< "$out"
check test_docs_catches_unknown_subcommand grep -q "gen has no subcommand 'frobnicate'" <<< "$out"
check test_docs_catches_unknown_train_flag grep -q 'does not list --warp-speed' <<< "$out"
check test_docs_counts_the_planted_problems grep -q 'docs_check: 1 pages, .* 8 problems$' <<< "$out"

# a README whose folder map lost runtime/optim/ and still names runtime/io/, and whose status table
# moved one spec
mkdir -p "$TMP/r"
awk '/^<!-- (folder-map|status-table):begin -->$/ { in_block = 1; print; next }
     /^<!-- (folder-map|status-table):end -->$/ { in_block = 0; print; next }
     !in_block { next }
     /^\| `runtime\/optim\/` \|/ { print "| `runtime/io/` | files |"; next }
     /^\| Post-Training/ { sub(/6: v2192/, "6: v2191") }
     { print }' "$ROOT/README.md" > "$TMP/r/README.md"
out=$("${CHECK[@]}" "$TMP/r/README.md" 2>&1); rc=$?
check test_docs_planted_readme_fails test "$rc" = 1
check test_docs_catches_folder_not_in_tree grep -q 'the folder map lists `runtime/io/`, which is not in the tree' <<< "$out"
check test_docs_catches_folder_missing_from_map grep -q 'the folder map does not list `runtime/optim/`' <<< "$out"
check test_docs_catches_status_table_drift grep -q 'the status table differs from specs/' <<< "$out"
[ "$FAIL" -eq 0 ] || printf '%s\n' "$out" | sed 's/^/    /'

finish
