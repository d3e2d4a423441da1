#!/usr/bin/env bash
# v2106 Megatron tensor parallelism, the plan of one tp rank (tiny, degree 2): the QKV and MLP-in
# GEMMs are column-parallel (the rank's NH/2 heads: 1/2 of each of the q, k, v row blocks; H/2
# MLP rows), attention-out and MLP-out row-parallel (IC/2 columns) each followed by one
# allreduce_tp that adds the bias once after the sum; in backward the column-parallel GEMMs' input
# gradients (d:ln1, d:ln2) are all-reduced before the norms' backward: 2 + 2 per layer. The
# sharded parameters hold 1/2 of the full tensors, whose shapes and slices plan.tp records; the
# bytes the tp all-reduces move per step follow from the plan (4 per layer of B*T*C floats, ring
# 2(p-1)/p * n * 4 B per rank). Refusals: what a tp plan cannot run with, and models whose
# head counts or MLP width do not divide. Training under mpirun: test_tp_train_v2106.sh.
source "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "FAIL: python3 missing"; exit 1; }
expect gen_tp 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip,tp --model tiny --target cpu --batch 2 --seq 32 -o "$TMP/tp"
expect gen_np1 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,clip --model tiny --target cpu --batch 2 --seq 32 -o "$TMP/one"
python3 - "$TMP/tp/plan.json" "$TMP/one/plan.json" > "$TMP/plan.txt" 2>&1 <<'EOF'
import json, sys
tp, one = (json.load(open(f)) for f in sys.argv[1:3])
m, deg = tp["model"], tp["tp"]["degree"]
full = tp["tp"]["full_model"]
L, C, B, T = m["L"], m["C"], tp["train"]["B"], tp["train"]["T"]
def ops(p, part, name): return [o for o in p[part] if o["op"] == name]
fa, ba = ops(tp, "forward", "allreduce_tp"), ops(tp, "backward", "allreduce_tp")
print("degree", deg, "train.tp", tp["train"].get("tp"))
print("fwd_allreduce", len(fa), "bwd_allreduce", len(ba), "layers", L)
print("fwd_after", sorted(set(o["ins"][0].split(".")[1] for o in fa)))
print("bwd_on", sorted(set(o["ins"][0].split(".")[1] for o in ba)))
print("fwd_bias_once", all(o["ins"][1].endswith("c_proj.bias") for o in fa))
# the row-parallel GEMMs no longer add their bias (allreduce_tp does, after the sum)
rows = [o for o in ops(tp, "forward", "matmul_fwd") if o["outs"][0].endswith((".attproj", ".fcproj"))]
print("row_gemm_bias_dropped", all(o["ins"][2] == "" for o in rows), "row_IC", sorted(set(o["attrs"]["IC"] for o in rows)))
# every allreduce_tp in backward comes right before the norm backward that reads its buffer
bw = tp["backward"]
ok = True
for i, o in enumerate(bw):
    if o["op"] == "allreduce_tp":
        ok = ok and bw[i - 1]["op"] == "matmul_bwd" and any(o["outs"][0] in x["ins"] for x in bw[i + 1:] if x["op"] == "layernorm_bwd")
print("bwd_before_norm", ok)
# local parameter counts: the sharded tensors are 1/deg of the full ones, the rest equal np=1
full_sizes = {p["name"]: p["numel"] for p in one["params"]}
loc = {p["name"]: p["numel"] for p in tp["params"]}
sh = {s["name"]: s for s in tp["tp"]["params"]}
good = True
for n, k in full_sizes.items():
    want = k // deg if n in sh else k
    good = good and loc.get(n) == want
    if n in sh:
        f = 1
        for x in sh[n]["full_shape"]: f *= x
        good = good and f == k and sum(b[1] for b in sh[n]["blocks"]) == sh[n]["full_shape"][sh[n]["dim"]]
print("sharded", len(sh), "shapes_ok", good)
print("local_heads", m["NH"], "of", full["NH"], "local_H", m["H"], "of", full["H"], "hd", m["hd"], one["model"]["hd"])
n = B * T * C
per_op = 2 * (deg - 1) / deg * n * 4
print("tp_bytes_per_step_per_rank %d (%d all-reduces of B*T*C = %d floats, ring 2(p-1)/p*n*4 = %d B each)" % ((len(fa) + len(ba)) * per_op, len(fa) + len(ba), n, per_op))
EOF
cat "$TMP/plan.txt"
has() { grep -Fqx -- "$1" "$TMP/plan.txt"; }
check test_v2106_plan_records_degree has "degree 2 train.tp 2"
check test_v2106_two_fwd_two_bwd_allreduces_per_layer has "fwd_allreduce 8 bwd_allreduce 8 layers 4"
check test_v2106_fwd_allreduce_after_row_parallel has "fwd_after ['attproj', 'fcproj']"
check test_v2106_bwd_allreduce_of_column_parallel_dinput has "bwd_on ['ln1', 'ln2']"
check test_v2106_row_bias_added_once has "fwd_bias_once True"
check test_v2106_row_gemms_read_half_the_columns has "row_gemm_bias_dropped True row_IC [64, 256]"
check test_v2106_bwd_allreduce_before_norm_backward has "bwd_before_norm True"
check test_v2106_sharded_params_are_half_of_np1 has "sharded 24 shapes_ok True"
check test_v2106_local_heads_and_mlp has "local_heads 2 of 4 local_H 256 of 512 hd 32 32"
check test_v2106_tp_bytes_formula has "tp_bytes_per_step_per_rank 524288 (16 all-reduces of B*T*C = 8192 floats, ring 2(p-1)/p*n*4 = 32768 B each)"

# refusals: one line, exit 2, what is missing and how to fix
G=("$GEN" specs/v2500.yaml --model tiny --batch 2 --seq 32)
expect test_v2106_refuses_zero 2 "v2106 .*ZeRO.*not implemented.*drop" -- "${G[@]}" --enable adamw,dp,zero1,tp --target cpu -o "$TMP/r1"
expect test_v2106_refuses_fp8 2 "v2106 .*FP8.*drop fp8, or drop tp" -- "${G[@]}" --enable adamw,fp8,tp --target cpu -o "$TMP/r2"
expect test_v2106_refuses_mixed_precision 2 "v2106 .*mixed precision \(v2102 bf16\).*drop v2102" -- "${G[@]}" --enable adamw,v2102,tp --target cpu -o "$TMP/r8"
expect test_v2106_refuses_flash 2 "v2106 .*flash attention.*drop flash" -- "${G[@]}" --enable adamw,flash,tp --target cpu -o "$TMP/r3"
expect test_v2106_refuses_elastic_checkpoints 2 "v2106 .*checkpoints of tp-sharded parameters.*drop v2175" -- "${G[@]}" --enable adamw,dp,v2175,tp --target cpu -o "$TMP/r4"
expect test_v2106_refuses_sim 2 "v2106 .*cpu backend only.*use --target cpu" -- "${G[@]}" --enable adamw,tp --target sim -o "$TMP/r5"
expect test_v2106_refuses_indivisible_heads 2 "v2106 .*n_heads 4 of tiny is not divisible by degree 3" -- "${G[@]}" --enable adamw,tp --set v2106.degree=3 --target cpu -o "$TMP/r6"
expect test_v2106_refuses_degree_1 2 "v2106 .*degree must be >= 2" -- "${G[@]}" --enable adamw,tp --set v2106.degree=1 --target cpu -o "$TMP/r7"
# one process cannot run a tp plan: refused at start (exit 2, one line) instead of training a
# model whose layers are half missing (test_tp_train_v2106.sh trains it under mpirun)
printf 'In the beginning God created the heaven and the earth. %.0s' $(seq 400) > "$TMP/c.txt"
"$GEN" data "$TMP/c.txt" -o "$TMP/data" >/dev/null
expect test_v2106_runtime_refuses_tp_plan_on_one_rank 2 "tensor-parallel over tp=2 ranks \(v2106\) and 1 rank was started.*mpirun -np 2" -- "$TMP/tp/train" --data "$TMP/data" --steps 1 --eval-every 0
check test_v2106_refusal_leaves_no_output test ! -e "$TMP/r1" -a ! -e "$TMP/r6"
finish
