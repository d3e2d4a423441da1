#!/usr/bin/env bash
# Installs the Debian packages Hyperion builds and runs with (idempotent; needs root or sudo).
# Why each one is chosen is in docs/dependencies.md (short form in README.md).
set -euo pipefail
PKGS=(build-essential cmake pkg-config git
      libyaml-dev liblua5.4-dev lua5.4 libcjson-dev libxxhash-dev libpcre2-dev zlib1g-dev libzstd-dev liblbfgs-dev
      libdnnl-dev liblapack-dev libomp-dev libopenmpi-dev openmpi-bin
      clang libclang-rt-14-dev
      bible-kjv fortunes)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
