#!/usr/bin/env bash
# gen size (issue 7): the seed 004 throughput model through the CLI — a compute-bound, a
# memory-bound and a network-bound case built with flags on a private test GPU, with the numbers
# computed by hand; the cluster plan; JSON fields; the seed 001 cluster-shape question; bad inputs;
# the memory estimate against the CPU runtime's real arena (plan.json of tiny and gpt2-124m);
# the SVG charts. The formulas themselves are unit-tested in tests/lua/test_formulas.lua.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 1
TREE="$ROOT/specs/v2500.yaml"

# jnum FILE KEY: the first number stored under "KEY" in a JSON file (pretty-printed by gen)
jnum() { grep -o "\"$2\":[[:space:]]*[-0-9.eE+]*" "$1" | head -1 | sed 's/.*:[[:space:]]*//'; }
# within A B TOL: |A/B - 1| <= TOL
within() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { r = a / b - 1; if (r < 0) r = -r; exit !(b != 0 && r <= t) }'; }
# le A B: A <= B
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# --- a private tree with hardware whose numbers make the hand arithmetic easy ----------------
mkdir -p "$TMP/t/hardware" "$TMP/t/models"
: > "$TMP/t/v2500.yaml"   # gen size only reads the models/ and hardware/ next to the tree file
cat > "$TMP/t/hardware/testgpu.yaml" <<'Y'
name: testgpu
title: Test GPU
kind: gpu
sm: 90
memory_gb: 10
hbm_tbps: 1
nic_gbps: 100
peak_tflops: {fp32: 10, bf16: 100}
price_per_hr: 2
source: test numbers
Y
cat > "$TMP/t/hardware/h100.yaml" <<'Y'
name: h100
title: Test H100
kind: gpu
sm: 90
memory_gb: 80
hbm_tbps: 3
nic_gbps: 400
peak_tflops: {fp32: 60, bf16: 1000}
price_per_hr: 2.5
source: test numbers (seed 001 price)
Y
cat > "$TMP/t/hardware/a100-40gb.yaml" <<'Y'
name: a100-40gb
title: Test A100 40GB
kind: gpu
sm: 80
memory_gb: 40
hbm_tbps: 1.5
nic_gbps: 200
peak_tflops: {fp32: 19.5, bf16: 300}
price_per_hr: 1.2
source: test numbers (seed 001 price)
Y
cat > "$TMP/bad-hw.yaml" <<'Y'
name: bad
title: Bad
kind: gpu
sm: 90
memory_gb: 10
hbm_tbps: 1
nic_gbps: 100
peak_tflop: {fp32: 10}
price_per_hr: 2
source: test
Y
S=("$GEN" size --tree "$TMP/t/v2500.yaml")
RUN=(--params 1e9 --layers 10 --d-model 1000 --hw testgpu)

# --- compute-bound ------------------------------------------------------------------------
# F = 1·6·1e9 = 6e9 FLOP/token; M = 16·1e9/512000 + 6·10·1000·2 = 31250 + 120000 = 151250 B/token
# r_compute = 0.75·100e12/6e9 = 12500 tok/s; r_memory = 0.75·1e12/151250 = 4.96M; no network (p = 1)
# target 1e5 tok/s: GPUs = 1e5/12500 = 8, $/hr = 8·2 = 16, cluster TB/s = 1e5·151250/1e12 = 0.0151,
# $/TB/s·hr = 2/1 = 2.00
expect compute_bound 0 "testgpu +compute +12\.5k +12\.5k +4\.96M +inf +1 +8 +\\\$16\.00 +0\.0151 +2\.00" -- \
  "${S[@]}" "${RUN[@]}" --target-tps 1e5
expect compute_bound_per_token 0 "F = 6G FLOP, M = 151k B HBM, X = 0 B network" -- "${S[@]}" "${RUN[@]}"
expect defaults_labelled 0 "B global tokens/step +512000 +seed 004 default" -- "${S[@]}" "${RUN[@]}"
expect util_default_labelled 0 "e_c compute efficiency +0\.75 +--util" -- "${S[@]}" "${RUN[@]}"
"${S[@]}" "${RUN[@]}" --target-tps 1e5 --json > "$TMP/c.json" 2>&1
check json_bound_compute grep -q '"bound":[[:space:]]*"compute"' "$TMP/c.json"
check json_rate_12500 within "$(jnum "$TMP/c.json" rate)" 12500 1e-12
check json_flops_per_token within "$(jnum "$TMP/c.json" flops_per_token)" 6e9 1e-12
check json_hbm_bytes_per_token within "$(jnum "$TMP/c.json" hbm_bytes_per_token)" 151250 1e-12
check json_gpus_8 [ "$(jnum "$TMP/c.json" gpus)" = 8 ]
check json_usd_per_hr within "$(jnum "$TMP/c.json" usd_per_hr)" 16 1e-12
check json_cluster_tbps within "$(jnum "$TMP/c.json" cluster_hbm_tbps)" 0.015125 1e-12
check json_balance within "$(jnum "$TMP/c.json" balance)" 100 1e-12
check json_r_network_null grep -q '"r_network":[[:space:]]*null' "$TMP/c.json"
for f in r_compute r_memory intensity net_bytes_per_token usd_per_tbps_hr fits margin capacity \
         model_state activations activations_unplanned saved_per_layer min_gpus_zero3 source; do
  check "json_has_$f" grep -q "\"$f\"" "$TMP/c.json"
done
# recompute full: g = 4/3 → F = 8e9, r_compute = 75e12/8e9 = 9375
expect recompute_full_g 0 "testgpu +compute +9\.38k +9\.38k" -- "${S[@]}" "${RUN[@]}" --recompute full

# --- memory-bound -------------------------------------------------------------------------------
# --util 1, N = 1e6: F = 6e6, r_compute = 100e12/6e6 = 16.7M; M = 16e6/512000 + 120000 = 120031.25,
# r_memory = 1e12/120031.25 = 8331163 → memory-bound at 8.33M tok/s
expect memory_bound 0 "testgpu +memory +8\.33M +16\.7M +8\.33M +inf" -- \
  "${S[@]}" --params 1e6 --layers 10 --d-model 1000 --hw testgpu --util 1
# the same with the efficiency of memory alone lowered to 0.5: r_memory = 0.5e12/120031.25 = 4.17M
expect memory_bound_eff 0 "testgpu +memory +4\.17M +16\.7M +4\.17M" -- \
  "${S[@]}" --params 1e6 --layers 10 --d-model 1000 --hw testgpu --util 1 --eff-memory 0.5

# --- network-bound ------------------------------------------------------------------------------
# --util 1, p = 8, B = 65536, NIC 10 Gb/s (--set): X = 2·7/8·1e9·2/(65536/8) = 427246.09 B/token,
# r_network = 1.25e9/427246.09 = 2925.7 → "2.93k"; r_compute = 100e12/6e9 = 16.7k;
# M = 16e9/65536 + 120000 = 364140.6, r_memory = 1e12/364140.6 = 2.75M
expect network_bound 0 "testgpu +network +2\.93k +16\.7k +2\.75M +2\.93k +8 " -- \
  "${S[@]}" "${RUN[@]}" --util 1 --dp 8 --tokens-per-step 65536 --set testgpu.nic_gbps=10
expect network_bound_override_shown 0 "testgpu overrides: testgpu\.nic_gbps=10" -- \
  "${S[@]}" "${RUN[@]}" --util 1 --dp 8 --tokens-per-step 65536 --set testgpu.nic_gbps=10
# a bigger global batch moves it off the network bound (B = 512000: X = 54687.5, r_net = 22.9k > 16.7k)
expect bigger_batch_compute_bound 0 "testgpu +compute +16\.7k" -- \
  "${S[@]}" "${RUN[@]}" --util 1 --dp 8 --set testgpu.nic_gbps=10
# --dp auto: 1e5 tok/s at 12500/GPU needs 8; at p = 8 the network allows 0.75·12.5e9/54687.5 = 171k → 8
expect dp_auto 0 "testgpu +compute +12\.5k +12\.5k +4\.96M +171k +8 +8 " -- "${S[@]}" "${RUN[@]}" --dp auto --target-tps 1e5
# --dp auto where the network caps the cluster: NIC 1 Gb/s, K = 0.75·1.25e8·512000/(2·1e9·2) = 12000;
# p·r_network(p) = 12000·p/(p−1): p = 2 gives 2·min(12500, 12000) = 24k, p = 3 gives 18k, p = 1 12.5k
expect dp_auto_unreachable 0 "testgpu +network +12k +12\.5k +4\.96M +12k +2! +2 +\\\$4\.00" -- \
  "${S[@]}" "${RUN[@]}" --dp auto --target-tps 1e6 --set nic_gbps=1
expect dp_auto_unreachable_note 0 "the fastest is p = 2 GPUs at" -- "${S[@]}" "${RUN[@]}" --dp auto --target-tps 1e6 --set nic_gbps=1

# --- memory per GPU -----------------------------------------------------------------------------
# bf16 mixed precision, N = 1e9: 2 + 2 + 12 = 16e9 B = 14.9 GiB of model state > 10 GiB: no fit;
# ZeRO-3 over 8: 2e9 B = 1.9 GiB of state
expect no_fit 0 "testgpu .* NO " -- "${S[@]}" "${RUN[@]}"
expect zero3_fits 0 "testgpu .*fits, margin" -- "${S[@]}" "${RUN[@]}" --zero 3 --dp 8
expect fsdp_fits 0 "testgpu .*fits, margin" -- "${S[@]}" "${RUN[@]}" --fsdp --dp 8
expect zero3_hint 0 "testgpu: fits with ZeRO-3 / FSDP over >= [0-9]+ GPUs" -- "${S[@]}" "${RUN[@]}"
expect state_bytes 0 "testgpu +1\.9 GiB +1\.9 GiB +11\.2 GiB" -- "${S[@]}" "${RUN[@]}"

# --- seed 001: 1× H100 vs 2× H100 vs 4× A100 40GB ------------------------------------------------
# N = 1e9 custom, 4.5e10 tokens. H100: r_compute = 0.75·1000e12/6e9 = 125000 tok/s: 1 GPU 100 h at
# $2.50 = $250 (100 h = 4.2 days); 2 GPUs 50 h (2.1 days) at $5 = $250 (the network is not binding:
# 4.8M tok/s); A100: 0.75·300e12/6e9 = 37500 tok/s, 4 GPUs 150000 tok/s, 83.3 h (3.5 days) at $4.80
# = $400 = 1.60× the cheapest
CL=(--params 1e9 --layers 10 --d-model 1000 --hw h100 --tokens 4.5e10 --clusters 1xh100,2xh100,4xa100-40gb)
expect seed001_one_h100 0 "1xh100 +compute +125k +125k +4\.2 days +\\\$2\.50 +\\\$250\.00 +1\.00×" -- "${S[@]}" "${CL[@]}"
expect seed001_two_h100 0 "2xh100 +compute +125k +250k +2\.1 days +\\\$5\.00 +\\\$250\.00 +1\.00×" -- "${S[@]}" "${CL[@]}"
expect seed001_four_a100 0 "4xa100-40gb +compute +37\.5k +150k +3\.5 days +\\\$4\.80 +\\\$400\.00 +1\.60×" -- "${S[@]}" "${CL[@]}"
expect seed001_linear_scaling_note 0 "the cost is the same" -- "${S[@]}" "${CL[@]}"
# time and cost on one GPU: 4.5e10 / 125000 / 3600 = 100 h
expect train_time_cost 0 "h100 +1 +125k +4\.2 days +100 +\\\$2\.50 +\\\$250\.00" -- "${S[@]}" "${CL[@]}"
# Chinchilla: 20 × 1e9 = 20G tokens
expect chinchilla 0 "compute-optimal tokens ≈ 20 × N = 20G tokens" -- "${S[@]}" "${RUN[@]}" --chinchilla
# v2147: C = 1.2e21 → N = sqrt(1e19) = 3.16G, D = 63.2G
expect compute_optimal 0 "N = 3\.16G parameters and D = 63\.2G tokens" -- "${S[@]}" "${RUN[@]}" --flops-budget 1.2e21

# --- bad inputs: "where: what — fix", exit 2 ----------------------------------------------------
expect bad_params_zero 2 "<command line>: --params must be a positive number, not '0' — " -- "${S[@]}" --params 0 --layers 1 --d-model 64 --hw testgpu
expect bad_params_negative 2 "--params must be a positive number, not '-5'" -- "${S[@]}" --params -5 --layers 1 --d-model 64 --hw testgpu
expect bad_params_text 2 "--params must be a positive number, not 'lots'" -- "${S[@]}" --params lots --layers 1 --d-model 64 --hw testgpu
expect bad_layers_fraction 2 "--layers must be a positive integer, not '2\.5'" -- "${S[@]}" --params 1e9 --layers 2.5 --d-model 64 --hw testgpu
expect bad_dmodel_zero 2 "--d-model must be a positive integer, not '0'" -- "${S[@]}" --params 1e9 --layers 2 --d-model 0 --hw testgpu
expect bad_tokens_per_step 2 "--tokens-per-step must be a positive number, not '0'" -- "${S[@]}" "${RUN[@]}" --tokens-per-step 0
expect bad_util 2 "--util must be a positive number <= 1, not '1\.5'" -- "${S[@]}" "${RUN[@]}" --util 1.5
expect bad_target 2 "--target-tps must be a positive number, not '-1'" -- "${S[@]}" "${RUN[@]}" --target-tps -1
expect bad_dp 2 "--dp must be a positive integer, not '0'" -- "${S[@]}" "${RUN[@]}" --dp 0
expect bad_zero_stage 2 "--zero must be an integer >= 0 <= 3, not '4'" -- "${S[@]}" "${RUN[@]}" --zero 4
expect bad_dtype 2 "--dtype 'bf61' is not one of bf16 \| fp32 \| fp8 \(did you mean 'bf16'\?\)" -- "${S[@]}" "${RUN[@]}" --dtype bf61
expect missing_model 2 "gen size needs --model, or all of --params, --layers and --d-model — " -- "${S[@]}" --params 1e9 --hw testgpu
expect unknown_hw 2 "unknown --hw 'tstgpu' \(did you mean 'testgpu'\?\)" -- "${S[@]}" --params 1e9 --layers 2 --d-model 64 --hw tstgpu
expect unknown_set_key 2 "--set testgpu\.price=1: unknown hardware key 'price'" -- "${S[@]}" "${RUN[@]}" --set testgpu.price=1
expect set_unknown_hw 2 "--set tstgpu\.price_per_hr=1: no hardware 'tstgpu' among --hw \(did you mean 'testgpu'\?\)" -- "${S[@]}" "${RUN[@]}" --set tstgpu.price_per_hr=1
expect set_negative 2 "--set price_per_hr=-1: price_per_hr must be a number >= 0" -- "${S[@]}" "${RUN[@]}" --set price_per_hr=-1
expect set_not_kv 2 "--set 'price_per_hr' is not KEY=VALUE" -- "${S[@]}" "${RUN[@]}" --set price_per_hr
expect bad_hw_schema 2 "bad-hw\.yaml:[0-9]+:[0-9]+: unknown key 'peak_tflop' \(did you mean 'peak_tflops'\?\)" -- "${S[@]}" --params 1e9 --layers 2 --d-model 64 --hw "$TMP/bad-hw.yaml"
expect dp_auto_needs_target 2 "--dp auto needs --target-tps" -- "${S[@]}" "${RUN[@]}" --dp auto
expect clusters_need_tokens 2 "--clusters compares the time and cost of training a token count — add --tokens" -- "${S[@]}" "${RUN[@]}" --clusters 2xtestgpu
expect clusters_bad_item 2 "--clusters item 'h100' is not COUNTxHARDWARE" -- "${S[@]}" "${RUN[@]}" --tokens 1e9 --clusters h100
expect unknown_flag 2 "unknown option '--param' \(did you mean '--params'\?\)" -- "${S[@]}" --param 1e9
expect missing_tree 2 "no such file — give the tree file with --tree" -- "$GEN" size --tree "$TMP/nope.yaml" "${RUN[@]}"
expect help_lists_flags 0 "--target-tps R.*" -- "$GEN" size --help
for f in --params --layers --d-model --tokens-per-step --dp --recompute --c-act --opt-bytes --util \
         --eff-compute --eff-memory --eff-network --target-tps --set --hw --tree --json --plot --zero --fsdp \
         --attention --batch --seq --tokens --chinchilla --clusters --dtype --memory-planning; do
  check "help_documents_$f" bash -c "'$GEN' size --help | grep -q -- '^ *$f'"
done

# --- the real specs: named models and hardware ----------------------------------------------------
expect named_model_hw 0 "h100-sxm +compute" -- "$GEN" size --tree "$TREE" --model gpt2-124m --hw h100-sxm
expect unknown_model 2 "unknown --model 'gpt2-124' \(did you mean 'gpt2-124m'\?\)" -- "$GEN" size --tree "$TREE" --model gpt2-124 --hw h100-sxm
expect seed004_question 0 "cluster for 200k tokens/s \(sorted by \\\$/hr\)" -- \
  "$GEN" size --tree "$TREE" --model llama3-70b --target-tps 2e5 --hw h100-sxm,h200,a100-80gb,l4
"$GEN" size --tree "$TREE" --model llama3-70b --target-tps 2e5 --hw h100-sxm,h200,a100-80gb,l4 --json > "$TMP/70b.json" 2>&1
usd=$(grep -o '"usd_per_hr":[[:space:]]*[0-9.eE+]*' "$TMP/70b.json" | sed 's/.*:[[:space:]]*//' | tr '\n' ' ')
check "70b_sorted_by_usd_per_hr ($usd)" bash -c "echo '$usd' | tr ' ' '\n' | grep . | sort -g -c"
check 70b_four_hardware [ "$(grep -c '"usd_per_tbps_hr"' "$TMP/70b.json")" = 4 ]
expect fp8_on_a100_falls_back 0 "a100-80gb has no fp8 peak" -- "$GEN" size --tree "$TREE" --model gpt2-124m --hw a100-80gb --dtype fp8
expect hw_by_path 0 "testgpu +compute" -- "$GEN" size --tree "$TREE" --model gpt2-124m --hw "$TMP/t/hardware/testgpu.yaml"

# --- the memory estimate agrees with the CPU runtime's arena ---------------------------------------
# The estimator replays the plan's buffers and lifetimes and takes the peak of live bytes (a lower
# bound of any packing); plan.lua's greedy packer (v2167) lands within a few percent above it (tiny:
# 26777600 vs 26515456 floats, 1.0%; gpt2-124m: equal). Without v2167 the plan gives every buffer
# its own region, and the estimate is exact. Model state: params + grads + AdamW m + v in fp32 =
# 16 B/param vs the runtime's 4 × param_bytes/4 floats (the parameter arena pads every tensor to 16 floats
# and the vocabulary to a multiple of 64: +0.03% for gpt2-124m).
arena_case() { # NAME MODEL BATCH SEQ
  local name=$1 model=$2 b=$3 t=$4
  rm -rf "$TMP/p1" "$TMP/p0"
  "$GEN" "$TREE" --model "$model" --target cpu --batch "$b" --seq "$t" --enable memory-planning -o "$TMP/p1" >/dev/null 2>&1
  "$GEN" "$TREE" --model "$model" --target cpu --batch "$b" --seq "$t" -o "$TMP/p0" >/dev/null 2>&1
  "$GEN" size --tree "$TREE" --model "$model" --hw host-cpu --batch "$b" --seq "$t" --json > "$TMP/s1.json" 2>&1
  "$GEN" size --tree "$TREE" --model "$model" --hw host-cpu --batch "$b" --seq "$t" --memory-planning off --json > "$TMP/s0.json" 2>&1
  local plan1 plan0 est1 est0 pf state
  plan1=$(( $(jnum "$TMP/p1/plan.json" act_bytes) / 4 )); plan0=$(( $(jnum "$TMP/p0/plan.json" act_bytes) / 4 ))
  pf=$(( $(jnum "$TMP/p1/plan.json" param_bytes) / 4 ))
  est1=$(awk -v x="$(jnum "$TMP/s1.json" activations)" 'BEGIN { printf "%.0f", x / 4 }')
  est0=$(awk -v x="$(jnum "$TMP/s0.json" activations)" 'BEGIN { printf "%.0f", x / 4 }')
  state=$(awk -v x="$(jnum "$TMP/s1.json" model_state)" 'BEGIN { printf "%.0f", x / 4 }')
  check "${name}_plans_generated" [ -n "$plan1" ] && [ -n "$plan0" ] && [ -n "$est1" ]
  check "${name}_planned_arena_within_3pct (plan $plan1, estimate $est1)" within "$plan1" "$est1" 0.03
  check "${name}_estimate_is_a_lower_bound" le "$est1" "$plan1"
  check "${name}_unplanned_arena_exact (plan $plan0, estimate $est0)" [ "$plan0" = "$est0" ]
  check "${name}_model_state_within_0.1pct (4×param_floats $((4 * pf)), estimate $state)" within "$((4 * pf))" "$state" 0.001
}
arena_case tiny tiny 8 256
arena_case gpt2_124m gpt2-124m 4 64

# --- SVG ----------------------------------------------------------------------------------------
"$GEN" size --tree "$TREE" --model gpt2-124m --hw h100-sxm,a100-80gb,l4 --plot "$TMP/roof.svg" >/dev/null 2>&1
"$GEN" size --tree "$TREE" --model llama3-70b --target-tps 2e5 --hw h100-sxm,h200,a100-80gb,l4 --plot "$TMP/bars.svg" >/dev/null 2>&1
for f in roof bars; do
  check "${f}_svg_starts" bash -c "head -c 4 '$TMP/$f.svg' | grep -q '<svg'"
  check "${f}_svg_ends" bash -c "tail -n 1 '$TMP/$f.svg' | grep -q '</svg>\$'"
  check "${f}_svg_names_hardware" bash -c "grep -q '>h100-sxm<' '$TMP/$f.svg' && grep -q '>a100-80gb<' '$TMP/$f.svg' && grep -q '>l4<' '$TMP/$f.svg'"
  check "${f}_svg_axis_label" grep -q -e "arithmetic intensity" -e "cluster \$/hr" "$TMP/$f.svg"
  check "${f}_svg_balanced_tags" bash -c "[ \$(grep -o '<text' '$TMP/$f.svg' | wc -l) = \$(grep -o '</text>' '$TMP/$f.svg' | wc -l) ]"
  if command -v xmllint >/dev/null 2>&1; then check "${f}_svg_xmllint" xmllint --noout "$TMP/$f.svg"; fi
done
check roofline_has_point grep -q "<circle" "$TMP/roof.svg"
check bars_have_bars grep -q "<rect x=\"150\"" "$TMP/bars.svg"
expect plot_unwritable 2 "cannot write the plot" -- "$GEN" size --tree "$TREE" --model tiny --hw h100-sxm --plot "$TMP/no/such/dir/x.svg"
finish
