#!/usr/bin/env bash
# v2138 distributed Muon under ZeRO (cpu backend, train_optim_own_matrix): with zero1/zero2 the
# momentum (and AdamW's moments) are sharded by floats across ranks, each Muon matrix's
# Newton-Schulz runs on the one rank it is assigned to (largest first to the least loaded), the
# results are summed over ranks and every rank updates its own floats. Measured here:
# np=1 ZeRO-1 equals plain (stage 0) data parallelism bit for bit; np=2 ZeRO-1 and ZeRO-2 equal
# np=1 within the tolerances below; a stopped np=2 ZeRO-1 run resumes from its sharded checkpoint
# bit for bit; the optimizer-state bytes per rank (the trainer's memory line) halve from np=1 to
# np=2; gen refuses ZeRO-3 and ZeRO on a device target with the reason.
#
# Tolerances: np=2 sums gradients in another order than np=1 (as test_muon.sh's plain dp, whose
# header derives them): losses 2e-5 relative, weights 1e-4 absolute after 8 steps at lr 2e-3.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
kjv_corpus "$TMP/corpus.txt" 200000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
COMMON=(--data "$TMP/data" --seq 64 --lr 2e-3 --steps 8 --ckpt-every 8 --eval-every 0)
MPI=(mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS)
close() { # close FILE_A FILE_B: 8 losses, each within 2e-5 relative
  paste <(losses "$1") <(losses "$2") | awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5 * $1) bad = 1 } END { exit bad || n != 8 }'
}
optim_bytes() { grep -oE "rank 0/$2 memory .*optimizer [0-9]+ B" "$1" | grep -oE "optimizer [0-9]+" | grep -oE "[0-9]+"; }

expect gen_muon_dp 0 "wrote" -- "$GEN" specs/v2500.yaml --enable muon,adamw,dp --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/dp"
expect gen_muon_zero1 0 "wrote" -- "$GEN" specs/v2500.yaml --enable muon,adamw,dp,zero1 --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/z1"
expect gen_muon_zero2 0 "wrote" -- "$GEN" specs/v2500.yaml --enable muon,adamw,dp,zero2 --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/z2"
expect test_v2138_zero3_refused 2 "Muon updates whole matrices, and ZeRO stage 3 shards the parameters" -- "$GEN" specs/v2500.yaml --enable muon,dp,zero3 --model tiny --target cpu -o "$TMP/x1"
expect test_v2138_zero1_sim_refused 2 "distributed Muon \(ZeRO stage 1\) runs on the cpu backend only" -- "$GEN" specs/v2500.yaml --enable muon,dp,zero1 --model tiny --target sim -o "$TMP/x2"

"$TMP/dp/train" "${COMMON[@]}" --batch 4 --metrics "$TMP/dp.jsonl" --ckpt-dir "$TMP/ckdp" > "$TMP/dp.log" 2>&1
"$TMP/z1/train" "${COMMON[@]}" --batch 4 --metrics "$TMP/np1.jsonl" --ckpt-dir "$TMP/ck1" > "$TMP/np1.log" 2>&1
"${MPI[@]}" "$TMP/z1/train" "${COMMON[@]}" --batch 2 --metrics "$TMP/np2.jsonl" --ckpt-dir "$TMP/ck2" > "$TMP/np2.log" 2>&1
"${MPI[@]}" "$TMP/z2/train" "${COMMON[@]}" --batch 2 --metrics "$TMP/np2z2.jsonl" --ckpt-dir "$TMP/ckz2" > "$TMP/np2z2.log" 2>&1
for f in dp np1 np2 np2z2; do check "run_$f" grep -q "done: 8 steps" "$TMP/$f.log"; done
paste <(losses "$TMP/np1.jsonl") <(losses "$TMP/np2.jsonl") <(losses "$TMP/np2z2.jsonl")
check test_v2138_zero1_np1_losses_bit_exact_plain_dp test "$(losses "$TMP/np1.jsonl" | wc -l)" = 8 -a "$(losses "$TMP/np1.jsonl")" = "$(losses "$TMP/dp.jsonl")"
expect test_v2138_zero1_np1_weights_bit_exact_plain_dp 0 "max" -- "$DIFF" "$TMP/ckdp/step_00000008/model.safetensors" "$TMP/ck1/step_00000008/model.safetensors" 0
check test_v2138_zero1_np2_losses_equal_np1 close "$TMP/np1.jsonl" "$TMP/np2.jsonl"
expect test_v2138_zero1_np2_weights_equal_np1 0 "max" -- "$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/ck2/step_00000008" 1e-4
"$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/ck2/step_00000008" 1 | tail -1
check test_v2138_zero2_np2_losses_equal_np1 close "$TMP/np1.jsonl" "$TMP/np2z2.jsonl"
expect test_v2138_zero2_np2_weights_equal_np1 0 "max" -- "$DIFF" "$TMP/ck1/step_00000008/model.safetensors" "$TMP/ckz2/step_00000008" 1e-4
# the momentum is sharded: the np=2 checkpoint's two shards together hold np=1's m within 1e-4
expect test_v2138_zero1_np2_momentum_equals_np1 0 "max" -- "$DIFF" "$TMP/ck1/step_00000008/optimizer.safetensors" "$TMP/ck2/step_00000008" 1e-4
b1=$(optim_bytes "$TMP/np1.log" 1); b2=$(optim_bytes "$TMP/np2.log" 2)
echo "optimizer-state bytes per rank, Muon ZeRO-1: np=1 $b1, np=2 $b2"
check test_v2138_zero1_np2_state_bytes_per_rank_halve awk -v a="$b1" -v b="$b2" 'BEGIN { exit !(a > 0 && b > 0 && b * 2 - a <= 16 * 4 && a - b * 2 <= 16 * 4) }'
# a stopped np=2 ZeRO-1 run resumes from its sharded checkpoint bit for bit
expect np2_first_4 0 "done: 4 steps" -- "${MPI[@]}" "$TMP/z1/train" "${COMMON[@]}" --batch 2 --stop-after 4 --metrics "$TMP/r.jsonl" --ckpt-dir "$TMP/ckr"
expect np2_resumes 0 "resumed from" -- "${MPI[@]}" "$TMP/z1/train" "${COMMON[@]}" --batch 2 --metrics "$TMP/r.jsonl" --ckpt-dir "$TMP/ckr" --resume
check test_v2138_zero1_np2_resume_losses_bit_exact test "$(losses "$TMP/r.jsonl" | wc -l)" = 8 -a "$(losses "$TMP/r.jsonl")" = "$(losses "$TMP/np2.jsonl")"
expect test_v2138_zero1_np2_resume_weights_bit_exact 0 "max" -- "$DIFF" "$TMP/ck2/step_00000008" "$TMP/ckr/step_00000008" 0
finish
