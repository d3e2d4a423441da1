#!/usr/bin/env bash
# The resolver on the real tree: aliases (with params), presets, closure over requires with the
# reason recorded, per-target alias choice (flash), hardware gates, --set precedence, and the
# golden audit (tests/golden/*.json; regenerate with UPDATE_GOLDEN=1 after an intended change).
source "$(dirname "$0")/lib.sh"
T=specs/v2500.yaml
J="$TMP/a.json"
aud() { "$GEN" audit $T --json "$@" > "$J"; }
state() { # state ID -> "active|inactive|advisory reason..."
  tr -d '\n' < "$J" | grep -oE "\{[^{}]*\"id\":[[:space:]]*\"$1\"[^{}]*" | head -1
}
aud --enable fp8,flash,zero3 --target sm_90
check closure_fp8_requires_mixed_precision bash -c "tr -d '\n' < '$J' | grep -qE '\"required by v2160\"'"
check zero3_sets_stage_3 bash -c "tr -d '\n\t ' < '$J' | grep -qE '\"stage\":\{\"source\":\"aliaszero3\",\"value\":3\}'"
# flash names what runs: FA3 (v2114) on sm_90 GPUs, FA2 (v2113) elsewhere
check flash_is_fa3_on_sm90 python3 -c "import json,sys; a=json.load(open(sys.argv[1])); st={r['id']: r['state'] for r in a['specs']}; sys.exit(not (st['v2114'] == 'active' and st['v2113'] == 'inactive'))" "$J"
aud --enable flash --target sm_80
check flash_is_fa2_on_sm80 bash -c "tr -d '\n' < '$J' | grep -q 'v2113' && tr -d '\n' < '$J' | grep -qE 'alias flash'"
expect flash_fa2_on_cpu 0 "v2113 flash_attention_2\*\* \(partial\) — --enable flash \(alias flash\)" -- "$GEN" audit $T --enable flash --target cpu
expect fp8_gate_fails_on_sm80 2 "v2160 fp8_training cannot run on --target sm_80: it needs sm_89 or newer" -- "$GEN" audit $T --enable fp8 --target sm_80
expect fp8_ok_on_sm89 0 "v2160 fp8_training" -- "$GEN" audit $T --enable fp8 --target sm_89
expect fp8_cpu_emulated 0 "v2160 gate → emulated: needs sm_89 on a GPU; the cpu backend emulates its numerics" -- "$GEN" audit $T --enable fp8 --target cpu
expect zero3_conflicts_fsdp 2 "v2104 zero_optimizer .* conflicts with v2105 fsdp" -- "$GEN" audit $T --enable zero3,fsdp --target sm_90
expect optimizers_conflict 2 "conflicts with" -- "$GEN" audit $T --enable lion,muon --target sm_90
expect preset_quick_wins 0 "preset quick-wins" -- "$GEN" audit $T --enable quick-wins --target sm_90
expect preset_by_flag 0 "preset memory" -- "$GEN" audit $T --preset memory --target sm_90
expect set_beats_alias 0 "stage=2 \(--set\)" -- "$GEN" audit $T --enable zero3 --set v2104.stage=2 --target sm_90
expect spec_by_name 0 "v2112 flash_attention" -- "$GEN" audit $T --enable flash_attention --target sm_90
expect every_preset_resolves_on_sm90 0 "" -- bash -c "for p in quick-wins memory data stack-003 fp16-amp; do '$GEN' audit $T --enable \$p --target sm_90 >/dev/null || exit 1; done"
# advanced holds v2139 Shampoo, which has no device kernel yet (cpu only): refused on sm_90 with its reason
expect preset_advanced_refused_on_sm90_until_shampoo_has_a_device_kernel 2 "v2139 shampoo: Shampoo has no device kernel" -- "$GEN" audit $T --enable advanced --target sm_90
expect list_json 0 "\"branches\"" -- "$GEN" list $T --json
expect explain_json 0 "\"required_by\"" -- "$GEN" explain $T v2102 --json
expect explain_alias 0 "v2104 zero_optimizer" -- "$GEN" explain $T zero3
expect explain_unknown 2 "unknown spec 'v2999'" -- "$GEN" explain $T v2999
n=$("$GEN" audit $T --enable quick-wins --target sm_90 --json | grep -c '"state"')
check audit_covers_all_100_specs test "$n" = 100

# golden audit of the headline selection
G="$ROOT/tests/golden/audit_fp8_flash_zero3_sm90.json"
"$GEN" audit $T --enable fp8,flash,zero3 --target sm_90 --json > "$TMP/golden.json"
if [ "${UPDATE_GOLDEN:-}" = 1 ]; then cp "$TMP/golden.json" "$G"; echo "golden updated: $G"; fi
check golden_audit_fp8_flash_zero3_sm90 diff -u "$G" "$TMP/golden.json"
finish
