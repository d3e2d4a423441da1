#!/usr/bin/env bash
# Every class of bad input to gen gets "file:line:col: what — fix", exit status 2, no crash and
# no partial output. Uses a small private tree so the real specs can change freely.
source "$(dirname "$0")/lib.sh"

mk_tree() { # a valid 3-spec tree in $TMP/t
  rm -rf "$TMP/t"; mkdir -p "$TMP/t/memory" "$TMP/t/models" "$TMP/t/hardware"
  cat > "$TMP/t/v2500.yaml" <<'Y'
version: 2500
name: Test
branches:
  - id: memory
    title: Memory
    specs: [memory/v2104_zero_optimizer.yaml, memory/v2105_fsdp.yaml, memory/v2110_data_parallel.yaml]
aliases:
  zero2: {spec: v2104, set: {stage: 2}}
  zero3: {spec: v2104, set: {stage: 3}}
  fsdp: {spec: v2105}
presets:
  mem: {doc: "memory", enable: [zero3]}
Y
  cat > "$TMP/t/memory/v2104_zero_optimizer.yaml" <<'Y'
id: v2104
name: zero_optimizer
branch: memory
title: ZeRO
summary: shards optimizer state
status: planned
claims: [{claim: "8x per GPU", source: "seed 002"}]
requires: [v2110]
conflicts: [{id: v2105, why: "both shard model state"}]
params:
  stage: {type: int, default: 1, min: 1, max: 3, doc: "ZeRO stage"}
Y
  cat > "$TMP/t/memory/v2105_fsdp.yaml" <<'Y'
id: v2105
name: fsdp
branch: memory
title: FSDP
summary: shards
status: planned
claims: []
requires: [v2110]
conflicts: [{id: v2104, why: "both shard model state"}]
Y
  cat > "$TMP/t/memory/v2110_data_parallel.yaml" <<'Y'
id: v2110
name: data_parallel
branch: memory
title: DDP
summary: data parallel
status: planned
claims: []
requires: []
conflicts: []
gates: {min_sm: 89}
Y
  cat > "$TMP/t/models/tiny.yaml" <<'Y'
name: tiny
arch: gpt2
vocab_size: 256
context: 64
d_model: 32
n_layers: 1
n_heads: 2
ffn_hidden: 64
norm: layernorm
activation: gelu
position: learned
tied_embeddings: true
Y
}
T="$TMP/t/v2500.yaml"
S="$TMP/t/memory/v2105_fsdp.yaml"

mk_tree
expect valid_tree_lists 0 "v2104" -- "$GEN" list "$T"

mk_tree; printf 'id: v2105\nname: fsdp\n  branch: memory\n' > "$S"
expect malformed_yaml_has_position 2 "v2105_fsdp.yaml:[0-9]+:[0-9]+: invalid YAML" -- "$GEN" list "$T"

mk_tree; sed -i 's/^summary:/sumary:/' "$S"
expect unknown_key_did_you_mean 2 "v2105_fsdp.yaml:5:[0-9]+: unknown key 'sumary' \(did you mean 'summary'\?\) — " -- "$GEN" list "$T"

mk_tree; sed -i 's/^status: planned/status: plannd/' "$S"
expect bad_enum_did_you_mean 2 "v2105_fsdp.yaml:6:9: status: 'plannd' is not one of .*did you mean 'planned'" -- "$GEN" list "$T"

mk_tree; sed -i 's/^claims: \[\]/claims: 7/' "$S"
expect wrong_type 2 "v2105_fsdp.yaml:7:[0-9]+: claims must be a list, not integer" -- "$GEN" list "$T"

mk_tree; sed -i 's/default: 1, min: 1/default: 9, min: 1/' "$TMP/t/memory/v2104_zero_optimizer.yaml"
expect param_default_out_of_range 2 "v2104_zero_optimizer.yaml:[0-9]+:[0-9]+: v2104 param 'stage': default 9 must be <= 3" -- "$GEN" list "$T"

mk_tree; printf 'id: v2105\nid: v2106\n' > "$S"
expect duplicate_key 2 "v2105_fsdp.yaml:2:1: duplicate key 'id'" -- "$GEN" list "$T"

mk_tree; { echo 'a: &a ["x","x","x","x","x","x","x","x","x"]'; for i in b c d e f g h i; do echo "$i: &$i [*a,*a,*a,*a,*a,*a,*a,*a,*a]"; done; } > "$S"
expect alias_bomb_refused 2 "v2105_fsdp.yaml:1:4: YAML anchors" -- "$GEN" list "$T"

mk_tree; python3 -c "print('a: ' + '['*200 + ']'*200)" > "$S" 2>/dev/null || { printf 'a: '; for i in $(seq 200); do printf '['; done; for i in $(seq 200); do printf ']'; done; echo; } > "$S"
expect deep_nesting_refused 2 "v2105_fsdp.yaml:1:[0-9]+: nesting deeper than 64 levels" -- "$GEN" list "$T"

mk_tree; printf 'id: v2105\nname: "fs\xc3\x28dp"\n' > "$S"
expect invalid_utf8 2 "v2105_fsdp.yaml:[0-9]+:[0-9]+: invalid YAML.*(UTF-8|utf-8|octet)" -- "$GEN" list "$T"

mk_tree; head -c 300 /dev/urandom > "$S"; printf '\x00\x01\xff' >> "$S"
expect binary_garbage 2 "v2105_fsdp.yaml:[0-9]+:[0-9]+: " -- "$GEN" list "$T"

mk_tree; : > "$S"
expect empty_file 2 "v2105_fsdp.yaml:1:1: empty file" -- "$GEN" list "$T"

mk_tree; sed -i 's/^id: v2105/id: v2104/' "$S"
expect duplicate_id 2 "duplicate spec id v2104 \(also in .*v2104_zero_optimizer.yaml\)" -- "$GEN" list "$T"

mk_tree; sed -i 's/^requires: \[\]/requires: [v2104]/' "$TMP/t/memory/v2110_data_parallel.yaml"
expect dependency_cycle 2 "dependency cycle: v2104 -> v2110 -> v2104" -- "$GEN" list "$T"

mk_tree; sed -i 's/v2110_data_parallel.yaml\]/v2110_data_paralel.yaml]/' "$T"
expect missing_spec_file 2 "v2500.yaml:6:[0-9]+: spec file 'memory/v2110_data_paralel.yaml' does not exist" -- "$GEN" list "$T"

mk_tree; sed -i 's/^conflicts: \[{id: v2104.*$/conflicts: []/' "$S"
expect asymmetric_conflict 2 "v2104 conflicts with v2105 but v2105 does not list v2104" -- "$GEN" list "$T"

mk_tree
expect missing_tree 2 "no such file" -- "$GEN" list "$TMP/t/nope.yaml"
expect unknown_enable_did_you_mean 2 "unknown technique 'zer3' in --enable \(did you mean 'zero3'\?\)" -- "$GEN" audit "$T" --enable zer3 --target sm_90
expect conflict_names_both 2 "v2104 zero_optimizer .* conflicts with v2105 fsdp .*: both shard model state — keep one" -- "$GEN" audit "$T" --enable zero3,fsdp --target sm_90
expect gate_fails_on_old_gpu 2 "v2110 data_parallel cannot run on --target sm_80: it needs sm_89 or newer; --target sm_80 is sm_80" -- "$GEN" audit "$T" --enable zero3 --target sm_80
expect alias_param_clash 2 "'zero3' and 'zero2' both set v2104.stage \(3 vs 2\)" -- "$GEN" audit "$T" --enable zero3,zero2 --target sm_90
expect set_out_of_range 2 "--set v2104.stage=5: v2104.stage must be <= 3" -- "$GEN" audit "$T" --enable zero3 --set v2104.stage=5 --target sm_90
expect set_wrong_type 2 "v2104.stage must be an integer" -- "$GEN" audit "$T" --enable zero3 --set v2104.stage=two --target sm_90
expect set_unknown_param 2 "v2104 has no param 'stag' \(did you mean 'stage'\?\)" -- "$GEN" audit "$T" --enable zero3 --set v2104.stag=2 --target sm_90
expect set_inactive_spec 2 "v2105 fsdp is not active" -- "$GEN" audit "$T" --enable zero3 --set v2105.x=1 --target sm_90
expect set_overrides_alias 0 "stage=2 \(--set\)" -- "$GEN" audit "$T" --enable zero3 --set v2104.stage=2 --target sm_90
expect unknown_target 2 "unknown --target 'sm90' \(did you mean 'sm_90'\?\)" -- "$GEN" audit "$T" --enable zero3 --target sm90
expect unknown_flag 2 "unknown option '--enabel' \(did you mean '--enable'\?\)" -- "$GEN" audit "$T" --enabel zero3
expect unknown_model 2 "unknown --model 'tiyn' \(did you mean 'tiny'\?\)" -- "$GEN" "$T" --allow-planned --enable zero3 --target sm_90 --model tiyn -o "$TMP/out1"
check no_partial_output_on_error test ! -e "$TMP/out1"
check no_staging_left_behind bash -c "! ls '$TMP' | grep -q 'out1.tmp'"

# an existing output directory survives a failed regeneration untouched
expect generate_ok 0 "wrote" -- "$GEN" "$T" --allow-planned --enable zero3 --target sm_90 --model tiny -o "$TMP/out2"
before=$(cd "$TMP/out2" && sha1sum * | sha1sum)
expect failed_regenerate 2 "conflicts" -- "$GEN" "$T" --allow-planned --enable zero3,fsdp --target sm_90 --model tiny -o "$TMP/out2"
after=$(cd "$TMP/out2" && sha1sum * | sha1sum)
check existing_output_untouched_after_failure test "$before" = "$after"
finish
