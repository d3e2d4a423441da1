#!/usr/bin/env bash
# v2108 context parallelism trained on the cpu backend: a tiny trainer generated with
# `--enable dp,flash,sp` (cp 2, zigzag: rank r holds chunks r and 3-r of every 32-token row, T = 16
# per rank) under mpirun -np 2 gives the losses of the np=1 flash trainer for 10 AdamW steps with
# clipping active; so does the contiguous split, cp 2 x dp 2 at np 4 against np=1 on the whole
# batch, and the v2116 ring (--enable ...,ring-attention). The attention is runtime/cpu/ops_ring.c's
# blockwise attention over the cp group: without v2116 K/V all-gathered per layer and their
# gradients reduce-scattered (plan train.cp_comm "allgather"), with v2116 shifted around the ring,
# each shift overlapping the block compute ("ring"); the position embedding reads the tokens'
# global positions; loss and gradients are reduced over dp x cp. The bytes each rank sends on its
# cp group per step (counted by coll) equal each mode's formula, per layer with |kv| = B (T/cp)
# 2 n_kv hd 4 B: all-gather (cp-1)|kv| forward + 2(cp-1)|kv| backward, ring (cp-1)|kv| forward +
# (2cp-1)|kv| backward.
# Refused (exit 2, one line): a world size cp does not divide, a --seq 2cp does not divide, cp
# without flash or dp, --resume.
#
# Tolerance (docs/test-tolerances.md): every op but attention computes the same per-token sums on
# the rank's rows; the ring sums each softmax in another order (chunk pairs merged through their
# logsumexp; the op's own bound is derived in tests/unit/test_ring_attention_v2108.c) and the
# gradients of the replicated weights are summed over the ranks' tokens in another order (E1, E7).
# Through the network E2 and AdamW's amplification E3 give the bound 2e-5 relative on every loss,
# as for the other fp32 orders of tiny (test_tp_train_v2106). What it still catches (measured once
# by mutation): the position embedding read at local instead of global positions, 6.3e-4 at step 1
# and 4.0e-3 at step 2 (31x and 200x the bound).
# Memory: each cp rank's activation arena is half the np=1 trainer's (the plan's T is 16 of 32).
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
if ! command -v mpirun >/dev/null; then echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; fi
kjv_corpus "$TMP/corpus.txt" 400000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
G=("$GEN" specs/v2500.yaml --model tiny --target cpu --seq 32)
expect gen_cp2 0 "wrote" -- "${G[@]}" --batch 2 --enable adamw,clip,flash,dp,sp -o "$TMP/cp"
expect gen_cp2_contiguous 0 "wrote" -- "${G[@]}" --batch 2 --enable adamw,clip,flash,dp,sp --set v2108.layout=contiguous -o "$TMP/cpc"
expect gen_cp2_ring 0 "wrote" -- "${G[@]}" --batch 2 --enable adamw,clip,flash,dp,sp,ring-attention -o "$TMP/cpr"
expect gen_np1 0 "wrote" -- "${G[@]}" --batch 2 --enable adamw,clip,flash -o "$TMP/one"
expect gen_np1_b4 0 "wrote" -- "${G[@]}" --batch 4 --enable adamw,clip,flash -o "$TMP/one4"
check test_v2108_plan_is_one_ranks grep -q '"cp_layout":[[:space:]]*"zigzag"' "$TMP/cp/plan.json"
check test_v2108_plan_cp_comm_allgather grep -q '"cp_comm":[[:space:]]*"allgather"' "$TMP/cp/plan.json"
check test_v2116_plan_cp_comm_ring grep -q '"cp_comm":[[:space:]]*"ring"' "$TMP/cpr/plan.json"
check test_v2108_plan_has_ring_ops test "$(grep -c '"ring_attention_[fb]wd"' "$TMP/cp/plan.json")" = 8
C=(--data "$TMP/data" --steps 10 --eval-every 0 --lr 3e-3)
"$TMP/one/train" "${C[@]}" --metrics "$TMP/one.jsonl" > "$TMP/one.log" 2>&1
check np1_trains grep -q "done: 10 steps" "$TMP/one.log"
expect np1_b4 0 "done: 10 steps" -- "$TMP/one4/train" "${C[@]}" --metrics "$TMP/one4.jsonl"
mpirun -np 2 -x OMP_NUM_THREADS "$TMP/cp/train" "${C[@]}" --metrics "$TMP/cp.jsonl" > "$TMP/cp.log" 2>&1
mpirun -np 2 -x OMP_NUM_THREADS "$TMP/cpc/train" "${C[@]}" --metrics "$TMP/cpc.jsonl" > "$TMP/cpc.log" 2>&1
mpirun -np 4 -x OMP_NUM_THREADS "$TMP/cp/train" "${C[@]}" --metrics "$TMP/cpdp.jsonl" > "$TMP/cpdp.log" 2>&1
mpirun -np 2 -x OMP_NUM_THREADS "$TMP/cpr/train" "${C[@]}" --metrics "$TMP/cpr.jsonl" > "$TMP/cpr.log" 2>&1
grep -E "context parallel|cp traffic" "$TMP/cp.log" "$TMP/cpr.log" | head -4
act() { grep -o "activations [0-9.]* MiB" "$1" | head -1 | awk '{ print $2 }'; }
echo "    activation arena per rank: np=1 $(act "$TMP/one.log") MiB, cp 2 $(act "$TMP/cp.log") MiB"
check test_v2108_activations_halved awk -v a="$(act "$TMP/one.log")" -v b="$(act "$TMP/cp.log")" 'BEGIN { exit !(b > 0 && b <= a / 2 + 0.05) }' 
check test_v2108_np2_cp2_trains grep -q "done: 10 steps" "$TMP/cp.log"
check test_v2108_banner grep -q "context parallel (v2108): cp 2 x dp 1 = 2 ranks (cp ranks contiguous), zigzag split: each rank holds 16 of every 32 tokens" "$TMP/cp.log"
paste <(losses "$TMP/one.jsonl") <(losses "$TMP/cp.jsonl") <(losses "$TMP/cpc.jsonl") <(losses "$TMP/cpr.jsonl") <(losses "$TMP/one4.jsonl") <(losses "$TMP/cpdp.jsonl") |
  awk '{ printf "    step %2d: np=1 %s  cp2 zigzag %s  cp2 contiguous %s  cp2 ring %s | np=1 B=4 %s  cp2 x dp2 %s\n", NR, $1, $2, $3, $4, $5, $6 }'
close() { # every one of 10 losses within 2e-5 relative
  paste <(losses "$1") <(losses "$2") | awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5 * $1) bad = 1; if (d / $1 > w) w = d / $1 } END { printf "    worst |d|/loss %.1e\n", w; exit bad || n != 10 }'
}
check test_v2108_np2_cp2_zigzag_equals_np1 close "$TMP/one.jsonl" "$TMP/cp.jsonl"
check test_v2108_np2_cp2_contiguous_equals_np1 close "$TMP/one.jsonl" "$TMP/cpc.jsonl"
check test_v2108_np4_cp2_dp2_equals_np1 close "$TMP/one4.jsonl" "$TMP/cpdp.jsonl"
check test_v2116_np2_cp2_ring_equals_np1 close "$TMP/one.jsonl" "$TMP/cpr.jsonl"
# cp 2: the two modes make the same block calls in the same order; a block's dK/dV is the sum of
# the two ranks' parts, a + b in either mode (commutative): every loss equal, bit for bit (E0)
check test_v2116_ring_equals_allgather_bit_for_bit diff <(losses "$TMP/cp.jsonl") <(losses "$TMP/cpr.jsonl")
check test_v2116_banner grep -q "each rank holds 16 of every 32 tokens, K/V passed around the cp group's ring, each shift overlapped with the block compute (v2116)" "$TMP/cpr.log"
# tiny: 4 layers, 4 kv heads of hd 32; B=2, T/cp=16: |kv| = 2*16*2*4*32*4 = 32768 B; per layer
# all-gather (1 + 2)|kv| = 98304 B, ring (1 + 3)|kv| = 131072 B; x 4 layers
check test_v2108_allgather_bytes_per_step_formula grep -q "cp traffic (v2108): 3932160 B sent by this rank on its cp group of 2 in 10 steps, 393216 B/step (K/V all-gathers" "$TMP/cp.log"
check test_v2116_ring_bytes_per_step_formula grep -q "cp traffic (v2108): 5242880 B sent by this rank on its cp group of 2 in 10 steps, 524288 B/step (K/V blocks around the ring" "$TMP/cpr.log"
# refusals: one line, exit 2
expect test_v2108_world_not_multiple_refused 2 "context-parallel over cp=2 ranks \(v2108\) and 3 ranks were started" -- mpirun -np 3 -x OMP_NUM_THREADS "$TMP/cp/train" "${C[@]}"
expect test_v2108_resume_refused 2 "--resume with context parallelism \(v2108 cp=2\) is not implemented" -- mpirun -np 2 -x OMP_NUM_THREADS "$TMP/cp/train" "${C[@]}" --resume --ckpt-dir "$TMP/ck"
expect test_v2108_seq_not_multiple_refused 2 "--seq 30 is not a multiple of 4 \(zigzag layout over 2 ranks: 4 chunks\)" -- "$GEN" specs/v2500.yaml --model tiny --target cpu --seq 30 --enable adamw,flash,dp,sp -o "$TMP/bad1"
expect test_v2108_needs_flash 2 "replaces the flash attention ops by the ring: enable flash" -- "${G[@]}" --enable adamw,dp,sp -o "$TMP/bad2"
expect test_v2108_needs_dp 2 "like data parallelism: enable dp" -- "${G[@]}" --enable adamw,flash,sp -o "$TMP/bad3"
expect test_v2108_with_tp_refused 2 "(context parallelism with tensor parallelism|tensor parallelism with flash attention)" -- "${G[@]}" --enable adamw,flash,dp,sp,tp -o "$TMP/bad4"
cp -r "$TMP/cp" "$TMP/badcomm" && sed -i 's/"cp_comm":[[:space:]]*"allgather"/"cp_comm": "star"/' "$TMP/badcomm/plan.json"
expect test_v2108_plan_bad_cp_comm_refused 2 "cp_comm' = \"star\" is neither allgather nor ring" -- "$TMP/badcomm/train" "${C[@]}"
check test_v2108_refusals_wrote_nothing test ! -e "$TMP/bad1" -a ! -e "$TMP/bad2" -a ! -e "$TMP/bad3" -a ! -e "$TMP/bad4"
finish
