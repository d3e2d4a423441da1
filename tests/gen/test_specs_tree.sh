#!/usr/bin/env bash
# The real technology tree (specs/): 100 technique specs v2100..v2199, one file each, named after
# the spec; the whole tree, every model and every preset load and resolve through gen; and no spec
# claims `implemented` or `partial` unless a test names its id (docs/DESIGN.md: a status is a claim
# that a test backs). Runs with bash + grep only.
source "$(dirname "$0")/lib.sh"
TREE="$ROOT/specs/v2500.yaml"

# --- files: exactly one per id, file name = <id>_<name>.yaml, id/name fields match -----------
n_files=$(find "$ROOT/specs" -mindepth 2 -maxdepth 2 -name 'v21[0-9][0-9]_*.yaml' | wc -l)
check "100 spec files" [ "$n_files" -eq 100 ]
bad_files=""
for i in $(seq 2100 2199); do
  f=$(find "$ROOT/specs" -mindepth 2 -maxdepth 2 -name "v${i}_*.yaml")
  if [ "$(printf '%s\n' "$f" | grep -c .)" != 1 ]; then bad_files="$bad_files v$i(count)"; continue; fi
  base=$(basename "$f" .yaml)
  grep -qx "id: v$i" "$f" || bad_files="$bad_files v$i(id)"
  grep -qx "name: ${base#v${i}_}" "$f" || bad_files="$bad_files v$i(name)"
  grep -qx "branch: $(basename "$(dirname "$f")")" "$f" || bad_files="$bad_files v$i(branch)"
  grep -q "^ *- *$(basename "$(dirname "$f")")/$base.yaml$" "$TREE" || bad_files="$bad_files v$i(not in tree)"
done
check "one file per id v2100..v2199, named <id>_<name>.yaml, listed in its branch${bad_files:+ — bad:$bad_files}" [ -z "$bad_files" ]

# --- honest status: implemented/partial only with a test that names the id -------------------
unbacked=""
for f in $(grep -lE '^status: (implemented|partial)' "$ROOT"/specs/*/v21*.yaml); do
  id=$(sed -n 's/^id: //p' "$f")
  grep -rqw "$id" "$ROOT/tests/unit" "$ROOT/tests/gen" --include='test_*' --exclude="$(basename "$0")" ||
    unbacked="$unbacked $id"
done
check "implemented/partial specs are named by a test${unbacked:+ — unbacked:$unbacked}" [ -z "$unbacked" ]

# --- the tree validates and lists all 100 specs ---------------------------------------------
expect "gen list loads the tree" 0 'v2100' -- "$GEN" list "$TREE"
n_listed=$("$GEN" list "$TREE" 2>&1 | grep -cE '^  v21[0-9][0-9] ')
check "gen list shows 100 specs" [ "$n_listed" -eq 100 ]
expect "explain an alias with set" 0 'v2104 zero_optimizer' -- "$GEN" explain "$TREE" zero3
expect "explain a choose alias" 0 'flash_attention' -- "$GEN" explain "$TREE" flash

# --- every model file loads ----------------------------------------------------------------
for m in "$ROOT"/specs/models/*.yaml; do
  name=$(basename "$m" .yaml)
  if grep -q '^moe:' "$m"; then # a mixture of experts: `gen size` only (docs/moe.md, test_moe_models)
    expect "model $name loads" 0 "gen size — $name" -- "$GEN" size --model "$name" --hw h100-sxm
    continue
  fi
  expect "model $name loads" 0 "model $name" -- "$GEN" audit "$TREE" --enable clip --model "$name" --target cpu
done

# --- presets resolve on the targets they are meant for ------------------------------------
for p in quick-wins memory data stack-003 fp16-amp; do
  expect "preset $p resolves on cpu" 0 'Specs: [0-9]+ active' -- "$GEN" audit "$TREE" --enable "$p" --target cpu --model tiny
done
# advanced holds v2139 Shampoo, cpu only until it has a device kernel; the rest of it resolves on sm_90
expect "preset advanced refused on sm_90 for Shampoo (no device kernel)" 2 'v2139 shampoo: Shampoo has no device kernel' -- "$GEN" audit "$TREE" --enable advanced --target sm_90 --model tiny
expect "preset advanced without Shampoo and ring attention resolves on sm_90" 0 'Specs: [0-9]+ active' -- "$GEN" audit "$TREE" --enable fp8,curriculum,custom-kernels --target sm_90 --model tiny
# ring attention brings in v2108, whose module refuses every target but cpu
expect "preset advanced's ring attention refused (v2108 has no trainer yet)" 2 'v2108 sequence_parallel: context parallelism' -- "$GEN" audit "$TREE" --enable fp8,curriculum,custom-kernels,ring-attention --target sm_90 --model tiny
expect "preset advanced needs sm_89+ for fp8" 2 'v2160' -- "$GEN" audit "$TREE" --enable advanced --target sm_80 --model tiny
expect "flash is FA3 on sm_90 (what runs)" 0 'v2114 flash_attention_3\*\* \(partial\) — --enable flash' -- "$GEN" audit "$TREE" --enable flash --target sm_90 --model tiny
expect "flash is FA2 on sim (its FA2 trainer tests)" 0 'v2113 flash_attention_2\*\* \(partial\) — --enable flash' -- "$GEN" audit "$TREE" --enable flash --target sim --model tiny
expect "flash is FA2 on sm_80" 0 'v2113 flash_attention_2\*\* \(partial\) — --enable flash' -- "$GEN" audit "$TREE" --enable flash --target sm_80 --model tiny
expect "fa3 names FlashAttention-3" 0 'v2114 flash_attention_3\*\* \(partial\)' -- "$GEN" audit "$TREE" --enable fa3 --target sim --model tiny
expect "zero3 and fsdp conflict" 2 'v2105' -- "$GEN" audit "$TREE" --enable zero3,fsdp --target cpu --model tiny

finish
