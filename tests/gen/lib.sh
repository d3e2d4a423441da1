# lib.sh — helpers for the shell tests of the gen CLI: expect(), a temp dir, the final tally.
# Each test sources this with the build directory as $1.
set -u
BUILD=${1:?usage: test_X.sh BUILD_DIR}
GEN="$BUILD/generator/gen"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TMP=$(mktemp -d /tmp/hyp-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# waiting OpenMP threads sleep and waiting MPI ranks yield (ctest -j runs tests side by side: a
# spinning waiter takes the core its neighbour needs); scripts/test.sh sets the same for every test
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
PASS=0
FAIL=0
# kjv_corpus FILE [BYTES]: the trainer tests' fixed corpus, BYTES (300000) of the King James Bible's first five
# books (Debian package bible-kjv) without verse labels. Never the spec files' text: it changes with
# every edit of a spec, and a loss check on it drifts with them.
kjv_corpus() {
  command -v bible >/dev/null || { echo "FAIL: bible missing — run scripts/install-deps.sh (Debian package bible-kjv)"; exit 1; }
  bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c "${2:-300000}" > "$1"
}

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
# A metrics JSONL without the fields that time the run (tokens/s, step and wait times, MFU, the
# checkpoint's time, the gradient all-reduce's grad_comm_*_s) or count its communication (comm_bytes, comm_calls: ZeRO stages and
# all-reduce algorithms move other bytes for the same sums): what two runs of the same numbers
# must agree on bit for bit.
untimed() { sed -E 's/"(tokens_per_s[a-z0-9_]*|step_s|data_wait_s|comm_wait_s|grad_comm_[a-z]*_s|mfu|ckpt_s|comm_bytes|comm_calls)":[^,}]*,?//g' "$1"; }

# Recompute equivalence (v2101, v2111): PAIR_SPEC (test-name prefix) and PAIR_ENABLE (the alias
# added to the second trainer) set by the caller; $T the tree, $TMP/data the corpus, $DIFF st_diff.
# recompute_pair NAME TARGET MODEL STEPS SELECTION [gen args for the second trainer...]: a trainer
# without and one with PAIR_ENABLE ($BOTH: gen args for both) trained side by side; losses equal,
# weights equal to the last bit, the activation arena smaller.
act_bytes() { tr -d ' \n\t' < "$1/plan.json" | grep -oE '"act_bytes":[0-9]+' | cut -d: -f2; }
same_losses() { # same_losses A.jsonl B.jsonl STEPS: every loss printed identically
  [ "$(losses "$1" | wc -l)" = "$3" ] && [ "$(losses "$1")" = "$(losses "$2")" ]
}
BOTH=()
recompute_pair() {
  local name=$1 target=$2 model=$3 steps=$4 sel=$5; shift 5
  local shape=(--batch 4 --seq 32)
  [ "$target" = sim ] && shape=(--batch 2 --seq 16)
  "$GEN" "$T" --enable "$sel" --model "$model" --target "$target" "${shape[@]}" ${BOTH[@]+"${BOTH[@]}"} -o "$TMP/$name.base" >/dev/null 2>&1
  expect "gen_${name}" 0 "wrote" -- "$GEN" "$T" --enable "$sel,$PAIR_ENABLE" "$@" ${BOTH[@]+"${BOTH[@]}"} --model "$model" --target "$target" "${shape[@]}" -o "$TMP/$name.rc"
  for v in base rc; do
    "$TMP/$name.$v/train" --data "$TMP/data" --steps "$steps" --eval-every 0 --lr 3e-3 \
      --metrics "$TMP/$name.$v.jsonl" --ckpt-dir "$TMP/$name.$v.ck" > "$TMP/$name.$v.log" 2>&1
  done
  check "test_${PAIR_SPEC}_${name}_losses_bit_identical" same_losses "$TMP/$name.base.jsonl" "$TMP/$name.rc.jsonl" "$steps"
  local ck; ck=$(printf "step_%08d/model.safetensors" "$steps")
  expect "test_${PAIR_SPEC}_${name}_weights_bit_identical" 0 "max \|a-b\| = 0 " -- "$DIFF" "$TMP/$name.base.ck/$ck" "$TMP/$name.rc.ck/$ck" 0
  local a b; a=$(act_bytes "$TMP/$name.base"); b=$(act_bytes "$TMP/$name.rc")
  echo "    $name: activation arena $a B without, $b B with $PAIR_ENABLE"
  check "test_${PAIR_SPEC}_${name}_arena_smaller" test "$b" -lt "$a"
}

finish() {
  echo "$PASS passed, $FAIL failed"
  [ "$FAIL" -eq 0 ]
}
