#!/usr/bin/env bash
# v2160 FP8 and v2166 fusion on the device executor (runtime/exec_dev.c), on --target sim, for a
# 2-layer model (C 32; GPT-2 style, and a llama-style one with RMSNorm, RoPE, QK norm, GQA):
# - fp8 (HYBRID, delayed scaling): the sim trainer's cast kernels (fp8.scale/scale_inv/amax[slot]
#   bindings), its fp8 GEMMs (plan fp8.gemm "fp8": TN GEMMs of the fp8 bytes, scale_inv as the A/B
#   scales) and exec_dev_fp8_step's amax-history update match the cpu trainer (fake-quantized,
#   runtime/fp8.c) over 8 steps within 2e-3 relative: the quantization is bit-exact on both sides,
#   the GEMM summation orders and the AdamW kernel differ in last bits, which can flip an fp8
#   rounding of an element (up to 1/8 of it in E4M3). Bound (docs/test-tolerances.md E1, E5): a
#   last-bit difference of rms u sqrt(32) = 3.4e-7 (C 32) flips a fraction p = 3.4e-7 / 2^-4 =
#   5.4e-6 of the roundings, a GEMM output's rms change 2^-3 sqrt(p) = 2.9e-4; ~9 fp8 GEMMs in a
#   chain (x sqrt(9)), the loss's mean over 2 x 16 tokens (/ sqrt(32)), 8 steps adding linearly:
#   1.2e-3 <= 2e-3 (tests/unit/test_exec_sim.c checks every cast and fp8 GEMM exactly); current
#   scaling too (the scale from each tensor's amax on the device); a wrong scale_inv is off O(1);
#   and fp8 moves the losses off the fp32 run by more than 1e-4 relative somewhere (it is on).
# - fusion: the sim trainer running the fused launch sites (residual+norm fwd/bwd, RoPE inside
#   the attention permutes) matches the unfused sim trainer within 1e-5 relative (same kernels'
#   arithmetic in another grouping: E2 + E3 of docs/test-tolerances.md for a model smaller than
#   tiny, <= 1e-5 over 8 steps; a residual added twice or a norm skipped is off by O(1)) and the
#   cpu trainer within 1e-4 (the same plus the oneDNN-vs-kernel orders, growing with the steps).
# - a damaged fusion site is refused with a clear message (exit 2).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/model_yaml.sh"
export OMP_NUM_THREADS=2 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
kjv_corpus "$TMP/c.txt" 50000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null
gpt2_yaml mini 32 2 128 "a 2-layer GPT-2 style model for quick sim tests" > "$TMP/mini.yaml"
cat > "$TMP/minil.yaml" <<'EOF'
name: mini-llama
description: a 2-layer llama-style model for quick sim tests
arch: llama
vocab_size: 256
context: 64
d_model: 32
n_layers: 2
n_heads: 2
n_kv_heads: 1
ffn_hidden: 128
norm: rmsnorm
norm_eps: 1.0e-05
activation: swiglu
position: rope
rope_theta: 10000.0
qk_norm: true
tied_embeddings: false
bias: false
tokenizer: byte
EOF
STEPS=8
# run NAME ENABLE MODEL TARGET [SET]: gen + 8 steps, metrics in $TMP/NAME.jsonl. The sim trainers of a
# model share one directory under the build tree: the sim cache keys modules by source and path,
# so kernels common to the variants (and every kernel on a rerun) compile once.
run() {
  local out="$TMP/$1"
  [ "$4" = sim ] && out="$BUILD/tests/sim_fp8/$3"
  expect "gen_$1" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable "adamw,clip$2" ${5:+--set "$5"} --model "$TMP/$3.yaml" --target "$4" --batch 2 --seq 16 -o "$out" &&
  expect "train_$1" 0 "done: $STEPS steps" -- "$out/train" --data "$TMP/data" --steps $STEPS --eval-every 0 --metrics "$TMP/$1.jsonl"
}
# maxrel A B: the largest |a-b|/|b| over the steps' losses (fails unless both have $STEPS)
maxrel() {
  paste <(losses "$TMP/$1.jsonl") <(losses "$TMP/$2.jsonl") |
    awk -v n="$STEPS" '{ k++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r }
                      END { if (k != n) { print "inf"; exit } printf "%.3g\n", m }'
}
within() { awk -v r="$1" -v t="$2" 'BEGIN { exit !(r != "inf" && r + 0 <= t + 0) }'; }

run fp8_sim ",fp8" mini sim
run fp8_cpu ",fp8" mini cpu
run cur_sim ",fp8" mini sim v2160.scaling=current
run cur_cpu ",fp8" mini cpu v2160.scaling=current
run f32_sim "" mini sim
r=$(maxrel fp8_sim fp8_cpu); echo "fp8: sim vs cpu, $STEPS steps: max relative loss difference $r"
check test_v2160_sim_fp8_matches_cpu within "$r" 2e-3
r=$(maxrel cur_sim cur_cpu); echo "fp8 current scaling: sim vs cpu, $STEPS steps: $r"
check test_v2160_sim_fp8_current_matches_cpu within "$r" 2e-3
r=$(maxrel fp8_sim f32_sim); echo "fp8 vs fp32 (sim): max relative loss difference $r"
check fp8_changes_the_losses awk -v r="$r" 'BEGIN { exit !(r != "inf" && r + 0 > 1e-4) }'

run fu_gpt_sim ",fusion" mini sim
r=$(maxrel fu_gpt_sim f32_sim); echo "fusion (gpt2, residual+layernorm): fused vs unfused sim: $r"
check test_v2166_sim_fused_matches_unfused_gpt2 within "$r" 1e-5
run fu_llama_sim ",fusion" minil sim
# a damaged manifest: a fusion site whose ops are reversed is refused before any step (exit 2);
# the next run regenerates the directory
K="$BUILD/tests/sim_fp8/minil/kernels/kernels.json"
sed -i '0,/"ops":\t\[\([0-9]*\), \([0-9]*\)\]/s//"ops":\t[\2, \1]/' "$K"
expect sim_refuses_bad_fusion_site 2 "fusion residual_rmsnorm_fwd: a site's ops do not form a fusable pair.*regenerate" -- \
  "$BUILD/tests/sim_fp8/minil/train" --data "$TMP/data" --steps 1
run llama_sim "" minil sim
run llama_cpu "" minil cpu
r=$(maxrel fu_llama_sim llama_sim); echo "fusion (llama, residual+rmsnorm, rope+attention): fused vs unfused sim: $r"
check test_v2166_sim_fused_matches_unfused_llama within "$r" 1e-5
r=$(maxrel fu_llama_sim llama_cpu); echo "fusion (llama): fused sim vs cpu: $r"
check test_v2166_sim_fused_matches_cpu_llama within "$r" 1e-4

finish
