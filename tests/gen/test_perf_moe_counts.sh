#!/usr/bin/env bash
# The performance model of the mixture-of-experts ops (generator/lua/perf_moe.lua, the cost
# declarations of templates/moe.cu.lua; docs/perf-model.md "Mixture of experts", issue 23):
#  - tiny-moe (4 experts, top-2, 2 MoE layers) runs one step on the sim device with
#    HYP_SIM_COUNT_FILE (test_perf_sim_counts.sh's method: every global load and store of the
#    kernels counted at -O0): per moe kernel summed over the step, the launch count equals the
#    model's (gen perf --launches) and bytes loaded (rd + reread) and stored (wr) agree within 10%
#    (the issue's bound; the declarations count each access as issued, except moe_route's running
#    maximum, whose reloads are an expectation, H_E - 1 per token);
#  - the MoE GEMMs' FLOPs equal the executor's (exec_dev_moe.c): router 2NCE forward and 2 x 2NCE
#    backward (device-layer GEMMs), the experts (moe.cu's grouped GEMMs) 2 x 3HC per routed row in
#    the forward, again in the backward's recompute and 4 x 3HC in the backward — whatever the
#    routing (the balance assumption only sets the grouped kernels' row tiles);
#  - gen perf of mixtral-8x7b on an H100 has no INCOMPLETE line (every launch declared), and a
#    plan with expert parallelism (v2109, ep 2) prices its all-to-all bytes by moe_ep.c's formula.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
S="$ROOT/specs/v2500.yaml"
kjv_corpus "$TMP/corpus.txt" 20000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
B=2; T=16
expect gen_moe_counts 0 "wrote" -- "$GEN" "$S" --enable adamw --model tiny-moe --target sim --batch $B --seq $T -o "$TMP/moe"
expect train_moe_counts 0 "done: 1 steps" -- env HYP_SIM_CACHE="$BUILD/tests/sim_cache_count" HYP_SIM_COUNT_FILE="$TMP/moe.tsv" \
  OMP_NUM_THREADS=1 "$TMP/moe/train" --data "$TMP/data" --steps 1 --eval-every 0 --sample 0
"$GEN" perf "$TMP/moe" --hw h100-sxm --json --launches > "$TMP/moe.json"
cat > "$TMP/cmp.py" <<'PY'
import collections, json, sys
counts, perf, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
ex = collections.defaultdict(lambda: [0, 0, 0])
for line in open(counts):
    k, ld, st, mma = line.split("\t")
    if not k.startswith("moe_"): continue
    e = ex[k]; e[0] += 1; e[1] += int(ld); e[2] += int(st)
de = collections.defaultdict(lambda: [0, 0.0, 0.0])
gemm = {"fwd": 0.0, "bwd": 0.0}
for l in json.load(open(perf))["predictions"][0]["launch_list"]:
    if l["op"] not in ("moe_fwd", "moe_bwd"): continue
    c = l["cost"]
    if l["family"] == "cuBLASLt":
        gemm[l["op"][4:]] += c["fp32"] + c["tc_tf32"]; continue
    if l["family"] == "runtime": continue
    if l["kernel"].startswith("moe_gemm_"): gemm[l["op"][4:]] += c["fp32"]
    e = de[l["kernel"]]; e[0] += 1; e[1] += c["rd"] + c["reread"]; e[2] += c["wr"]
bad = 0
def rel(a, b): return abs(a - b) / max(a, b) if max(a, b) > 0 else 0.0
for k in sorted(set(ex) | set(de)):
    x, d = ex.get(k), de.get(k)
    if not x or not d:
        print(f"FAIL {k}: {'declared but not executed' if not x else 'executed but not declared'}"); bad += 1; continue
    ok = x[0] == d[0] and max(rel(x[1], d[1]), rel(x[2], d[2])) <= 0.10
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} moe.{k}: launches {x[0]}/{d[0]}, loaded {x[1]}/{d[1]:.0f} B, stored {x[2]}/{d[2]:.0f} B (executed/declared)")
# tiny-moe: C 64, H 128, E 4, top-2, 2 MoE layers
C, H, E, K, L = 64, 128, 4, 2, 2
R = N * K
want = {"fwd": L * (2 * N * C * E + 2 * 3 * H * C * R), "bwd": L * (2 * 2 * N * C * E + (2 + 4) * 3 * H * C * R)}
for ph in ("fwd", "bwd"):
    ok = gemm[ph] == want[ph]
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} moe_{ph} GEMM FLOPs {gemm[ph]:.0f} (exec_dev_moe.c's: {want[ph]})")
sys.exit(1 if bad else 0)
PY
check test_perf_moe_counts python3 "$TMP/cmp.py" "$TMP/moe.tsv" "$TMP/moe.json" $((B * T))
python3 "$TMP/cmp.py" "$TMP/moe.tsv" "$TMP/moe.json" $((B * T)) | sed 's/^/    /'

# Mixtral-8x7b on an H100 (fp32 activations: the MoE op refuses mixed precision): a full prediction
expect gen_mixtral_sm90 0 "wrote" -- "$GEN" "$S" --enable adamw,flash --model mixtral-8x7b --target sm_90 \
  --batch 1 --seq 4096 -o "$TMP/mixtral"
"$GEN" perf "$TMP/mixtral" --hw h100-sxm > "$TMP/mixtral.txt" 2> "$TMP/mixtral.err"
sed -n '1,4p' "$TMP/mixtral.txt" | sed 's/^/    /'
check test_perf_moe_mixtral_predicted grep -q "tokens/s per GPU" "$TMP/mixtral.txt"
check test_perf_moe_mixtral_complete bash -c "! grep -q INCOMPLETE '$TMP/mixtral.txt' && ! grep -q 'no cost declaration' '$TMP/mixtral.err'"

# expert parallelism (v2109, a cpu plan): the all-to-all line and its bytes
expect gen_moe_ep 0 "wrote" -- "$GEN" "$S" --enable adamw,dp,ep --model tiny-moe --target cpu --batch 4 --seq 64 -o "$TMP/ep"
"$GEN" perf "$TMP/ep" --hw h100-sxm --json > "$TMP/ep.json"
# per rank and step: 2 layers x [2 (P-1) E/P i32 + N K (P-1)/P rows x 4 (5C + 2)] = 2 x (16 + 256 x 1288)
check test_perf_moe_ep_alltoall_bytes python3 -c "
import json, sys
c = [x for x in json.load(open('$TMP/ep.json'))['predictions'][0]['comm'] if x['name'].startswith('all_to_all')]
sys.exit(0 if len(c) == 1 and c[0]['bytes'] == 2 * (16 + 256 * 1288) else 1)"
finish
