#!/usr/bin/env bash
# Configures and builds Hyperion into build/ (Release, warnings as errors when CI=true).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
WERROR=OFF; [ "${CI:-}" = "true" ] && WERROR=ON
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DHYP_WERROR=$WERROR >/dev/null
cmake --build build -j"$(nproc)"
