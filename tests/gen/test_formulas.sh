#!/usr/bin/env bash
# Unit tests of generator/lua/formulas.lua (sizing, memory and cost arithmetic) against values
# computed by hand: runs tests/lua/test_formulas.lua under the plain lua5.4 interpreter
# (installed by scripts/install-deps.sh). $1 (the build directory) is not needed.
cd "$(dirname "$0")/../.." || exit 1
if ! command -v lua5.4 >/dev/null 2>&1; then
  echo "FAIL lua5.4 not found — run scripts/install-deps.sh"
  exit 1
fi
exec lua5.4 tests/lua/test_formulas.lua
