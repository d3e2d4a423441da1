#!/usr/bin/env bash
# Fuzzes the YAML loader with libFuzzer (clang -fsanitize=fuzzer,address,undefined) for a bounded
# time, starting from the corpus in tests/fuzz/corpus plus every spec file of the tree.
# FUZZ_SECONDS overrides the budget (default 30 s in CI).
source "$(dirname "$0")/lib.sh"
if ! command -v clang >/dev/null; then echo "clang not found: install it (scripts/install-deps.sh)"; exit 1; fi
BIN="$BUILD/fuzz_yaml"
CFLAGS="$(pkg-config --cflags yaml-0.1 lua5.4) -I$ROOT/generator -I$ROOT/runtime/core -I$ROOT/runtime/core -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE"
LIBS="$(pkg-config --libs yaml-0.1 lua5.4)"
expect fuzzer_builds 0 "" -- clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  $CFLAGS "$ROOT/tests/fuzz/fuzz_yaml.c" "$ROOT/generator/yaml_lua.c" "$ROOT/runtime/core/fsio.c" $LIBS -o "$BIN"
mkdir -p "$TMP/corpus"
cp "$ROOT"/tests/fuzz/corpus/* "$TMP/corpus/" 2>/dev/null
find "$ROOT/specs" -name '*.yaml' | head -200 | while read -r f; do cp "$f" "$TMP/corpus/$(echo "$f" | md5sum | cut -c1-12).yaml"; done
SECS=${FUZZ_SECONDS:-30}
expect fuzz_${SECS}s_no_crash 0 "Done [0-9]+ runs" -- "$BIN" -max_total_time="$SECS" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=0 "$TMP/corpus"
finish
