#!/usr/bin/env bash
# v2165 CUDA graphs capture the device MoE op (issue 23, docs/moe.md "The MoE op on a device"):
# its expert GEMMs are templates/moe.cu.lua's grouped kernels, which read the expert offsets on
# the device, so the op no longer reads anything back mid-op. tiny-moe (4 experts, top-2, 2 MoE
# layers) on sim with --enable cuda-graphs, 4 AdamW steps, against the same trainer eager
# (HYP_CUDA_GRAPHS=0): every metric but the timings — losses, gradient norms, per-expert loads,
# aux loss — bit-identical (the same kernels with the same arguments in the same order on one
# stream: no tolerance), and the graph run issues at most a tenth of the eager run's host calls
# per step. The graph key carries the micro-batch's counted targets (the aux loss weight,
# exec_dev_moe_key), so a batch with another count is a new graph, never a stale argument.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
export OMP_NUM_THREADS=1 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
kjv_corpus "$TMP/c.txt" 20000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null
# a fixed folder: the simulator's module cache keys on a kernel's path, so reruns compile nothing
OUT="$BUILD/tests/moe_graphs_v2165"
rm -rf "$OUT" && mkdir -p "$OUT"
expect gen_moe_graphs 0 "rendered for sim" -- "$GEN" specs/v2500.yaml --enable adamw,cuda-graphs --model tiny-moe --target sim \
  --batch 2 --seq 16 -o "$OUT/g"
R=(--data "$TMP/data" --eval-every 0 --sample 0 --steps 4 --lr 3e-3)
"$OUT/g/train" "${R[@]}" --metrics "$TMP/g.jsonl" > "$TMP/g.out" 2>&1; grc=$?
HYP_CUDA_GRAPHS=0 "$OUT/g/train" "${R[@]}" --metrics "$TMP/e.jsonl" > "$TMP/e.out" 2>&1; erc=$?
check moe_graphs_train_runs_v2165 grep -q "cuda graphs on" "$TMP/g.out"
check moe_eager_train_runs test "$grc$erc" = 00
check test_moe_graphs_four_steps_logged test "$(grep -c loss "$TMP/g.jsonl" 2>/dev/null)" = 4 -a "$(grep -c loss "$TMP/e.jsonl" 2>/dev/null)" = 4
check test_moe_graphs_metrics_bit_identical_v2165 cmp <(untimed "$TMP/g.jsonl") <(untimed "$TMP/e.jsonl")
check test_moe_graphs_loads_logged grep -q '"moe_load_l1_e3"' "$TMP/g.jsonl"
calls() { sed -nE 's/^device calls per step: ([0-9]+) host calls.*/\1/p' "$1"; }
gcalls=$(calls "$TMP/g.out") ecalls=$(calls "$TMP/e.out")
echo "host calls per step: graphs $gcalls, eager $ecalls; losses $(losses "$TMP/g.jsonl" | tr '\n' ' ')"
check test_moe_graphs_tenth_of_calls_v2165 test "${gcalls:-999}" -gt 0 -a "$((10 * ${gcalls:-999}))" -le "${ecalls:-0}"
finish
