#!/usr/bin/env bash
# The performance model's predictions that the README and docs/perf-model.md show, regenerated from
# the plans and kernel costs (`gen perf`), as markdown:
#   ladder  the seed-003 stack on an H100, each row one more --enable (tokens/s per GPU predicted for
#           the plan the trainer executes) for the seed's model and batch (llama-176m-qknorm, B=8,
#           T=1024) and for gpt2-124m (B=64, T=1024), next to seed 003's claimed figures
#   gpt2    gpt2-124m, B=64, T=1024, bf16 + flash on A100, H100 and H200: fp32 storage (the device
#           trainer before issue 27), bf16 storage (now), + CUDA graphs, + GEMM epilogues (what-if)
#   llama3  llama3-8b, B=1, T=8192, bf16 + flash on A100, H100 and H200 (compute only)
# Published figures of other trainers are not computed here: docs/perf-model.md cites them beside
# these tables. tests/gen/test_perf_ladder.sh checks that README.md and docs/perf-model.md carry
# exactly this output between their perf-table markers.
# Usage: scripts/perf_ladder.sh [BUILD_DIR] [ladder|gpt2|llama3|all]   (all: every table, blank-line separated)
# Never: a figure typed by hand — every number below comes from gen perf.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; WHAT=${2:-all}
case $WHAT in ladder|gpt2|llama3|all) ;; *) echo "scripts/perf_ladder.sh: unknown table '$WHAT' — use ladder, gpt2, llama3 or all" >&2; exit 2 ;; esac
GEN="$BUILD/generator/gen"
TMP=$(mktemp -d /tmp/hyp-ladder.XXXXXX); trap 'rm -rf "$TMP"' EXIT
# gen_dir NAME MODEL TARGET B T ENABLE [more gen args]: generate once into $TMP/NAME; rendered,
# not compiled (--no-compile): gen perf reads the plan and the kernel manifest, never a cubin
gen_dir() {
  [ -d "$TMP/$1" ] || "$GEN" specs/v2500.yaml --model "$2" --target "$3" --batch "$4" --seq "$5" --enable "$6" --no-compile "${@:7}" \
    -o "$TMP/$1" >/dev/null 2>"$TMP/$1.err" || { cat "$TMP/$1.err" >&2; exit 1; }
}
# pred DIR HW [gen perf args]: "tokens/s-per-GPU MFU"; a prediction with undeclared kernels fails
pred() {
  "$GEN" perf "$1" --hw "$2" --json "${@:3}" 2>"$TMP/perf.err" | python3 -c "
import json, sys
p = json.load(sys.stdin)['predictions'][0]
assert not p['undeclared'], 'undeclared kernels: ' + ', '.join(p['undeclared'])
print(p['tokens_per_s_per_gpu'], p['mfu'])"
}
# fmt, ratio: awk (C printf on the same doubles: the digits python's format gives, ~0.2 s less a call)
fmt() { awk -v v="$1" -v m="$2" 'BEGIN { if (v < 1e6) printf "%.1fk", v / 1e3; else printf "%.2fM", v / 1e6; printf " (MFU %.1f%%)\n", 100 * m }'; }
ratio() { [ -z "$2" ] && return 0; awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f\n", a / b }'; }
sep=""
if [ "$WHAT" = ladder ] || [ "$WHAT" = all ]; then
  echo "| step (--enable) | seed 003, claimed tok/s | llama-176m-qknorm B=8, predicted per H100 | × | gpt2-124m B=64, predicted per H100 | × |"
  echo "|---|---|---|---|---|---|"
  sel=adamw; pl=""; pg=""
  # the seed's rows; ours: fusion = residual+norm fusion (no fused-QKV spec), no FP8-attention spec,
  # AdamW is one fused kernel from the start, CUDA graphs in place of torch.compile; epilogues: v2166
  for step in "fp32:~25K" "bf16:~45K (1.8x)" "flash:~55K (1.2x)" "fp8:~75K (1.36x)" "fusion:~84K (1.12x, fused QKV)" \
              "fp8 attention:~89K (1.06x)" "fused adamw:~93K (1.04x)" "graphs:~100–108K (1.08–1.16x, torch.compile)" \
              "epilogues:—"; do
    name=${step%%:*}; seed=${step#*:}; extra=()
    case $name in
      fp32) ;;
      "fp8 attention"|"fused adamw") echo "| $name | $seed | no such step (see below) | | no such step | |"; continue ;;
      graphs) extra=(--graphs) ;;
      epilogues) extra=(--graphs --epilogues) ;;
      *) sel="$sel,$name" ;;
    esac
    gen_dir "l_$sel" llama-176m-qknorm sm_90 8 1024 "$sel"
    gen_dir "g_$sel" gpt2-124m sm_90 64 1024 "$sel"
    read -r vl ml <<< "$(pred "$TMP/l_$sel" h100-sxm "${extra[@]}")"
    read -r vg mg <<< "$(pred "$TMP/g_$sel" h100-sxm "${extra[@]}")"
    label=$name; [ "$name" = epilogues ] && label="epilogues (what-if, v2166)"
    echo "| $label | $seed | $(fmt "$vl" "$ml") | $(ratio "$vl" "$pl") | $(fmt "$vg" "$mg") | $(ratio "$vg" "$pg") |"
    pl=$vl; pg=$vg
  done
  sep=1
fi
GPUS=("sm_80:a100-80gb:A100 80GB" "sm_90:h100-sxm:H100 SXM" "sm_90:h200:H200")
if [ "$WHAT" = gpt2 ] || [ "$WHAT" = all ]; then
  [ -n "$sep" ] && echo
  echo "| GPU | fp32 storage (before issue 27) | bf16 storage (now, the plan) | + CUDA graphs | + GEMM epilogues (what-if) |"
  echo "|---|---|---|---|---|"
  for t in "${GPUS[@]}"; do
    IFS=: read -r tgt hw label <<< "$t"
    gen_dir "f_$tgt" gpt2-124m "$tgt" 64 1024 bf16,flash --set v2102.storage=fp32
    gen_dir "b_$tgt" gpt2-124m "$tgt" 64 1024 bf16,flash
    row="| $label"
    for args in "f_$tgt:" "b_$tgt:" "b_$tgt:--graphs" "b_$tgt:--graphs --epilogues"; do
      # shellcheck disable=SC2086
      read -r v m <<< "$(pred "$TMP/${args%%:*}" "$hw" ${args#*:})"
      row="$row | $(fmt "$v" "$m")"
    done
    echo "$row |"
  done
  sep=1
fi
if [ "$WHAT" = llama3 ] || [ "$WHAT" = all ]; then
  [ -n "$sep" ] && echo
  echo "| GPU | llama3-8b B=1 T=8192, bf16 + flash (the plan) | + CUDA graphs |"
  echo "|---|---|---|"
  for t in "${GPUS[@]}"; do
    IFS=: read -r tgt hw label <<< "$t"
    gen_dir "l8_$tgt" llama3-8b "$tgt" 1 8192 bf16,flash
    read -r v m <<< "$(pred "$TMP/l8_$tgt" "$hw")"
    read -r vg mg <<< "$(pred "$TMP/l8_$tgt" "$hw" --graphs)"
    echo "| $label | $(fmt "$v" "$m") | $(fmt "$vg" "$mg") |"
  done
fi
