# lib.sh — helpers for the shell tests of the gen CLI: expect(), a temp dir, the final tally.
# Each test sources this with the build directory as $1.
set -u
BUILD=${1:?usage: test_X.sh BUILD_DIR}
GEN="$BUILD/generator/gen"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TMP=$(mktemp -d /tmp/hyp-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PASS=0
FAIL=0

# expect NAME RC REGEX -- command...   (REGEX is matched against stdout+stderr)
expect() {
  local name=$1 want_rc=$2 regex=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want_rc" ]; then
    echo "FAIL $name: exit $rc, wanted $want_rc"; echo "$out" | head -20 | sed 's/^/    /'
    FAIL=$((FAIL + 1)); return 1
  fi
  if [ -n "$regex" ] && ! printf "%s\n" "$out" | grep -Eq -- "$regex"; then
    echo "FAIL $name: output does not match /$regex/"; echo "$out" | head -20 | sed 's/^/    /'
    FAIL=$((FAIL + 1)); return 1
  fi
  if printf '%s' "$out" | grep -q "internal error"; then
    echo "FAIL $name: internal error"; echo "$out" | head -20 | sed 's/^/    /'
    FAIL=$((FAIL + 1)); return 1
  fi
  echo "ok   $name"
  PASS=$((PASS + 1))
}

check() { # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then echo "ok   $name"; PASS=$((PASS + 1)); else echo "FAIL $name"; FAIL=$((FAIL + 1)); fi
}

# Values of one key of a metrics JSONL file (train --metrics): every line's, the first, the last.
metric() { grep -o "\"$2\":[^,}]*" "$1" | cut -d: -f2; }
first_metric() { metric "$1" "$2" | head -1; }
last_metric() { metric "$1" "$2" | tail -1; }
losses() { metric "$1" loss; }

finish() {
  echo "$PASS passed, $FAIL failed"
  [ "$FAIL" -eq 0 ]
}
