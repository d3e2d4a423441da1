#!/usr/bin/env bash
# v2158 QAT and v2159 INT8 on the cpu, tiny at B=8, T=64, $STEPS steps (default 300, warmup 10,
# lr 2e-3, seed 1), on a fixed KJV slice (the first 600 kB of Genesis-Deuteronomy), one thread:
# - INT8 (granularity row and tensor) against the fp32 and bf16 trainers at equal steps: the
#   validation loss after $STEPS steps (16 eval batches) and the trainer's tokens/s;
# - QAT against post-training quantization: the fp32 run's final weights evaluated through the
#   QAT trainer's quantizer (PTQ: the same fake_quant applied to them) against the QAT run's
#   weights evaluated quantized, for int4 per 128 columns (the default), int4 / int3 / int2 per
#   output channel; the fp32 loss of each QAT run's weights unquantized too.
# Prints a markdown table (docs/memory-and-precision.md's). Usage: bench/bench_quant_cpu.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}; STEPS=${STEPS:-300}
GEN="$BUILD/generator/gen"
export OMP_NUM_THREADS=1
TMP=$(mktemp -d /tmp/hyp-bench-quant.XXXXXX); trap 'rm -rf "$TMP"' EXIT
bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 600000 > "$TMP/corpus.txt" || true
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" --val-fraction 0.1 >/dev/null
ST=$(printf "step_%08d" "$STEPS")
mk() { "$GEN" specs/v2500.yaml --enable "adamw,clip,warmup$2" ${3:+--set "$3"} ${4:+--set "$4"} --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/$1" >/dev/null 2>&1; }
train() { # NAME: $STEPS steps, final checkpoint; echoes tokens/s (the last steps')
  "$TMP/$1/train" --data "$TMP/data" --steps "$STEPS" --lr 2e-3 --eval-every 0 --sample 0 --seed 1 --ckpt-dir "$TMP/ck_$1" --ckpt-every "$STEPS" 2>&1 |
    grep -o "last [0-9]* steps [0-9]* tok/s" | grep -o "[0-9]* tok/s" | grep -o "[0-9]*"
}
ev() { # TRAINER CKPT: the validation loss of CKPT's weights through TRAINER's ops (lr 0: no update)
  "$TMP/$1/train" --data "$TMP/data" --init-from "$TMP/ck_$2/$ST" --steps 1 --lr 0 --eval-every 1 --eval-batches 16 --sample 0 2>&1 |
    sed -n 's/.*| val \([0-9.]*\).*/\1/p'
}
mk fp32 ""; mk bf16 ",bf16"; mk int8 ",int8"; mk int8t ",int8" v2159.granularity=tensor
echo "| trainer ($STEPS steps, tiny, B=8 T=64) | val loss | - fp32 | tokens/s (1 thread) |"
echo "|---|---|---|---|"
for t in fp32 bf16 int8 int8t; do tps=$(train $t); v=$(ev $t $t); [ $t = fp32 ] && v32=$v
  printf "| %s | %s | %+.4f | %s |\n" "$t" "$v" "$(awk -v a="$v" -v b="$v32" 'BEGIN { print a - b }')" "$tps"; done
echo
mk q4 ",qat"; mk q4c ",qat" v2158.group_size=0; mk q3c ",qat" v2158.bits=3 v2158.group_size=0; mk q2c ",qat" v2158.bits=2 v2158.group_size=0
echo "| quantizer | fp32 weights, PTQ | QAT weights, quantized | QAT - PTQ | QAT weights, unquantized |"
echo "|---|---|---|---|---|"
for q in q4 q4c q3c q2c; do train $q >/dev/null; p=$(ev $q fp32); a=$(ev $q $q); u=$(ev fp32 $q)
  printf "| %s | %s | %s | %+.4f | %s |\n" "$q" "$p" "$a" "$(awk -v a="$a" -v b="$p" 'BEGIN { print a - b }')" "$u"; done
