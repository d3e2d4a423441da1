#!/usr/bin/env bash
# v2128 on a device: the batch host buffers are pinned (dev->host_alloc) and uploaded by
# asynchronous copies on a copy stream that the compute stream waits for through an event
# (runtime/device/exec_dev_copy.c); HYP_PINNED_BATCH=0 keeps pageable buffers and copies on the
# default stream. 3 steps of tiny (AdamW, 2-step warmup) on sim and on the cuda stand-ins (sm_90,
# seeded random stream delays: an upload read before the compute stream waited, or a buffer
# overwritten while its copy was pending, would change the loss): every untimed metric and the
# final weights bit-identical with and without (the same bytes reach the same device buffers before
# the same kernels: no tolerance). The stand-in's libcuda counts asynchronous copies by kind of host
# memory (HYP_STANDIN_COPY_STATS): with the switch on, at least 2 uploads a step (tokens, targets)
# move from pageable to pinned and the total is unchanged. ~15 s.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 HYP_SIM_CACHE="$BUILD/tests/sim_cache" HYP_STANDIN_SEED=7
LIBDIR="$BUILD/standins"
[ -f "$LIBDIR/libcuda.so.1" ] || { echo "FAIL $LIBDIR/libcuda.so.1: stand-in not built (tests/standins; needs the CUDA headers)"; exit 1; }
kjv_corpus "$TMP/c.txt" 50000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" --val-fraction 0.1 >/dev/null
# a fixed folder: the simulator's module cache keys on a kernel's path, so reruns compile nothing
OUT="$BUILD/tests/pinned_copies_v2128"
rm -rf "$OUT" && mkdir -p "$OUT"
R=(--data "$TMP/data" --eval-every 0 --sample 0 --steps 3 --seq 8)
G=(specs/v2500.yaml --batch 2 --seq 16 --model tiny --enable adamw,clip,warmup --set v2130.warmup_steps=2)
stat() { sed -nE "s/^cuda standin: async copies: HtoD ([0-9]+) pinned ([0-9]+) pageable.*/\\$2/p" "$1"; }

expect gen_sim 0 "rendered for sim" -- "$GEN" "${G[@]}" --target sim -o "$OUT/sim"
expect gen_sm_90 0 "for sm_90" -- "$GEN" "${G[@]}" --target sm_90 -o "$OUT/sm90"
for t in sim sm90; do
  env=(); [ $t = sm90 ] && env=(HYP_CUDA_LIBDIR="$LIBDIR" HYP_STANDIN_COPY_STATS=1)
  env "${env[@]}" HYP_PINNED_BATCH=0 "$OUT/$t/train" "${R[@]}" --ckpt-dir "$TMP/$t.ck0" --metrics "$TMP/$t.0.jsonl" > "$TMP/$t.0.out" 2>&1
  env "${env[@]}" "$OUT/$t/train" "${R[@]}" --ckpt-dir "$TMP/$t.ck1" --metrics "$TMP/$t.1.jsonl" > "$TMP/$t.1.out" 2>&1
  check "${t}_trains_pageable" test -f "$TMP/$t.ck0/step_00000003/model.safetensors"
  check "${t}_trains_pinned" test -f "$TMP/$t.ck1/step_00000003/model.safetensors"
  check "test_v2128_${t}_pinned_equals_pageable_every_metric_bit_for_bit" test "$(untimed "$TMP/$t.1.jsonl")" = "$(untimed "$TMP/$t.0.jsonl")"
  check "test_v2128_${t}_pinned_equals_pageable_final_weights" cmp -s "$TMP/$t.ck1/step_00000003/model.safetensors" "$TMP/$t.ck0/step_00000003/model.safetensors"
done
grep -q "(Hyperion stand-in)" "$TMP/sm90.1.out" || { echo "FAIL not the stand-in"; head "$TMP/sm90.1.out"; }
p0=$(stat "$TMP/sm90.0.out" 1) q0=$(stat "$TMP/sm90.0.out" 2) p1=$(stat "$TMP/sm90.1.out" 1) q1=$(stat "$TMP/sm90.1.out" 2)
echo "    stand-in async HtoD copies: pageable buffers $p0 pinned + $q0 pageable; pinned buffers $p1 pinned + $q1 pageable"
check test_v2128_standin_counts_copies test -n "$p0" -a -n "$p1"
check test_v2128_standin_uploads_move_to_pinned test $((${p1:-0} - ${p0:-0})) -ge 6
check test_v2128_standin_same_copies_in_all test $((${p1:-0} + ${q1:-0})) = $((${p0:-1} + ${q0:-0}))
finish
