#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole ctest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@"
