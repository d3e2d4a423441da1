#!/usr/bin/env bash
# v2158 QAT and v2159 INT8 on --target sim (the quant template's kernels under the simulator)
# against the cpu trainer (runtime/cpu/quant.c, oneDNN's int8 GEMM), a 2-layer GPT-2 style model
# (C 32), 6 steps: the fake quantization and the int8 GEMMs are bit-exact on both sides
# (tests/unit/test_quant_v2158_v2159.c checks each kernel), the other ops differ in summation
# order only (E2 + E3 of docs/test-tolerances.md for a model smaller than tiny, 6 steps). What
# enters a quantizer can still differ in its last bit, and a flipped rounding moves an element by
# a whole quantization step (E5). v2158 QAT quantizes the weights only (int4, amax/7 steps): they
# differ by lr * delta (delta ~ 1e-6, E3), a flip probability 2e-3 * 1e-6 * 7 / 0.1 = 1.4e-7 per
# weight and step, ~2% over the model's ~30K weights x 6 steps: losses within 1e-5 relative
# (the rare flip is the known residual risk; a wrong scale group moves the loss by >= 1e-3).
# v2159 INT8 also quantizes the activations per row (amax/127 steps): a fraction p ~ 1e-6 x 127
# = 1.3e-4 of them flip, a GEMM output's rms change 127^-1 sqrt(p) = 9e-5, averaged over 2 x 16
# tokens (/ 5.7) and adding over 6 steps: <= 1e-4 relative (a wrong per-row scale is off by
# O(1e-2)); and each technique moves the losses off the plain fp32 / bf16 sim run (it is on).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/model_yaml.sh"
export OMP_NUM_THREADS=1 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
kjv_corpus "$TMP/c.txt" 40000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null
gpt2_yaml mini 32 2 128 "a 2-layer GPT-2 style model for quick sim tests" > "$TMP/mini.yaml"
STEPS=6
run() { # NAME ENABLE TARGET [SET]: gen + $STEPS steps; sim trainers under the build tree (compile cache)
  local out="$TMP/$1"
  [ "$3" = sim ] && out="$BUILD/tests/sim_quant/$1"
  expect "gen_$1" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable "adamw,clip$2" ${4:+--set "$4"} --model "$TMP/mini.yaml" --target "$3" --batch 2 --seq 16 -o "$out" &&
  expect "train_$1" 0 "done: $STEPS steps" -- "$out/train" --data "$TMP/data" --steps $STEPS --eval-every 0 --sample 0 --metrics "$TMP/$1.jsonl"
}
maxrel() {
  paste <(losses "$TMP/$1.jsonl") <(losses "$TMP/$2.jsonl") |
    awk -v n="$STEPS" '{ k++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r }
                      END { if (k != n) { print "inf"; exit } printf "%.3g\n", m }'
}
within() { awk -v r="$1" -v t="$2" 'BEGIN { exit !(r != "inf" && r + 0 <= t + 0) }'; }
above() { awk -v r="$1" -v t="$2" 'BEGIN { exit !(r != "inf" && r + 0 > t + 0) }'; }
run qat_sim ",qat" sim v2158.group_size=16
run qat_cpu ",qat" cpu v2158.group_size=16
run f32_sim "" sim
run int8_sim ",int8" sim
run int8_cpu ",int8" cpu
run bf16_sim ",bf16" sim
r=$(maxrel qat_sim qat_cpu); echo "v2158 qat (int4, 16 columns per scale): sim vs cpu, $STEPS steps: max relative loss difference $r"
check test_v2158_sim_matches_cpu within "$r" 1e-5
r=$(maxrel qat_sim f32_sim); echo "v2158 qat vs fp32 (sim): $r"
check test_v2158_sim_qat_changes_the_losses above "$r" 1e-5
r=$(maxrel int8_sim int8_cpu); echo "v2159 int8 (per-row scales): sim vs cpu, $STEPS steps: max relative loss difference $r"
check test_v2159_sim_matches_cpu within "$r" 1e-4
r=$(maxrel int8_sim bf16_sim); echo "v2159 int8 vs bf16 (sim): $r"
check test_v2159_sim_int8_changes_the_losses above "$r" 1e-6
finish
