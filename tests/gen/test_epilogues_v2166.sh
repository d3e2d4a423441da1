#!/usr/bin/env bash
# v2166 GEMM epilogues on the device trainer: gen marks each matmul_fwd feeding a GELU
# (attrs.epilogue "gelu": cuBLASLt GELU_AUX_BIAS) and each matmul_bwd whose input gradient only a
# gelu_bwd reads ("dgelu": DGELU); runtime/device/exec_dev.c folds those ops into the GEMMs.
# Measured here: the marks (4 + 4 on tiny), the launches that go (the simulator's per-launch count
# file: no gelu_fwd/gelu_bwd kernel runs), the perf model's launches per step, and the numbers:
# - fp32, 5 steps against the same trainer without epilogues: the epilogue computes GELU as
#   0.5x(1+tanhf(u)) (device_gemm.c, cuBLASLt's form), the gelu template as x*sigmoid(2u): the same
#   function in two roundings, a few fp32 ulps apart (E6), so the step-1 loss agrees to E2 (3e-6
#   relative) and later steps within E2 + E3: 2e-5 relative (docs/test-tolerances.md).
# - bf16 storage, 5 steps: those ulp differences flip bf16 roundings (E5) of a fraction ~1e-6/3.9e-3
#   of the GELU outputs and gradients; with the sim-bf16 argument of test_sim_trainer.sh (20 steps:
#   1.2e-3) 5 steps stay within 1e-3 relative.
# A plan whose mark names ops that are not there is refused at load (exit 2).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=2 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
kjv_corpus "$TMP/c.txt" 100000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null
OUT="$BUILD/tests/epilogues" # fixed folders: the simulator's module cache keys on the kernel path
mkdir -p "$OUT"
STEPS=5
RUN=(--data "$TMP/data" --steps $STEPS --eval-every 0)
marks() { tr -d ' \n\t' < "$1/plan.json" | grep -o "\"epilogue\":\"$2\"" | wc -l; }
# within REL: every loss of A within REL relative of B's, STEPS of them
within() {
  paste <(losses "$1") <(losses "$2") | awk -v r="$3" -v s=$STEPS '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > r * $2) bad = 1 } END { exit bad || n != s }'
}
for dt in fp32 bf16; do
  sel=adamw,clip,fusion; [ $dt = bf16 ] && sel=$sel,bf16
  rm -rf "$OUT/$dt".*
  expect "gen_${dt}_epilogues" 0 "rendered for sim" -- \
    "$GEN" specs/v2500.yaml --enable $sel --model tiny --target sim --batch 2 --seq 16 -o "$OUT/$dt.epi"
  check "v2166_${dt}_audit_names_the_sites" grep -q "cuBLASLt epilogues at 4 GEMM+GELU sites .* and 4 dGELU sites" "$OUT/$dt.epi/audit.md"
  expect "gen_${dt}_no_epilogues" 0 "rendered for sim" -- \
    "$GEN" specs/v2500.yaml --enable $sel --model tiny --target sim --batch 2 --seq 16 --set v2166.epilogues=false -o "$TMP/$dt.plain"
  check "v2166_${dt}_plan_marks_4_gelu_4_dgelu" test "$(marks "$OUT/$dt.epi" gelu) $(marks "$OUT/$dt.epi" dgelu)" = "4 4"
  check "v2166_${dt}_plan_without_marks" test "$(marks "$TMP/$dt.plain" gelu) $(marks "$TMP/$dt.plain" dgelu)" = "0 0"
  # the two trainers render the same kernels (the gelu ops stay in the plan): the plain plan runs
  # beside the epilogue plan's kernels, so the simulator compiles them once
  check "v2166_${dt}_same_kernels" diff -r "$OUT/$dt.epi/kernels" "$TMP/$dt.plain/kernels"
  cp "$TMP/$dt.plain/plan.json" "$OUT/$dt.epi/plain.json"
  for v in epi plain; do
    plan=plan.json; [ $v = plain ] && plan=plain.json
    expect "${dt}_${v}_trains" 0 "done: $STEPS steps" -- "$OUT/$dt.epi/train" "${RUN[@]}" --plan "$OUT/$dt.epi/$plan" --metrics "$TMP/$dt.$v.jsonl"
    # one step again with the simulator's per-launch count file (instrumented modules: slower)
    rm -f "$TMP/$dt.$v.count"
    expect "${dt}_${v}_counted_step" 0 "done: 1 steps" -- env HYP_SIM_COUNT_FILE="$TMP/$dt.$v.count" "$OUT/$dt.epi/train" "${RUN[@]}" \
      --steps 1 --plan "$OUT/$dt.epi/$plan"
  done
  # per step the plain trainer launches gelu_fwd and gelu_bwd once per layer (4 + 4); the
  # epilogue trainer none
  check "test_v2166_${dt}_no_gelu_launches_with_epilogues" test "$(grep -c '^gelu_' "$TMP/$dt.epi.count")" = 0
  check "v2166_${dt}_plain_launches_gelu" test "$(grep -c '^gelu_' "$TMP/$dt.plain.count")" = 8
  echo "$dt: kernel launches per step $(wc -l < "$TMP/$dt.plain.count") -> $(wc -l < "$TMP/$dt.epi.count")"
  paste <(losses "$TMP/$dt.epi.jsonl") <(losses "$TMP/$dt.plain.jsonl") | head -$STEPS | sed "s/^/$dt epilogues vs plain: /"
done
check test_v2166_fp32_step1_loss_within_3e-6 awk -v a="$(losses "$TMP/fp32.epi.jsonl" | head -1)" -v b="$(losses "$TMP/fp32.plain.jsonl" | head -1)" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= 3e-6 * b) }'
check test_v2166_fp32_5_steps_within_2e-5 within "$TMP/fp32.epi.jsonl" "$TMP/fp32.plain.jsonl" 2e-5
check test_v2166_bf16_5_steps_within_1e-3 within "$TMP/bf16.epi.jsonl" "$TMP/bf16.plain.jsonl" 1e-3
# the perf model reads the same marks: 8 launches (gelu) and 8 memsets (dP, dA) fewer per step
l_epi=$("$GEN" perf "$OUT/fp32.epi" --hw h100-sxm | grep -oE '\([0-9]+ launches\)' | head -1 | tr -dc 0-9)
l_plain=$("$GEN" perf "$TMP/fp32.plain" --hw h100-sxm | grep -oE '\([0-9]+ launches\)' | head -1 | tr -dc 0-9)
echo "perf model, launches per step: $l_plain -> $l_epi"
check test_v2166_perf_model_16_launches_fewer test "$((l_plain - l_epi))" = 16
# a hand-edited plan: the QKV GEMM marked gelu (no GELU follows it) is refused at load
cp -r "$OUT/fp32.epi" "$TMP/bad"
python3 - "$TMP/bad/plan.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
next(o for o in p["forward"] if o["op"] == "matmul_fwd")["attrs"]["epilogue"] = "gelu"
json.dump(p, open(sys.argv[1], "w"))
EOF
expect test_v2166_bad_mark_refused 2 "attrs.epilogue.*gelu.*regenerate" -- "$TMP/bad/train" "${RUN[@]}"
# cpu: no marks, and gen says why
expect v2166_cpu_not_applied 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,fusion --model tiny --target cpu -o "$TMP/cpu"
check v2166_cpu_plan_without_marks test "$(marks "$TMP/cpu" gelu)" = 0
finish
