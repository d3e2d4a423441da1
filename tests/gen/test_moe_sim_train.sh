#!/usr/bin/env bash
# A mixture-of-experts model trains on the sim target (issue 23, docs/moe.md "The MoE op on a
# device"): tiny-moe (4 experts, top-2, 2 MoE layers) on the KJV, 20 AdamW steps of B 4 x T 32,
# through templates/moe.cu.lua's kernels and the device layer's GEMMs (runtime/device/exec_dev_moe.c),
# against the cpu trainer of the same plan on the same batches:
#  - every loss within 1e-4 relative of the cpu's: test_sim_trainer.sh's bound for the same fp32
#    math in two summation orders (docs/test-tolerances.md E2 + E3: <= 5e-5 after 20 steps), valid
#    while both route every token to the same experts — which the loads check: a routing choice can
#    flip only where two probabilities are within the rounding difference (~1e-6; over 20 steps x
#    2 layers x 256 tokens the chance that one does is ~1%), so each layer's loads may differ from
#    the cpu's by at most one moved row (|difference| summed over the experts <= 2) per step;
#  - every step each layer's loads sum to B x T x top_k = 256 (the op is dropless; integers, exact);
#  - the logged aux loss (moe_aux_loss, the same metric name as the cpu trainer's) within 1e-4
#    relative of the cpu's (the same bound: it is a sum of fp32 probabilities);
#  - the sm_90 trainer of the same plan on the cuda stand-ins (dev_cuda.c's real call sequence over
#    the simulator, docs/cuda-standins.md) equals the sim trainer bit for bit over 3 steps (same
#    kernels, same GEMM code, same order: every loss and norm printed identically), when the
#    stand-ins and NVRTC are built.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 HYP_SIM_CACHE="$BUILD/tests/sim_cache"
kjv_corpus "$TMP/c.txt" 100000
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null
B=4; T=32; STEPS=20
SEL=(specs/v2500.yaml --enable adamw --model tiny-moe --batch $B --seq $T)
RUN=(--data "$TMP/data" --eval-every 0 --lr 3e-3)
# fixed folders: the simulator's module cache keys on a kernel's path, so reruns compile nothing
OUT="$BUILD/tests/moe_sim_train"
rm -rf "$OUT" && mkdir -p "$OUT"
expect gen_tiny_moe_sim 0 "rendered for sim" -- "$GEN" "${SEL[@]}" --target sim -o "$OUT/sim"
check test_moe_sim_renders_moe_cu test -f "$OUT/sim/kernels/moe.cu"
expect gen_tiny_moe_cpu 0 "wrote" -- "$GEN" "${SEL[@]}" --target cpu -o "$TMP/cpu"
expect moe_sim_trains_20_steps 0 "done: $STEPS steps" -- "$OUT/sim/train" "${RUN[@]}" --steps $STEPS --metrics "$TMP/sim.jsonl"
expect moe_cpu_trains_20_steps 0 "done: $STEPS steps" -- "$TMP/cpu/train" "${RUN[@]}" --steps $STEPS --metrics "$TMP/cpu.jsonl"
echo "tiny-moe sim losses: $(losses "$TMP/sim.jsonl" | tr '\n' ' ')"
echo "tiny-moe cpu losses: $(losses "$TMP/cpu.jsonl" | tr '\n' ' ')"

cmp_metrics() { # cmp_metrics SIM CPU: the bounds of the header, one line of figures
  python3 - "$1" "$2" "$B" "$T" <<'EOF'
import json, sys
sim = [json.loads(l) for l in open(sys.argv[1])]
cpu = [json.loads(l) for l in open(sys.argv[2])]
want = int(sys.argv[3]) * int(sys.argv[4]) * 2
bad = []
if len(sim) != 20 or len(cpu) != 20: bad.append("steps %d / %d" % (len(sim), len(cpu)))
worst_loss = worst_aux = 0.0
moved = 0
for s, c in zip(sim, cpu):
    for key in ("loss", "moe_aux_loss"):
        d = abs(s[key] - c[key]) / abs(c[key])
        if key == "loss": worst_loss = max(worst_loss, d)
        else: worst_aux = max(worst_aux, d)
        if d > 1e-4: bad.append("step %d %s %r vs %r" % (s["step"], key, s[key], c[key]))
    for l in range(2):
        ls = [s["moe_load_l%d_e%d" % (l, e)] for e in range(4)]
        lc = [c["moe_load_l%d_e%d" % (l, e)] for e in range(4)]
        if sum(ls) != want: bad.append("step %d layer %d loads sum %d != %d" % (s["step"], l, sum(ls), want))
        diff = sum(abs(a - b) for a, b in zip(ls, lc))
        moved += diff // 2
        if diff > 2: bad.append("step %d layer %d loads %s vs cpu %s" % (s["step"], l, ls, lc))
print("largest loss difference %.2e relative, aux loss %.2e, routed rows moved vs cpu %d, loads sum %d every step" % (worst_loss, worst_aux, moved, want))
print("\n".join(bad[:5]))
sys.exit(1 if bad else 0)
EOF
}
check test_moe_sim_matches_cpu_20_steps cmp_metrics "$TMP/sim.jsonl" "$TMP/cpu.jsonl"
first=$(losses "$TMP/sim.jsonl" | head -1); last=$(losses "$TMP/sim.jsonl" | tail -1)
check test_moe_sim_loss_falls awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 5.0 && b < a - 1.0) }'

# the cuda path (dev_cuda.c) on the stand-ins: bit for bit the sim trainer's first 3 steps
LIBDIR="$BUILD/standins"
if [ -f "$LIBDIR/libcuda.so.1" ] && [ -f "$LIBDIR/libcublasLt.so.13" ] && "$GEN" "${SEL[@]}" --target sm_90 -o "$OUT/sm_90" >/dev/null 2>&1; then
  expect moe_sm_90_trains_on_standins 0 "backend: cuda — NVIDIA H100.*\(Hyperion stand-in\)" -- env HYP_CUDA_LIBDIR="$LIBDIR" HYP_STANDIN_SM=90 \
    "$OUT/sm_90/train" "${RUN[@]}" --steps 3 --metrics "$TMP/sm90.jsonl"
  check test_moe_sm_90_standins_equal_sim bash -c "[ \"\$(grep -o '\"\\(loss\\|grad_norm\\)\":[^,]*' '$TMP/sm90.jsonl')\" = \"\$(head -3 '$TMP/sim.jsonl' | grep -o '\"\\(loss\\|grad_norm\\)\":[^,]*')\" ]"
else
  echo "note: cuda stand-ins or NVRTC not built here — the sm_90 stand-in run is skipped"
fi
finish
