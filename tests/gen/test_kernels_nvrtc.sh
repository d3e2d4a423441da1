#!/usr/bin/env bash
# Kernels through NVRTC (issue #4, v2164): every kernel of the tiny, gpt2-124m, tiny-llama and
# llama-176m-qknorm trainers (and the flash-attention ones of gpt2-124m and llama3-8b) compiles for sm_80 and sm_90 with zero register spills (or a reason
# written in the template); the content-addressed cache hits on a second run and on a copy of the
# tree and after a comment is added to a header, misses after a code change in a header or an
# option change, detects and rebuilds a corrupt entry, and is
# never blocked by a killed run; a compile error prints the NVRTC log, the options and the
# numbered source (exit 1); without NVRTC a GPU target is refused (exit 2) while cpu/sim work.
# The cache is private to this test (HYPERION_CACHE); hits and misses are read from gen's
# "gen: kernels: ... N compiled, M cached" line.
source "$(dirname "$0")/lib.sh"
export HYPERION_CACHE="$TMP/cache"
unset HYP_NVRTC_FLAGS HYP_NVRTC_DISABLE

probe=$("$GEN" specs/v2500.yaml --model tiny --target sm_90 -o "$TMP/probe" 2>&1)
if printf '%s' "$probe" | grep -q "without NVRTC"; then
  echo "skipped: this gen was built without NVRTC (no CUDA toolkit at configure time)"
  expect nvrtc_missing_is_exit_2 2 "without NVRTC.*--target cpu or --target sim" -- "$GEN" specs/v2500.yaml --model tiny --target sm_90 -o "$TMP/x"
  expect sim_target_still_renders 0 "rendered for sim" -- "$GEN" specs/v2500.yaml --model tiny --target sim -o "$TMP/sim"
  finish; exit $?
fi

# no spills: every kernel of resources.json has spills == 0, or a spill_reason from its template
# (awk over gen's JSON, one key per line: no JSON tool needed)
no_spills() {
  awk '/"kernel":/ { k = $0; gsub(/.*"kernel":[ \t]*"|".*/, "", k) }
       /"spill_reason":/ { r = 1 }
       /"spills":/ { s = $0; gsub(/[^0-9]/, "", s) }
       /^[ \t]*}/ { if (s + 0 > 0 && !r) { print "  spills: " k " " s " bytes"; bad = 1 } s = 0; r = 0 }
       END { exit bad }' "$1"
}
# every rendered file has a non-empty cubin and ptx and the header comment naming its template and
# specs; resources.json has one entry per kernel gen reported
all_compiled() {
  local d=$1 n f ok=0
  for f in "$d"/*.cu; do
    [ -s "${f%.cu}.cubin" ] && [ -s "${f%.cu}.ptx" ] || { echo "  no cubin/ptx for $f"; ok=1; }
    head -1 "$f" | grep -q "^// $(basename "$f") — rendered by gen .* from templates/" || { echo "  no header in $f"; ok=1; }
    grep -q "^// specs: " "$f" || { echo "  no specs line in $f"; ok=1; }
  done
  n=$(grep -oE '\(([0-9]+) kernels\)' "$d/../gen.out" | grep -oE '[0-9]+')
  [ "$(grep -c '"kernel":' "$d/resources.json")" = "$n" ] || { echo "  resources.json does not list the $n kernels"; ok=1; }
  return $ok
}

# model:selection — fusion brings the fused residual+norm kernels, bf16 the casts and round_bf16
# (v2161 runs in the cpu trainer only: no device trainer renders the bf16-weight AdamW)
CONFIGS=("tiny:adamw,clip,memory-planning" "gpt2-124m:adamw,clip,fusion,bf16" "tiny-llama:adamw,clip,fusion,bf16"
         "llama-176m-qknorm:adamw,fusion,bf16,accum")
for arch in sm_80 sm_90; do
  for c in "${CONFIGS[@]}"; do
    model=${c%%:*}; sel=${c#*:}; out="$TMP/k_${model}_$arch"
    # one gen run: its output is checked as expect would (exit 0, the kernels line, no internal
    # error) and kept for all_compiled's kernel count
    "$GEN" specs/v2500.yaml --enable "$sel" --model "$model" --target "$arch" -o "$out" > "$TMP/gen.out" 2>&1
    expect "compile_${model}_$arch" 0 "kernels: [0-9]+ files .* for $arch" -- bash -c 'cat "$1"; exit "$2"' _ "$TMP/gen.out" "$?" &&
      cp "$TMP/gen.out" "$out/gen.out"
    check "all_kernels_compiled_${model}_$arch" all_compiled "$out/kernels"
    check "test_v2164_no_spills_${model}_$arch" no_spills "$out/kernels/resources.json"
  done
done
# flash attention (v2112/v2113, templates/flash_attention.cu.lua): head dims 64 and 128 with bf16x3
# (fp32 policy) and bf16 (v2102) mma operands, GQA 32:8 with RoPE for llama3-8b; zero spills at
# sm_90, and at sm_80 for the case with the most registers (llama3-8b bf16x3: HD 128, 3 mma per
# product; the other three were measured spill-free at sm_80 too, left out to keep this test short);
# the fp8 + zero3 selection of tiny renders a template for every plan op. On sm_90 `flash` is
# FA3 (v2114: flash3_attn_fwd, compiled for sm_90a, with the FA2 backward): head dims 128 (fp32
# storage) and 64 (fp32 and bf16 storage); fa2 keeps the FA2 forward (bf16 policy, HD 128)
for arch in sm_80 sm_90; do
  FLASH=("llama3-8b:flash")
  [ "$arch" = sm_90 ] && FLASH+=("gpt2-124m:adamw,flash" "gpt2-124m:adamw,flash,bf16" "llama3-8b:fa2,bf16")
  for c in "${FLASH[@]}"; do
    model=${c%%:*}; sel=${c#*:}; out="$TMP/f_${model}_${sel//,/_}_$arch"
    "$GEN" specs/v2500.yaml --enable "$sel" --model "$model" --target "$arch" -o "$out" > "$TMP/gen.out" 2>&1
    check "compile_flash_${model}_${sel//,/_}_$arch" grep -q '"kernel":.*"flash_attention_bwd_dkv"' "$out/kernels/resources.json"
    check "test_v2113_flash_no_spills_${model}_${sel//,/_}_$arch" no_spills "$out/kernels/resources.json"
    check "flash_no_missing_template_${model}_${sel//,/_}_$arch" bash -c "! grep -q 'no kernel template' '$TMP/gen.out'"
  done
done
check flash_llama_renders_rope_launch grep -q '"rope_fwd":' "$TMP/f_llama3-8b_flash_sm_90/kernels/kernels.json"
check flash_precision_recorded grep -q "kernels.flash_attention.precision → bf16x3" "$TMP/f_llama3-8b_flash_sm_80/audit.md"
check flash_bf16_policy_uses_bf16_mma grep -q "kernels.attention → flash: FA2 template, bf16 mma" "$TMP/f_llama3-8b_fa2_bf16_sm_90/audit.md"
for c in llama3-8b_flash gpt2-124m_adamw_flash gpt2-124m_adamw_flash_bf16; do
  check "test_v2114_flash_is_fa3_on_sm90_$c" grep -q '"kernel":.*"flash3_attn_fwd"' "$TMP/f_${c}_sm_90/kernels/resources.json"
  check "test_v2114_fa3_compiled_for_sm_90a_$c" grep -q "kernels.flash_attention.arch → sm_90a" "$TMP/f_${c}_sm_90/audit.md"
done
"$GEN" specs/v2500.yaml --enable fp8,flash,zero3 --model tiny --target sm_90 -o "$TMP/h90" > "$TMP/h90.out" 2>&1
check test_v2112_fp8_flash_zero3_every_op_has_a_kernel bash -c "grep -q 'kernels: .* for sm_90' '$TMP/h90.out' && ! grep -q 'no kernel template' '$TMP/h90.out'"
check test_v2112_fp8_flash_zero3_no_spills no_spills "$TMP/h90/kernels/resources.json"

# FP8 (sm_89+): the e4m3/e5m2 casts with amax
expect compile_fp8_sm_90 0 "kernels: .* for sm_90" -- "$GEN" specs/v2500.yaml --enable fp8,fusion,adamw --model llama-176m-qknorm --target sm_90 -o "$TMP/fp8"
check fp8_casts_rendered grep -q "cast_f32_e4m3" "$TMP/fp8/kernels/cast.cu"
check fp8_fake_quantize_compiled grep -q '"kernel":.*"fp8_fake_quantize_e5m2"' "$TMP/fp8/kernels/resources.json"
check test_v2164_no_spills_fp8 no_spills "$TMP/fp8/kernels/resources.json"
expect audit_has_kernels_section 0 "## Kernels" -- "$GEN" audit "$TMP/fp8"
check audit_lists_v2160_contribution grep -q "contributed: kernel: fp32<->E4M3/E5M2 casts" "$TMP/fp8/audit.md"

# --- the cache (the matrix above filled $TMP/cache) -------------------------------------------
GPT=(specs/v2500.yaml --enable adamw,clip,fusion,bf16 --model gpt2-124m --target sm_90)
expect test_v2164_cache_hit_second_run 0 " 0 compiled, [1-9][0-9]* cached" -- "$GEN" "${GPT[@]}" -o "$TMP/c1out"
check cache_hit_same_cubin cmp "$TMP/c1out/kernels/layernorm.cubin" "$TMP/k_gpt2-124m_sm_90/kernels/layernorm.cubin"
# a copy of the source tree elsewhere: keys do not depend on paths, so it hits too
mkdir -p "$TMP/home/generator"
cp -r "$ROOT/specs" "$ROOT/templates" "$ROOT/kernels" "$TMP/home/"
cp -r "$ROOT/generator/lua" "$TMP/home/generator/"
expect cache_hit_tree_copy 0 " 0 compiled, [1-9][0-9]* cached" -- env HYPERION_HOME="$TMP/home" "$GEN" "${GPT[@]}" -o "$TMP/c2out"
# a comment added to a header changes no key (ckey.h: keys are taken without comments)
echo "// a comment added to the header" >> "$TMP/home/kernels/hyp/reduce.cuh"
expect cache_hit_after_header_comment 0 " 0 compiled, [1-9][0-9]* cached" -- env HYPERION_HOME="$TMP/home" "$GEN" "${GPT[@]}" -o "$TMP/c2out"
# a change of code in a header: exactly the files that include it (directly or not) miss
echo "#define HYP_TEST_HEADER_CHANGE 1" >> "$TMP/home/kernels/hyp/reduce.cuh"
n_incl=$(grep -l '#include "hyp/reduce.cuh"' "$TMP/c2out/kernels/"*.cu | wc -l)
n_all=$(ls "$TMP/c2out/kernels/"*.cu | wc -l)
expect test_v2164_cache_miss_after_header_change 0 " $n_incl compiled, $((n_all - n_incl)) cached" -- env HYPERION_HOME="$TMP/home" "$GEN" "${GPT[@]}" -o "$TMP/c2out"
# an option change: every file misses, then hits
expect test_v2164_cache_miss_after_option_change 0 " $n_all compiled, 0 cached" -- env HYP_NVRTC_FLAGS="-DHYP_TEST_OPTION=1" "$GEN" "${GPT[@]}" -o "$TMP/c3out"
expect option_change_then_hits 0 " 0 compiled" -- env HYP_NVRTC_FLAGS="-DHYP_TEST_OPTION=1" "$GEN" "${GPT[@]}" -o "$TMP/c3out"
# a corrupt entry (16 overwritten bytes, then a truncated one) is detected, reported and rebuilt
key=$(grep -m1 '"cache_key"' "$TMP/c1out/kernels/kernels.json" | grep -oE '[0-9a-f]{32}')
entry="$HYPERION_CACHE/nvrtc-1/${key:0:2}/$key.bin"
check cache_entry_named_by_key test -s "$entry"
size=$(stat -c %s "$entry")
printf 'CORRUPT-CORRUPT!' | dd of="$entry" bs=1 seek=$((size / 2)) conv=notrunc status=none
expect test_v2164_cache_corrupt_entry_rebuilt 0 "corrupt entry .*checksum mismatch.* rebuilt" -- "$GEN" "${GPT[@]}" -o "$TMP/c1out"
expect corrupt_entry_fixed_on_disk 0 " 0 compiled" -- "$GEN" "${GPT[@]}" -o "$TMP/c1out"
truncate -s 100 "$entry"
expect cache_truncated_entry_rebuilt 0 "corrupt entry .*(truncated|too short).* rebuilt" -- "$GEN" "${GPT[@]}" -o "$TMP/c1out"
# a killed run leaves no lock: kill gen in the middle of a cold compile (a new option makes it
# cold), leave what a killed writer could leave, then run again on the same cache
TMPDIR="$TMP" HYP_NVRTC_FLAGS="-DHYP_KILLED_RUN=1" "$GEN" "${GPT[@]}" -o "$TMP/c4out" >/dev/null 2>&1 &
pid=$!
sleep 0.7
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
touch "$HYPERION_CACHE/nvrtc-1/${key:0:2}/$key.bin.tmp-99999-0"
expect test_v2164_cache_no_lock_after_kill 0 " 0 compiled, [1-9][0-9]* cached" -- "$GEN" "${GPT[@]}" -o "$TMP/c4out"
# two gens racing on one empty cache: both succeed (entries are renamed into place, no locks),
# and the next run hits everything
( HYPERION_CACHE="$TMP/race" HYP_JOBS=1 "$GEN" specs/v2500.yaml --model tiny --target sm_80 -o "$TMP/race1" >"$TMP/race1.log" 2>&1; echo $? >"$TMP/race1.rc" ) &
( HYPERION_CACHE="$TMP/race" HYP_JOBS=1 "$GEN" specs/v2500.yaml --model tiny --target sm_80 -o "$TMP/race2" >"$TMP/race2.log" 2>&1; echo $? >"$TMP/race2.rc" ) &
wait
check test_v2164_cache_concurrent_gens_succeed test "$(cat "$TMP/race1.rc")$(cat "$TMP/race2.rc")" = "00"
expect cache_after_race_hits 0 " 0 compiled, [1-9][0-9]* cached" -- env HYPERION_CACHE="$TMP/race" "$GEN" specs/v2500.yaml --model tiny --target sm_80 -o "$TMP/race3"
check cache_after_race_no_temp_files test -z "$(find "$TMP/race" -name '*.tmp-*')"
# an unwritable cache only warns
expect cache_unwritable_warns 0 "cache unavailable" -- env HYPERION_CACHE=/proc/hyp-no-such-dir "$GEN" specs/v2500.yaml --model tiny --target sm_90 -o "$TMP/nocache"

# --- a compile error: NVRTC log, options, numbered source, exit 1, nothing written ----------
mkdir -p "$TMP/bad/generator"
cp -r "$ROOT/specs" "$ROOT/templates" "$ROOT/kernels" "$TMP/bad/"
cp -r "$ROOT/generator/lua" "$TMP/bad/generator/"
sed -i 's|^// One thread per 4 values: a 16-byte load and store|this is not C++;\n&|' "$TMP/bad/templates/gelu.cu.lua"
expect test_v2164_compile_error_reported 1 "NVRTC compile failed" -- env HYPERION_HOME="$TMP/bad" "$GEN" specs/v2500.yaml --model tiny --target sm_90 -o "$TMP/badout"
out=$(env HYPERION_HOME="$TMP/bad" "$GEN" specs/v2500.yaml --model tiny --target sm_90 -o "$TMP/badout" 2>&1)
check compile_error_has_log grep -qE 'gelu\.cu\([0-9]+\): error' <<<"$out"
check compile_error_has_options grep -q -- "--gpu-architecture=sm_90 .*--ptxas-options=-v" <<<"$out"
check compile_error_has_numbered_source grep -qE "^ +[0-9]+  this is not C\+\+;" <<<"$out"
check compile_error_writes_nothing test ! -e "$TMP/badout"

# --- without NVRTC: GPU targets refused, cpu and sim work ------------------------------------
expect nvrtc_missing_is_exit_2 2 "without NVRTC.*--target cpu or --target sim" -- env HYP_NVRTC_DISABLE=1 "$GEN" specs/v2500.yaml --model tiny --target sm_90 -o "$TMP/x"
check nvrtc_missing_writes_nothing test ! -e "$TMP/x"
expect nvrtc_missing_sim_renders 0 "rendered for sim" -- env HYP_NVRTC_DISABLE=1 "$GEN" specs/v2500.yaml --model tiny-llama --target sim -o "$TMP/sim"
check sim_has_sources_no_cubins bash -c "ls '$TMP/sim/kernels/'*.cu >/dev/null && ! ls '$TMP/sim/kernels/'*.cubin 2>/dev/null"
expect nvrtc_missing_cpu_works 0 "gen: wrote" -- env HYP_NVRTC_DISABLE=1 "$GEN" specs/v2500.yaml --model tiny --target cpu -o "$TMP/cpu"

# --- gen render: bad input ------------------------------------------------------------------
expect render_unknown_family 2 "unknown template family 'gelo'.*did you mean 'gelu'" -- "$GEN" render gelo
expect render_bad_constant 2 "constant C must be an integer" -- "$GEN" render layernorm C=abc
expect render_unknown_constant 2 "no constant CC" -- "$GEN" render layernorm CC=3
expect render_missing_constant 2 "constant H .* is required" -- "$GEN" render swiglu
expect render_list 0 "attention_naive" -- "$GEN" render --list
expect render_flash_bad_hd 2 "HD 40 is not supported by the flash kernels \(a multiple of 16 up to 128" -- "$GEN" render flash_attention NH=4 NKV=2 HD=40
expect render_flash_bad_prec 2 "constant PREC must be one of bf16, bf16x3, got fp16" -- "$GEN" render flash_attention NH=4 NKV=2 HD=64 PREC=fp16
finish
