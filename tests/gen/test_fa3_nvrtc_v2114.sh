#!/usr/bin/env bash
# v2114 FlashAttention-3 through gen (no GPU: NVRTC only):
#  - `gen render flash_attention --kernels flash3_attn_fwd --target sm_90` compiles the FA3
#    forward for sm_90a (the template marks it arch-specific) with zero spills: head dim 64 with
#    bf16 storage, 128 with fp32 storage and grouped heads, and 64 with the document mask, a
#    v2117 rule (sliding window + softcap), 64-key tiles and 3 stages; the TMA producer variant
#    (FA3_TMA, bf16 storage, a tensor-map argument) at head dims 128 and 64;
#  - the `flash` alias is v2114 on sm_90: a trainer for the fa3-gpt2 fixture (head dim 64) renders
#    flash3_attn_fwd beside the FA2 backward, compiles flash_attention.cu for sm_90a and the
#    other families for sm_90, with no spills; with bf16 storage its producer is TMA (the
#    manifest binds a tensor map over qkv); its PTX holds the warp-specialized schedule's
#    instructions (setmaxnreg 40/232, wgmma from descriptors and from registers, mbarrier
#    try_wait and arrive.expect_tx, cp.async.bulk.tensor.3d, bar.sync/bar.arrive) and ptxas reports no serialized wgmma
#    (C7514); a head dim without an FA3 layout (tiny: 32) keeps the FA2 forward and says so;
#  - refusals (exit 2, `where: what — how`, nothing written): fa3 below sm_90 and on cpu, a
#    block_k that is not a multiple of 16, more registers than setmaxnreg gives, too much shared
#    memory.
source "$(dirname "$0")/lib.sh"
T=specs/v2500.yaml
M=tests/fixtures/models/fa3-gpt2.yaml
if ! "$GEN" render flash_attention NH=2 NKV=2 HD=64 --kernels flash_attention_bwd_d --target sm_90 -o "$TMP/probe.cu" 2>"$TMP/probe.err" &&
   grep -q "without NVRTC" "$TMP/probe.err"; then
  echo "ok   skipped: gen was built without NVRTC"
  finish; exit $?
fi
r() { # tag, constants...: render + compile flash3_attn_fwd, the ptxas line on stderr
  local tag=$1; shift
  expect "test_v2114_nvrtc_$tag" 0 "flash3_attn_fwd: [0-9]+ registers, 0 bytes spilled, [0-9]+ bytes smem \(sm_90a\)" \
    -- "$GEN" render flash_attention "$@" --kernels flash3_attn_fwd --target sm_90 -o "$TMP/$tag.cu"
}
r hd64_bf16 NH=2 NKV=2 HD=64 PREC=bf16 ACT=bf16
r hd128_gqa NH=8 NKV=2 HD=128 PREC=bf16
r hd64_doc_sw_softcap_bk64_st3 NH=4 NKV=2 HD=64 PREC=bf16 DOCMASK=true MASK=sliding_window WINDOW=100 SCORE_MOD=softcap SOFTCAP=5 FA3_BK=64 FA3_STAGES=3
# the TMA producer (bf16 storage, a tensor-map argument; not in trainers yet)
r tma_hd128_gqa NH=8 NKV=2 HD=128 PREC=bf16 ACT=bf16 FA3_TMA=true
r tma_hd64_doc_bk64_st3 NH=4 NKV=2 HD=64 PREC=bf16 ACT=bf16 FA3_TMA=true DOCMASK=true FA3_BK=64 FA3_STAGES=3
check test_v2114_tma_signature grep -q "int T, const __grid_constant__ hyp_tmap tmap)" "$TMP/tma_hd128_gqa.cu"
expect test_v2114_tma_needs_bf16 1 "FA3_TMA needs ACT bf16" -- "$GEN" render flash_attention NH=2 NKV=2 HD=64 PREC=bf16 FA3_TMA=true --kernels flash3_attn_fwd -o "$TMP/tma_f32.cu"
check test_v2114_rule_rendered grep -q "return k <= q && q - k < WINDOW;" "$TMP/hd64_doc_sw_softcap_bk64_st3.cu"
expect test_v2114_render_hd32_refused 1 "flash3_attn_fwd needs HD 64 or 128" -- "$GEN" render flash_attention NH=4 NKV=4 HD=32 --kernels flash3_attn_fwd -o "$TMP/hd32.cu"

# the trainer: flash is FA3 on sm_90
expect gen_fa3_sm90 0 "no spills" -- "$GEN" "$T" --enable adamw,bf16,flash --model "$M" --target sm_90 --batch 2 --seq 256 -o "$TMP/t90"
check test_v2114_flash_alias_sm90 grep -q "alias flash → v2114" "$TMP/t90/audit.md"
check test_v2114_fwd_is_fa3 grep -q '"kernel":[[:space:]]*"flash3_attn_fwd"' "$TMP/t90/kernels/resources.json"
check test_v2114_bwd_is_fa2 grep -q '"kernel":[[:space:]]*"flash_attention_bwd_dkv"' "$TMP/t90/kernels/resources.json"
check test_v2114_no_fa2_fwd bash -c "! grep -q '\"kernel\":[[:space:]]*\"flash_attention_fwd\"' '$TMP/t90/kernels/resources.json'"
check test_v2114_arch_sm_90a grep -q "kernels.flash_attention.arch → sm_90a" "$TMP/t90/audit.md"
check test_v2114_other_families_sm_90 grep -q "Compiling entry function 'layernorm_fwd' for 'sm_90'" "$TMP/t90/kernels/compile.log"
for w in 'setmaxnreg.inc.sync.aligned.u32 232' 'setmaxnreg.dec.sync.aligned.u32 40' \
         'wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {[^}]*}, %rd' \
         'wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {[^}]*}, {%r' \
         'mbarrier.try_wait.parity' 'bar.arrive' 'bar.sync' 'wgmma.wait_group.sync.aligned 1' \
         'cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes' 'mbarrier.arrive.expect_tx'; do
  check "test_v2114_ptx_has ${w%% *}" grep -qE "$w" "$TMP/t90/kernels/flash_attention.ptx"
done
check test_v2114_bf16_trainer_producer_is_tma grep -q "v2114.producer → TMA" "$TMP/t90/audit.md"
check test_v2114_tma_binding_in_manifest grep -q '"tmap:in1:R, T, B:64, 64, 1:3"' "$TMP/t90/kernels/kernels.json"
check test_v2114_no_serialized_wgmma bash -c "! grep -q C7514 '$TMP/t90/kernels/compile.log'"
grep -A4 "Compiling entry function 'flash3_attn_fwd'" "$TMP/t90/kernels/compile.log" | grep "Used" | sed 's/^/     flash3_attn_fwd (fa3-gpt2, sm_90a): /'
check test_v2114_hd32_keeps_fa2_forward bash -c "'$GEN' audit '$T' --enable flash --model tiny --target sm_90 | grep -q 'v2114.forward → FA2 template: head dim 32'"
# v2117's audit counts the FA3 forward's skipped tiles (sliding window 128 at T 1024: each
# 128-query tile sees its own key tile and the one before, 1 + 7 x 2 = 15 of 64; causal 36)
expect test_v2114_v2117_fa3_tiles_in_audit 0 "the FA3 forward \(128x128 tiles\) visits 15 of 64, skips 49 fully masked \(causal 36: 58.3% fewer\)" \
  -- "$GEN" audit "$T" --enable flash,flex --set v2117.mask=sliding_window --set v2117.window=128 --model gpt2-124m --seq 1024 --target sm_90

# the performance model: FA3 vs FA2 per attention layer on H100 from the two kernels' declared
# work (gpt2-124m, T 1024, causal; a sim trainer: gen compiles nothing), beside the paper's ratio
expect gen_fa3_gpt2_t1024 0 "wrote" -- "$GEN" "$T" --enable bf16,fa3 --model gpt2-124m --target sim --batch 4 --seq 1024 -o "$TMP/g1k"
expect test_v2114_perf_fa3_vs_fa2 0 "attention forward per layer \(B=4 T=1024 NH=12 HD=64, bf16 operands\): FA2 .* FA3 predicted [0-9.]+x faster; the FA3 paper measured 1.5-2.0x" \
  -- "$GEN" perf "$TMP/g1k" --hw h100-sxm
"$GEN" perf "$TMP/g1k" --hw h100-sxm | grep "attention forward per layer" | sed 's/^/     /'
ratio=$("$GEN" perf "$TMP/g1k" --hw h100-sxm | sed -n 's/.*FA3 predicted \([0-9.]*\)x faster.*/\1/p')
check test_v2114_perf_fa3_faster python3 -c "import sys; sys.exit(not (1.0 < float('$ratio') < 4.0))"
check test_v2114_perf_no_line_off_hopper bash -c "! '$GEN' perf '$TMP/g1k' --hw a100-80gb | grep -q 'attention forward per layer'"

# refusals
bad() { # name, pattern, gen args...
  local name=$1 pat=$2; shift 2
  expect "$name" 2 "$pat" -- "$GEN" "$T" "$@" -o "$TMP/bad"
  check "${name}_writes_nothing" test ! -e "$TMP/bad"
}
bad test_v2114_refused_sm80 "v2114 flash_attention_3 cannot run on --target sm_80: it needs sm_90 .* — " --enable fa3 --model "$M" --target sm_80
bad test_v2114_refused_cpu "v2114 flash_attention_3 cannot run on --target cpu: it runs only on cuda/sim targets.* — " --enable fa3 --model "$M" --target cpu
bad test_v2114_block_k_72 "^v2114.block_k: block_k 72 is not a multiple of 16 .* — use" --enable flash --model "$M" --target sm_90 --set v2114.block_k=72
bad test_v2114_block_k_256_registers "^v2114.block_k: block_k 256 at head dim 64: .*setmaxnreg.* — use" --enable flash --model "$M" --target sm_90 --set v2114.block_k=256
bad test_v2114_stages_smem "^v2114.block_k: 4 stages of 128 keys at head dim 128 need [0-9]+ bytes of shared memory.* — use" --enable fa3 --model llama3-8b --target sm_90 --set v2114.stages=4
finish
