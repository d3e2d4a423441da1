#!/usr/bin/env bash
# Issue 12 convergence at equal steps, short form of bench/bench_precision_convergence.sh (which it
# runs): tiny B=8 x T=64, 60 steps at lr 2e-3 (warmup 20, cosine), the fixed KJV slice, seed 1, one
# thread; fp32, bf16 (v2102), fp16 + loss scaling (v2102 fp16 + v2162) and SR-bf16 (v2161: bf16
# parameters, no fp32 master). Asserted: each row's validation loss after 60 steps within 0.05 of
# fp32's. Measured 2026-11-25: fp32 2.3625; bf16 -0.0059, fp16+ls +0.0004, SR-bf16 +0.0029 (a
# broken update shows: a bf16 bias read as f32 gave SR-bf16 +0.42). ~25 s.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
out=$(STEPS=60 EVAL=60 ROWS="fp32 bf16 fp16-ls sr-bf16" bash bench/bench_precision_convergence.sh "$BUILD" 2>&1)
echo "$out"
for rid in bf16:v2102 fp16-ls:v2162 sr-bf16:v2161; do
  row=${rid%:*}
  d=$(echo "$out" | awk -v r="$row" '$1 == r { print $(NF - 1) }')
  check "test_${rid#*:}_${row}_val_within_0.05_of_fp32_after_60_steps" \
    awk -v d="${d:-nan}" 'BEGIN { if (d == "nan") exit 1; if (d < 0) d = -d; exit !(d < 0.05) }'
done
check test_v2161_sr-bf16_params_2_bytes_per_parameter bash -c "echo '$out' | awk '\$1 == \"sr-bf16\" { exit !(\$NF == \"2.00\") }'"
finish
