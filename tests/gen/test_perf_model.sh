#!/usr/bin/env bash
# gen perf (generator/lua/perf.lua): invariants of the performance model on a tiny trainer's plan
# and kernel manifest, and its bad input. Invariants: every op's predicted time is at least its
# roofline bound at the datasheet peaks; MFU stays under the tensor-core efficiency cap (the
# model's best case); eager >= graph; every kernel tiny runs has a cost declaration; the backward
# GEMM FLOPs equal formulas.lua's 6 x matmul params per token (up to the padded vocabulary rows the
# LM-head GEMM also computes); with every rate doubled and no launch overhead the kernel time
# halves exactly (the model is a roofline); an 8-GPU ring all-reduce moves 2*7/8 of the gradient
# bytes over NVLink; gen size --plan reports gen perf's rate; gen audit of a GPU trainer ends with
# the model's section; the bf16 what-if is labelled as one; the muon, adam_mini, int8 and QAT tiny
# trainers have every kernel declared; an op without a declaration is said (stderr, text, JSON);
# GEMM epilogues marked by the plan (attrs.epilogue) or --epilogues remove the GELU launches and
# bias-gradient GEMMs with the GEMMs' FLOPs unchanged and fewer bytes. Bad input (exit 2): unknown hardware,
# no plan, no --hw, a bad --policy or --set, an FP8 trainer on hardware without FP8 units. ~10 s.
source "$(dirname "$0")/lib.sh"
S="$ROOT/specs/v2500.yaml"
expect gen_tiny 0 "wrote" -- "$GEN" "$S" --enable bf16,flash --model tiny --target sim -o "$TMP/t"
J() { "$GEN" perf "$TMP/t" --json "$@"; }
J --hw h100-sxm,a100-80gb,h200 > "$TMP/plan.json"
J --hw h100-sxm,a100-80gb,h200 --policy bf16 > "$TMP/bf16.json"
py() { python3 - "$@"; }
check test_perf_op_time_at_least_roofline py "$TMP/plan.json" "$TMP/bf16.json" <<'PY'
import json, sys
for f in sys.argv[1:]:
    for r in json.load(open(f))["predictions"]:
        assert r["step_eager"] >= r["roofline_bound"] > 0, r["hardware"]
        for e in r["ops"]:
            assert e["time"] >= e["time_peak"] * (1 - 1e-12), (r["hardware"], e["key"])  # float sums only
PY
check test_perf_mfu_under_efficiency_cap py "$TMP/plan.json" "$TMP/bf16.json" <<'PY'
import json, sys
for f in sys.argv[1:]:
    for r in json.load(open(f))["predictions"]:
        assert 0 < r["mfu"] <= r["mfu_cap"], (r["hardware"], r["mfu"], r["mfu_cap"])
        assert r["step_graph"] <= r["step_eager"], r["hardware"]
PY
check test_perf_every_kernel_declared py "$TMP/plan.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["predictions"]:
    assert not r.get("undeclared"), r.get("undeclared")
PY
check test_perf_gemm_flops_equal_formula py "$TMP/plan.json" "$TMP/t/plan.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["predictions"][0]
p = json.load(open(sys.argv[2]))
# the backward's two GEMMs are 4 of the 6 FLOPs per weight (the forward GEMM also carries its bias epilogue)
g = 1.5 * sum(e["flops"] for e in r["ops"] if e["kernel"] in ("gemm_dgrad", "gemm_wgrad"))
six_n = p["flops_per_token"] - p["flops_attn_coef"] * p["train"]["T"]   # formulas.lua: 6 x matmul params
tokens = p["train"]["B"] * p["train"]["T"]
m = p["model"]
pad = 6 * m["C"] * (m["Vp"] - m["V"])    # the LM head GEMM runs over the padded vocabulary rows
assert g == (six_n + pad) * tokens, (g, six_n * tokens, pad * tokens)   # integers below 2^53: exact
PY
# the roofline scales with the rates: double every peak and the bandwidth, drop launch costs
J --hw h100-sxm --set perf.launch_us=0 --set perf.graph_node_us=0 > "$TMP/x1.json"
J --hw h100-sxm --set perf.launch_us=0 --set perf.graph_node_us=0 --set hbm_tbps=6.7 --set peak_tflops.fp32=133.8 \
  --set peak_tflops.bf16=1978.8 --set peak_tflops.fp8=3957.8 --set perf.sfu_tops=8.36 > "$TMP/x2.json"
check test_perf_time_scales_with_rates py "$TMP/x1.json" "$TMP/x2.json" <<'PY'
import json, sys
a, b = (json.load(open(f))["predictions"][0] for f in sys.argv[1:])
# every launch time is FLOPs/rate or bytes/bandwidth: halving all of them halves the sum (rounding only)
assert abs(b["kernel_time"] * 2 - a["kernel_time"]) <= 1e-9 * a["kernel_time"], (a["kernel_time"], b["kernel_time"])
assert abs(b["tokens_per_s"] / a["tokens_per_s"] - 2) < 1e-9
PY
# gen size --plan: the same per-GPU rate as gen perf
"$GEN" size --plan "$TMP/t" --hw h100-sxm --json > "$TMP/size.json"
check test_perf_gen_size_uses_plan py "$TMP/size.json" "$TMP/plan.json" <<'PY'
import json, sys
s, p = (json.load(open(f)) for f in sys.argv[1:])
rate = [r for r in s["hardware"] if r["name"] == "h100-sxm"][0]["throughput"]["rate"]
want = [r for r in p["predictions"] if r["hardware"] == "h100-sxm"][0]["tokens_per_s_per_gpu"]
assert abs(rate - want) <= 1e-9 * want, (rate, want)   # the same model: equal up to JSON rounding
PY
expect size_plan_other_model 2 "trains tiny" -- "$GEN" size --plan "$TMP/t" --model gpt2-124m --hw h100-sxm
# collectives on the links: a ring all-reduce of the gradients over 8 GPUs moves 2*7/8 of their bytes
# per GPU over NVLink (H100: 450 GB/s per direction x the link efficiency)
J --hw h100-sxm --gpus 8 > "$TMP/dp8.json"
check test_perf_ring_allreduce py "$TMP/dp8.json" "$TMP/t/plan.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["predictions"][0]
p = json.load(open(sys.argv[2]))
g = sum(b["bytes"] for b in p["buffers"] if b["kind"] == "grad")
(c,) = r["comm"]
assert c["name"] == "all_reduce(grads)" and abs(c["bytes"] - 2 * 7 / 8 * g) <= 1e-9 * g, (c, g)
assert abs(c["time"] - c["bytes"] / (450e9 * 0.8)) <= 1e-12 + 1e-9 * c["time"], c   # h100-sxm.yaml link_gbps, eff.link
assert r["tokens_per_s"] == 8 * r["tokens_per_s_per_gpu"]
PY
expect perf_text_labels_whatif 0 "WHAT-IF" -- "$GEN" perf "$TMP/t" --hw h100-sxm --policy bf16
expect perf_text_plan 0 "what the trainer executes" -- "$GEN" perf "$TMP/t" --hw h100-sxm
# gen audit DIR of a GPU trainer ends with the model's section for its target's hardware
expect gen_sm90 0 "wrote" -- "$GEN" "$S" --enable bf16,flash --model tiny --target sm_90 --batch 2 --seq 64 -o "$TMP/g90"
expect audit_has_perf 0 "Performance model.*|## h100-sxm — tiny" -- "$GEN" audit "$TMP/g90"
# every kernel of the other optimizers and quantizations a device runs has a declaration too
for v in "muon:bf16,muon" "adam_mini:adam_mini" "int8:int8" "qat:bf16,qat"; do
  expect "gen_tiny_${v%%:*}" 0 "wrote" -- "$GEN" "$S" --enable "${v#*:}" --model tiny --target sim --batch 1 --seq 32 -o "$TMP/o_${v%%:*}"
  "$GEN" perf "$TMP/o_${v%%:*}" --hw h100-sxm --json > "$TMP/o_${v%%:*}.json" 2>"$TMP/o_${v%%:*}.err"
  check "test_perf_every_kernel_declared_${v%%:*}" py "$TMP/o_${v%%:*}.json" "$TMP/o_${v%%:*}.err" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["predictions"][0]
assert not r["undeclared"] and r["undeclared_launches"] == 0 and open(sys.argv[2]).read() == "", r["undeclared"]
PY
done
# an op without a declaration is said (stderr, the text, the JSON), not silently 0 s
python3 - "$TMP/t/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["forward"].append({"op": "mystery_op", "ins": [], "outs": ["x"], "attrs": {}})
json.dump(p, open(sys.argv[1], "w"))
PY
expect perf_undeclared_said 0 "warning: gen perf h100-sxm: 1 launch\(es\) of op.mystery_op have no cost declaration" -- "$GEN" perf "$TMP/t" --hw h100-sxm
expect perf_undeclared_in_text 0 "INCOMPLETE: 1 launch" -- "$GEN" perf "$TMP/t" --hw h100-sxm
# GEMM epilogues (v2166): a matmul_fwd the plan marks (attrs.epilogue) takes its GELU, the dgrad
# GEMM the dGELU, the wgrad GEMM the bias gradient: the gelu launches and the bias-gradient GEMMs go,
# the GEMMs carry their work and the aux bytes; --epilogues marks every site (a what-if)
expect gen_epilogue_sm90 0 "wrote" -- "$GEN" "$S" --enable bf16,flash --model tiny --target sm_90 --batch 2 --seq 64 -o "$TMP/ep"
"$GEN" perf "$TMP/ep" --hw h100-sxm --json --launches > "$TMP/ep0.json"
"$GEN" perf "$TMP/ep" --hw h100-sxm --json --launches --epilogues > "$TMP/ep1.json"
python3 - "$TMP/ep/plan.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for o in p["forward"]:
    if o["op"] == "matmul_fwd": o["attrs"]["epilogue"] = "bias_gelu"
for o in p["backward"]:
    if o["op"] == "matmul_bwd": o["attrs"]["epilogue"] = "dgelu_bgrad"
json.dump(p, open(sys.argv[1], "w"))
PY
"$GEN" perf "$TMP/ep" --hw h100-sxm --json --launches > "$TMP/ep2.json"
check test_perf_epilogues py "$TMP/ep0.json" "$TMP/ep1.json" "$TMP/ep2.json" "$TMP/ep/plan.json" <<'PY'
import json, sys
a, b, c = (json.load(open(f))["predictions"][0] for f in sys.argv[1:4])
p = json.load(open(sys.argv[4]))
L = p["model"]["L"]
k = lambda r, name: sum(1 for l in r["launch_list"] if l["kernel"] == name)
assert k(a, "gelu_fwd") == k(a, "gelu_bwd") == L and k(b, "gelu_fwd") == k(b, "gelu_bwd") == 0, (k(a, "gelu_fwd"), k(b, "gelu_fwd"))
assert k(b, "gemm_fwd_bias_gelu") == k(b, "gemm_dgrad_dgelu") == L and k(b, "gemm_dbias") == 0
# the gelu launches and, per dGELU site, the memsets of dP and the never-formed dA go (exec_dev.c)
assert b["launches"] == a["launches"] - 4 * L - k(a, "gemm_dbias"), (a["launches"], b["launches"])
# the GEMMs' FLOPs are unchanged; DRAM bytes fall by the GELU round trips less the aux traffic
fl = lambda r: sum(l["cost"]["tc_bf16"] for l in r["launch_list"])
assert fl(a) == fl(b) and b["totals"]["bytes"] < a["totals"]["bytes"] and b["tokens_per_s"] > a["tokens_per_s"]
# the plan's marks give what --epilogues gives
assert c["launches"] == b["launches"] and c["totals"] == b["totals"] and c["step"] == b["step"]
PY
# --- bad input: one line, exit 2 -------------------------------------------------------------------
mkdir -p "$TMP/empty"
expect perf_unknown_hw 2 "h100-sxn.*did you mean|no hardware|h100-sxn" -- "$GEN" perf "$TMP/t" --hw h100-sxn
expect perf_no_plan 2 "no plan.json here" -- "$GEN" perf "$TMP/empty" --hw h100-sxm
expect perf_not_a_dir 2 "not a directory" -- "$GEN" perf "$TMP/nothing" --hw h100-sxm
expect perf_no_hw 2 "needs --hw" -- "$GEN" perf "$TMP/t"
expect perf_bad_policy 2 "--policy must be" -- "$GEN" perf "$TMP/t" --hw h100-sxm --policy fp4
expect perf_bad_set 2 "expected KEY=number" -- "$GEN" perf "$TMP/t" --hw h100-sxm --set price=3
expect perf_bad_set_zero_bandwidth 2 "expected KEY=number" -- "$GEN" perf "$TMP/t" --hw h100-sxm --set hbm_tbps=0
expect gen_tiny_fp8 0 "wrote" -- "$GEN" "$S" --enable bf16,fp8 --model tiny --target sim --batch 1 --seq 32 -o "$TMP/f8"
expect perf_fp8_on_a100 2 "a100-80gb has peak_tflops.fp8 = 0.*tc_fp8" -- "$GEN" perf "$TMP/f8" --hw a100-80gb
finish
