#!/usr/bin/env bash
# v2165 CUDA graphs on the sim trainer: `--enable cuda-graphs` sets plan train.cuda_graphs and the
# device trainer captures its regions (forward; backward up to the fused loss; the rest of the
# backward; the gradient norm) at their second run and replays them (runtime/device/
# exec_dev_graph.c). Against the same trainer with HYP_CUDA_GRAPHS=0 (eager), 3 steps of tiny in
# fp32 and with bf16 activations (the weight cast stays eager), AdamW with a 2-step LR warmup
# (the LR and the bias corrections change every step: the optimizer stays outside the graphs):
# every metric but the timings and the final weights and optimizer states are bit-identical
# (the same kernels with the same arguments in the same order on one stream: no tolerance). The
# host calls per step (launches, GEMMs, memsets, copies; a graph launch is one) of the last step:
# the graph run's eager equivalent (each graph launch replaced by the calls it recorded) equals
# the eager run's count, and graphs issue at most a tenth of them; gen perf's graph timeline has
# the same graph launches and host launches. Then v2162 loss scaling
# (below). ~12 s (warm caches).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=2 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
kjv_corpus "$TMP/c.txt" 50000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" --val-fraction 0.1 >/dev/null
G=(specs/v2500.yaml --batch 2 --seq 16 --model tiny --target sim --set v2130.warmup_steps=2)
R=(--data "$TMP/data" --eval-every 0 --sample 0 --steps 3 --seq 8)
# a fixed folder: the simulator's module cache keys on a kernel's path, so reruns compile nothing
OUT="$BUILD/tests/cuda_graphs_sim_v2165"
rm -rf "$OUT" && mkdir -p "$OUT"
calls() { sed -nE 's/^device calls per step: ([0-9]+) host calls.*/\1/p' "$1"; }
eager_eq() { sed -nE 's/^device calls per step: .*eager equivalent ([0-9]+)\).*/\1/p' "$1"; }
glaunch() { sed -nE 's/^device calls per step: .*, ([0-9]+) graph launches.*/\1/p' "$1"; }

for v in fp32:adamw,clip,warmup,cuda-graphs bf16:adamw,clip,warmup,bf16,cuda-graphs; do
  n=${v%%:*} sel=${v#*:}
  expect "gen_${n}_graphs" 0 "rendered for sim" -- "$GEN" "${G[@]}" --enable "$sel" -o "$OUT/$n"
  check "plan_${n}_has_train_cuda_graphs" grep -q '"cuda_graphs":[[:space:]]*1' "$OUT/$n/plan.json"
  HYP_CUDA_GRAPHS=0 "$OUT/$n/train" "${R[@]}" --ckpt-dir "$TMP/$n.ck_e" --metrics "$TMP/$n.e.jsonl" > "$TMP/$n.e.out" 2>&1
  check "${n}_eager_trains" grep -q "cuda graphs off (v2165)" "$TMP/$n.e.out"
  "$OUT/$n/train" "${R[@]}" --ckpt-dir "$TMP/$n.ck_g" --metrics "$TMP/$n.g.jsonl" > "$TMP/$n.g.out" 2>&1
  check "${n}_graphs_trains" grep -q "cuda graphs (v2165): captured at their second run and replayed: the forward, the backward up to the loss and after it, the norm;" "$TMP/$n.g.out"
  check "test_v2165_${n}_lr_warms_up" test "$(metric "$TMP/$n.g.jsonl" lr | sort -u | wc -l)" -ge 2
  check "test_v2165_${n}_graphs_equal_eager_every_metric_bit_for_bit" test "$(untimed "$TMP/$n.g.jsonl")" = "$(untimed "$TMP/$n.e.jsonl")"
  check "test_v2165_${n}_graphs_equal_eager_final_weights" cmp -s "$TMP/$n.ck_g/step_00000003/model.safetensors" "$TMP/$n.ck_e/step_00000003/model.safetensors"
  check "test_v2165_${n}_graphs_equal_eager_optimizer_state" cmp -s "$TMP/$n.ck_g/step_00000003/optimizer.safetensors" "$TMP/$n.ck_e/step_00000003/optimizer.safetensors"
  ge=$(calls "$TMP/$n.e.out") gg=$(calls "$TMP/$n.g.out") gq=$(eager_eq "$TMP/$n.g.out") gl=$(glaunch "$TMP/$n.g.out")
  echo "    $n: host calls per step eager $ge, with graphs $gg ($gl graph launches; eager equivalent $gq)"
  check "test_v2165_${n}_launches_per_step_eager_equivalent_is_the_eager_count" test "${gq:-x}" = "${ge:-y}"
  check "test_v2165_${n}_four_graph_launches_per_step" test "${gl:-0}" = 4
  check "test_v2165_${n}_graphs_cut_host_calls_tenfold" test $((10 * ${gg:-999})) -le "${ge:-0}"
  # the performance model cuts the step into the same regions (gen perf: launches eager, host
  # launches and graph launches with graphs): the same graph launches, and the host calls it does
  # not model (5 copies: tokens, targets, losses, the weight-decay table, the norm) are as many
  # with graphs as without
  read -r me mh mg <<< "$("$GEN" perf "$OUT/$n" --hw h100-sxm | sed -nE 's/^step: .* \(([0-9]+) launches\), .* \(([0-9]+) host launches, ([0-9]+) of them graphs\).*/\1 \2 \3/p')"
  echo "    $n: gen perf: $me launches eager, $mh host launches with graphs ($mg graphs)"
  check "test_v2165_${n}_perf_model_graph_launches_are_the_runtimes" test "${mg:-x}" = "${gl:-y}"
  check "test_v2165_${n}_perf_model_host_launches_match_the_runtimes" test $((ge - ${me:-0})) = $((gg - ${mh:-0}))
done

# v2162 dynamic loss scaling (fp16 GEMM operands, the v2162 test's settings): the scale S changes
# most steps (backoff on overflow, skipped steps, growth every 2 clean steps) and enters the
# regions' arguments (dloss x S, max_norm x S): each new S is a new key (a warm-up, then a new
# capture), the overflow verdict is read back between the norm and the optimizer (outside every
# region). 6 steps (scales 2^22 .. 2^18 with 4 skipped steps, then 2^18 again: captured and
# replayed), graphs against eager: bit for bit, skipped steps and scales included.
L=(specs/v2500.yaml --model tiny --batch 2 --seq 16 --target sim --enable adamw,clip,v2102,v2162,cuda-graphs --set v2102.dtype=fp16
   --set v2162.init_scale=4194304 --set v2162.growth_interval=2)
expect gen_ls_graphs 0 "rendered for sim" -- "$GEN" "${L[@]}" -o "$OUT/ls"
HYP_CUDA_GRAPHS=0 "$OUT/ls/train" "${R[@]}" --steps 6 --metrics "$TMP/ls.e.jsonl" > "$TMP/ls.e.out" 2>&1
HYP_CUDA_GRAPHS=1 "$OUT/ls/train" "${R[@]}" --steps 6 --metrics "$TMP/ls.g.jsonl" > "$TMP/ls.g.out" 2>&1
check ls_graphs_trains grep -q "cuda graphs on (v2165)" "$TMP/ls.g.out"
check test_v2165_v2162_scale_changes test "$(metric "$TMP/ls.g.jsonl" loss_scale | sort -u | wc -l)" -ge 3
check test_v2165_v2162_last_step_replays_four_graphs_captured_at_the_new_scale test "$(glaunch "$TMP/ls.g.out")" = 4
check test_v2165_v2162_loss_scaled_graphs_equal_eager_bit_for_bit test "$(untimed "$TMP/ls.g.jsonl")" = "$(untimed "$TMP/ls.e.jsonl")"
finish
