#!/usr/bin/env bash
# Technique modules and honest selections: every implemented/partial spec has exactly one module
# (generator/lua/techniques/BRANCH/vNNNN_name.lua) and no planned/advisory spec has one; the
# pipeline files name no spec id; a selection with a planned spec is refused (exit 2, one line
# per spec) unless --allow-planned; partial specs warn with what they lack; the baseline v2100
# is active in every selection and its params reach the plan; v2105 fsdp's sharding param
# maps onto the ZeRO stages or is refused.
source "$(dirname "$0")/lib.sh" "$1"
T="$ROOT/specs/v2500.yaml"
MODS="$ROOT/generator/lua/techniques"

# --- modules <-> statuses --------------------------------------------------------------------
"$GEN" list "$T" --json > "$TMP/list.json"
python3 - "$TMP/list.json" "$MODS" > "$TMP/modcheck.txt" <<'EOF'
import json, os, sys
tree = json.load(open(sys.argv[1]))
status = {s["id"]: s["status"] for b in tree["branches"] for s in b["specs"]}
branch = {s["id"]: b["id"] for b in tree["branches"] for s in b["specs"]}
mods = {}
for br in os.listdir(sys.argv[2]):
    for f in os.listdir(os.path.join(sys.argv[2], br)):
        if f.endswith(".lua"):
            mods.setdefault(f[:5], []).append(br + "/" + f)
for i, st in sorted(status.items()):
    m = mods.get(i, [])
    if st in ("implemented", "partial") and len(m) != 1:
        print(f"{i} is {st} but has {len(m)} modules")
    if st in ("planned", "advisory") and m:
        print(f"{i} is {st} but has a module: {m}")
    for f in m:
        if not f.startswith(branch[i] + "/"):
            print(f"{i}: module {f} is not under its branch {branch[i]}/")
for i in mods:
    if i not in status:
        print(f"module for unknown spec {i}: {mods[i]}")
EOF
check test_every_implemented_or_partial_spec_has_one_module_and_planned_none test ! -s "$TMP/modcheck.txt"
cat "$TMP/modcheck.txt"

# --- the pipeline names no spec id (comments aside) ------------------------------------------
ids_in_pipeline() {
  for f in generator/lua/plan.lua generator/lua/render.lua generator/lua/template.lua generator/lua/kcompile.lua generator/lua/techniques.lua generator/lua/audit.lua; do
    sed 's/--.*//' "$ROOT/$f" | grep -nE 'v21[0-9]{2}' | sed "s|^|$f:|"
  done
}
check test_no_spec_id_in_pipeline_files test -z "$(ids_in_pipeline)"
ids_in_pipeline

# --- planned specs are refused, partial ones warn ----------------------------------------------
# the tree has no planned spec left: a copy of the tree in which v2114 (fa3) is planned again
# stands in for "a planned spec"
cp -r "$ROOT/specs" "$TMP/ptree"
sed -i -e 's/^status: partial$/status: planned/' -e '/^missing:/d' "$TMP/ptree/compute/v2114_flash_attention_3.yaml"
P="$TMP/ptree/v2500.yaml"
expect test_planned_fa3_refused 2 "v2114 flash_attention_3 \(--enable fa3 \(alias fa3\)\): planned: contributes nothing yet — drop it, or pass --allow-planned" \
  -- "$GEN" "$P" --enable fa3 --target sim --model tiny -o "$TMP/planned"
check test_planned_refusal_writes_nothing test ! -e "$TMP/planned"
expect test_planned_one_line_per_spec 2 "v2114 .*planned" -- "$GEN" "$P" --enable recompute,fa3,overlap,rmsnorm --target sim --model tiny -o "$TMP/four"
expect test_allow_planned_generates_with_a_warning 0 "warning: v2114 flash_attention_3 .*planned: contributes nothing yet \(--allow-planned\)" \
  -- "$GEN" "$P" --enable fa3 --allow-planned --target sim --model tiny -o "$TMP/planned2"
expect test_allow_planned_recorded_in_the_audit 0 "v2114 → planned: enabled with --allow-planned" -- "$GEN" audit "$TMP/planned2"
# two planned specs, two lines: the copy's v2164 (advisory, no module) made planned beside fa3
sed -i 's/^status: advisory$/status: planned/' "$TMP/ptree/compilation/v2164_compile_optimization.yaml"
n=$("$GEN" "$P" --enable fa3,compile --target sim --model tiny -o "$TMP/two" 2>&1 | grep -c "planned: contributes nothing yet")
check test_planned_two_specs_two_lines test "$n" = 2
# no shipped preset has a planned part now: the copy gets one that has (fa3, v2114)
sed -i 's/^  advanced:$/  with-planned:\n    doc: "test only: a preset with a planned part"\n    source: "tests\/gen\/test_techniques.sh"\n    enable: [adamw, fa3]\n  advanced:/' "$P"
expect test_preset_with_planned_specs_refused 2 "v2114 flash_attention_3 \(preset with-planned" -- "$GEN" "$P" --enable with-planned --target sim --model tiny -o "$TMP/mem"
expect test_list_says_which_preset_parts_are_planned 0 "with-planned .*\[planned: v2114 — needs --allow-planned\]" -- "$GEN" list "$P"
expect test_partial_spec_warns_what_is_missing 0 "warning: v2104 zero_optimizer is partial: stage 2 reduces each layer group" \
  -- "$GEN" "$T" --enable zero2 --model tiny -o "$TMP/z2"
expect test_advisory_spec_warns 0 "warning: v2164 compile_optimization .*advisory: documentation and estimates only" \
  -- "$GEN" "$T" --enable compile --model tiny -o "$TMP/compile"
expect test_v2166_on_cpu_says_it_changes_nothing 0 "warning: v2166 kernel_fusion: the cpu backend has no fused ops" \
  -- "$GEN" "$T" --enable fusion --model tiny -o "$TMP/fusion"

# --- v2100: the baseline, its params reach the plan ---------------------------------------------
plan_val() { python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1/plan.json" "$2"; }
expect test_v2100_is_active_in_every_selection 0 "v2100 training_acceleration\*\* \(partial\) — baseline: part of every selection" \
  -- "$GEN" audit "$TMP/z2"
"$GEN" "$T" --enable clip --set v2100.lr=0.0123 --set v2100.seed=7 --set v2100.batch_size=3 --model tiny -o "$TMP/v2100" >/dev/null 2>&1
check test_v2100_lr_reaches_the_plan test "$(plan_val "$TMP/v2100" "p['train']['lr']")" = 0.0123
check test_v2100_seed_reaches_the_plan test "$(plan_val "$TMP/v2100" "p['train']['seed']")" = 7
check test_v2100_batch_size_is_the_planned_batch test "$(plan_val "$TMP/v2100" "p['train']['B']")" = 3
check test_v2100_default_lr_is_size_based test "$(plan_val "$TMP/z2" "p['train']['lr']")" = 0.002
expect test_v2100_tf32_refused_on_cpu 2 "v2100 training_acceleration: fp32_matmul=tf32 on --target cpu.*--target sim or sm_XX" -- "$GEN" "$T" --enable tf32 --model tiny --target cpu -o "$TMP/tf32"

# --- v2105 fsdp: sharding maps onto ZeRO stages, hybrid_shard refused -----------------------------
"$GEN" "$T" --enable fsdp --model tiny -o "$TMP/fsdp3" >/dev/null 2>&1
check test_v2105_full_shard_is_stage3 test "$(plan_val "$TMP/fsdp3" "p['train']['zero_stage']")" = 3
"$GEN" "$T" --enable fsdp --set v2105.sharding=shard_grad_op --model tiny -o "$TMP/fsdp2" >/dev/null 2>&1
check test_v2105_shard_grad_op_is_stage2 test "$(plan_val "$TMP/fsdp2" "p['train']['zero_stage']")" = 2
"$GEN" "$T" --enable fsdp --set v2105.prefetch=false --model tiny -o "$TMP/fsdp0" >/dev/null 2>&1
check test_v2105_no_prefetch test "$(plan_val "$TMP/fsdp0" "p['train']['zero_prefetch']")" = 0
expect test_v2105_hybrid_shard_refused 2 "v2105 fsdp: sharding=hybrid_shard .* is not implemented" \
  -- "$GEN" "$T" --enable fsdp --set v2105.sharding=hybrid_shard --model tiny -o "$TMP/fsdph"

# --- v2181 comes with ZeRO; v2175 records elastic resume ----------------------------------------------
expect test_v2181_required_by_zero 0 "v2181 sharded_checkpoint\*\* \(implemented\) — required by v2104" -- "$GEN" audit "$TMP/z2"
check test_v2181_in_the_plan test "$(plan_val "$TMP/z2" "p['checkpoint']['sharded']")" = True
"$GEN" "$T" --enable v2175 --model tiny -o "$TMP/el" >/dev/null 2>&1
check test_v2175_in_the_plan test "$(plan_val "$TMP/el" "p['checkpoint']['elastic']")" = True

# --- v2142 qk-norm / v2141 rmsnorm: model switches ------------------------------------------------
"$GEN" "$T" --enable qk-norm --model tiny -o "$TMP/qkn" >/dev/null 2>&1
check test_v2142_gpt2_plan_has_qknorm_ops test "$(plan_val "$TMP/qkn" "sum(o['op'] == 'qknorm_fwd' for o in p['forward'])")" = "$(plan_val "$TMP/qkn" "p['model']['L']")"
check test_v2142_gpt2_plan_has_qknorm_bwd_ops test "$(plan_val "$TMP/qkn" "sum(o['op'] == 'qknorm_bwd' for o in p['backward'])")" = "$(plan_val "$TMP/qkn" "p['model']['L']")"
check test_v2142_gpt2_plan_has_q_norm_params test "$(plan_val "$TMP/qkn" "sum(q['name'].endswith(('attn.q_norm.weight', 'attn.k_norm.weight')) for q in p['params'])")" = "$(plan_val "$TMP/qkn" "2 * p['model']['L']")"
expect test_v2142_audit_says_what_it_added 0 "QK-norm: [0-9]+ q_norm/k_norm gain weights" -- "$GEN" audit "$TMP/qkn"
expect test_v2142_on_a_qk_norm_model_warns 0 "warning: v2142 qk_norm: model .* already has qk_norm: true" \
  -- "$GEN" "$T" --enable qk-norm --model tiny-llama -o "$TMP/qkn2"
"$GEN" "$T" --enable rmsnorm --model tiny -o "$TMP/rms" >/dev/null 2>&1
check test_v2141_gpt2_plan_has_no_layernorm test "$(plan_val "$TMP/rms" "sum(o['op'].startswith('layernorm') for o in p['forward'] + p['backward'])")" = 0
check test_v2141_gpt2_norms_have_no_bias test "$(plan_val "$TMP/rms" "sum('ln_' in q['name'] and q['name'].endswith('.bias') for q in p['params'])")" = 0
expect test_v2141_on_an_rmsnorm_model_warns 0 "warning: v2141 rmsnorm: model .* already uses norm: rmsnorm" \
  -- "$GEN" "$T" --enable rmsnorm --model tiny-llama -o "$TMP/rms2"

finish
