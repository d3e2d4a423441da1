#!/usr/bin/env bash
# Regenerates the seed corpus tests/fuzz/corpus/<target>/seed_* with the project's own writers:
# plan.json files from gen (several technique sets on tests/fuzz/fuzz-tiny.yaml), everything else
# from fuzz_seeds (fuzz_seeds.c). Crash regressions (corpus/<target>/crash-*) are kept.
# Usage: tests/fuzz/make_corpus.sh [BUILD_DIR]   (default build/; needs build/fuzz from the build)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="$(cd "${1:-$ROOT/build}" && pwd)"
C="$ROOT/tests/fuzz/corpus"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$BUILD/fuzz/fuzz_seeds" "$TMP/seeds"
for d in "$TMP"/seeds/*/; do
  t="$(basename "$d")"
  mkdir -p "$C/$t"
  rm -f "$C/$t"/seed_*
  cp "$d"/seed_* "$C/$t/"
done
mkdir -p "$C/plan"
rm -f "$C/plan"/seed_*
cd "$ROOT"
i=0
for enable in "adamw" "adamw,clip,memory-planning" "lion,bf16" "muon" "fp8" "sft" "dpo" "grpo" "zero2"; do
  i=$((i + 1))
  if "$BUILD/generator/gen" specs/v2500.yaml --enable "$enable" --model tests/fuzz/fuzz-tiny.yaml --batch 2 --seq 8 \
       -o "$TMP/p$i" >/dev/null 2>"$TMP/err"; then
    python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])), separators=(",", ":")))' \
      "$TMP/p$i/plan.json" > "$C/plan/seed_${enable//,/_}.json"
  else
    echo "make_corpus: gen --enable $enable: $(tail -1 "$TMP/err") (skipped)"
  fi
done
