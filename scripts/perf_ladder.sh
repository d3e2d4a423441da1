#!/usr/bin/env bash
# The performance model's predictions that the README and docs/perf-model.md show, regenerated:
# (1) the seed-003 ladder on an H100 — llama-176m-qknorm, B=8, T=1024, --target sm_90, each step one
# more --enable, tokens/s per GPU predicted by `gen perf --hw h100-sxm` for the plan the trainer
# executes, next to seed 003's claimed figures; (2) gpt2-124m, B=64, T=1024, bf16 + flash on A100,
# H100 and H200 with the device trainer's fp32 storage (before issue 27) and its bf16 storage (now).
# Prints markdown. tests/gen/test_perf_ladder.sh checks that the README's ladder equals its output.
# Usage: scripts/perf_ladder.sh [BUILD_DIR] [ladder|gpt2|all]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; WHAT=${2:-all}
GEN="$BUILD/generator/gen"
TMP=$(mktemp -d /tmp/hyp-ladder.XXXXXX); trap 'rm -rf "$TMP"' EXIT
tps() { # tps DIR HW [gen perf args]: predicted tokens/s per GPU
  "$GEN" perf "$1" --hw "$2" --json "${@:3}" | python3 -c "import json, sys; p = json.load(sys.stdin)['predictions'][0]; print(p['tokens_per_s_per_gpu'], p['mfu'])"
}
k() { python3 -c "import sys; v = float(sys.argv[1]); print(f'{v / 1e3:.1f}k' if v < 1e6 else f'{v / 1e6:.2f}M')" "$1"; }
if [ "$WHAT" = ladder ] || [ "$WHAT" = all ]; then
  echo "| step | seed 003 (claimed, tok/s) | ours, predicted tok/s per H100 (gen perf) | × |"
  echo "|---|---|---|---|"
  sel=adamw; prev=""
  for step in "fp32:25K" "bf16:45K (1.8x)" "flash:55K (1.2x)" "fp8:75K (1.36x)" "fusion:84K (1.12x)" "graphs:100–108K (compile)"; do
    name=${step%%:*}; seed=${step#*:}
    extra=()
    case $name in fp32) ;; graphs) extra=(--graphs) ;; *) sel="$sel,$name" ;; esac
    if [ "$name" != graphs ]; then
      "$GEN" specs/v2500.yaml --enable "$sel" --model llama-176m-qknorm --target sm_90 --batch 8 --seq 1024 -o "$TMP/l" >/dev/null 2>&1
    fi
    read -r v m <<< "$(tps "$TMP/l" h100-sxm "${extra[@]}")"
    x=""; [ -n "$prev" ] && x=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$v" "$prev")
    echo "| ${name/fp32/fp32 (adamw)} | $seed | $(k "$v") (MFU $(python3 -c "print(f'{100 * float(\"$m\"):.1f}%')")) | $x |"
    prev=$v
  done
fi
if [ "$WHAT" = gpt2 ] || [ "$WHAT" = all ]; then
  echo
  echo "| GPU | fp32 storage (before) | bf16 storage (now, the plan) |"
  echo "|---|---|---|"
  for t in "sm_80:a100-80gb:A100 80GB" "sm_90:h100-sxm:H100 SXM" "sm_90:h200:H200"; do
    IFS=: read -r tgt hw label <<< "$t"
    [ -d "$TMP/g_$tgt" ] || "$GEN" specs/v2500.yaml --enable bf16,flash --model gpt2-124m --target "$tgt" --batch 64 --seq 1024 -o "$TMP/g_$tgt" >/dev/null 2>&1
    [ -d "$TMP/f_$tgt" ] || "$GEN" specs/v2500.yaml --enable bf16,flash --set v2102.storage=fp32 --model gpt2-124m --target "$tgt" --batch 64 --seq 1024 -o "$TMP/f_$tgt" >/dev/null 2>&1
    read -r f fm <<< "$(tps "$TMP/f_$tgt" "$hw")"; read -r g gm <<< "$(tps "$TMP/g_$tgt" "$hw")"
    pct() { python3 -c "import sys; print(f'{100 * float(sys.argv[1]):.1f}%')" "$1"; }
    echo "| $label | $(k "$f") tok/s, MFU $(pct "$fm") | $(k "$g") tok/s, MFU $(pct "$gm") |"
  done
fi
