#!/usr/bin/env bash
# Mixture-of-experts models at gen time (docs/moe.md): the `moe` section of a model YAML is
# validated (bad values exit 2 with `where: what — how to fix`, nothing written); `gen size` counts
# total and active parameters, checked against the published figures (Mixtral 8x7B 46.7B / 12.9B,
# OLMoE-1B-7B 6.9B / 1.3B: counts from the config are exact integers, so they must round to the
# published 3 significant digits; DeepSeek-V3's shape differs by its latent attention and MTP
# module, stated in its YAML, so within 2%/5%); gen refuses to generate a trainer for an MoE model
# on the device targets (sim, cuda) with what their MoE op does not do (bf16),
# and with every selection the cpu MoE op cannot run under (tensor parallelism, mixed precision,
# preference objectives), each with what to do and nothing written (capacity, shared experts, the
# sigmoid router and the aux-free bias run on cpu only: test_moe_capacity.sh, test_moe_shared.sh,
# test_moe_router.sh). Must never need a compiler or a network.
source "$(dirname "$0")/lib.sh"
json() { python3 -c "import json,sys; p=json.load(sys.stdin); print(eval(sys.argv[1]))" "$@"; }

size_json() { "$GEN" size --model "$1" --hw h100-sxm --json; }
counts() { size_json "$1" | json "'%d %d' % (p['model']['params'], p['model']['params_active'])"; }

read -r tot act < <(counts mixtral-8x7b)
check test_moe_mixtral_total_46_7B python3 -c "assert round($tot / 1e9, 1) == 46.7, $tot"
check test_moe_mixtral_active_12_9B python3 -c "assert round($act / 1e9, 1) == 12.9, $act"
read -r tot act < <(counts olmoe-1b-7b)
check test_moe_olmoe_total_6_9B python3 -c "assert round($tot / 1e9, 1) == 6.9, $tot"
check test_moe_olmoe_active_1_3B python3 -c "assert round($act / 1e9, 1) == 1.3, $act"
read -r tot act < <(counts deepseek-v3-shaped)
check test_moe_deepseek_v3_total_near_671B python3 -c "assert abs($tot / 671e9 - 1) < 0.02, $tot"
check test_moe_deepseek_v3_active_near_37B python3 -c "assert abs($act / 37e9 - 1) < 0.05, $act"
read -r tot act < <(counts tiny-moe)
check test_moe_tiny_counts test "$tot $act" = "254784 156480"
expect test_moe_size_names_active 0 "mixture of experts: 12.9G active per token" -- "$GEN" size --model mixtral-8x7b --hw h100-sxm
check test_moe_dense_model_no_active_line_absent bash -c "! '$GEN' size --model tiny-llama --hw h100-sxm | grep -q 'mixture of experts'"

# --- validation: one bad value at a time, exit 2, the line and the fix -------------------------
bad() { # bad NAME SED-EXPR REGEX
  sed "$2" "$ROOT/specs/models/tiny-moe.yaml" > "$TMP/$1.yaml"
  expect "$1" 2 "$3" -- "$GEN" size --model "$TMP/$1.yaml" --hw h100-sxm
}
bad test_moe_top_k_over_n_experts 's/top_k: 2/top_k: 5/' "top_k_over_n_experts.yaml:[0-9]+:[0-9]+: top_k 5 exceeds n_experts 4 — choose"
bad test_moe_unknown_router 's/router: softmax/router: sigmod/' "did you mean 'sigmoid'"
bad test_moe_capacity_below_one 's/dropless: true/capacity_factor: 0.5/' "capacity_factor 0.5 < 1 .* — use a value >= 1"
bad test_moe_neither_capacity_nor_dropless 's/dropless: true/dropless: false/' "neither capacity_factor nor dropless: true is given — add"
bad test_moe_capacity_and_dropless '/dropless: true/a\  capacity_factor: 1.25' "exclude each other — drop one"
bad test_moe_unknown_key 's/n_shared_experts: 0/n_shared_expert: 0/' "did you mean 'n_shared_experts'"
bad test_moe_zero_experts 's/n_experts: 4/n_experts: 1/' "n_experts"
bad test_moe_aux_free_needs_sigmoid '/dropless: true/a\  router_bias: aux_free' "aux-loss-free bias .* — set router: sigmoid"
bad test_moe_all_layers_dense '/dropless: true/a\  first_dense_layers: 2' "first_dense_layers 2 leaves no MoE layer of 2"

# --- trainers: cpu, sim and cuda run the MoE op (training: test_moe_train.sh, test_moe_sim_train.sh,
# ZeRO-2/3 on sim: test_moe_zero_sim.sh, CUDA graphs: test_moe_graphs_v2165.sh) ------------------
# --- what the MoE op cannot run under: refused, nothing written -------------------------------
refused() { # refused NAME REGEX gen-args...
  local name=$1 re=$2; shift 2
  expect "test_moe_refuses_$name" 2 "tiny-moe.yaml: model tiny-moe \\(mixture of experts\\): $re" -- "$GEN" specs/v2500.yaml --model tiny-moe "$@" -o "$TMP/r-$name"
  check "test_moe_refuses_${name}_no_output" test ! -e "$TMP/r-$name"
}
refused bf16_sim "mixed precision \\(bf16\\).* — drop mixed-precision" --enable adamw,bf16 --target sim
# tensor parallelism: refused (by tp's own llama check, or by the MoE check once tp shards llama)
expect test_moe_refuses_tp 2 "tensor parallelism .*— .*drop tp" -- "$GEN" specs/v2500.yaml --model tiny-moe --enable adamw,tp --target cpu -o "$TMP/r-tp"
check test_moe_refuses_tp_no_output test ! -e "$TMP/r-tp"
refused bf16 "mixed precision \\(bf16\\).* — drop mixed-precision" --enable adamw,bf16 --target cpu
refused dpo "the dpo objective .* — use pretraining or SFT" --enable adamw,dpo --target cpu
finish
