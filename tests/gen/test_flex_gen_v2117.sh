#!/usr/bin/env bash
# v2117 flex attention through gen and the cpu trainer.
#  - bad parameters exit 2 with `where: what — how to fix` and write nothing: window 0, softcap 0,
#    prefix_lm without a prefix, a prefix longer than T, alibi with 12 heads (the paper's slopes
#    need 2^k), document without v2126 packing, v2117 on sim without flash (the naive template has
#    no rule);
#  - the plan's attention ops carry the rule; the FA2 template renders it (sim target);
#  - the audit's skipped-tile count at T 1024, window 128 equals the closed form for the cpu op's
#    64 x 64 tiles and the template's 64 x 32 forward tiles (computed here independently);
#  - training (cpu, tiny, T 64): sliding window 16 trains (loss falls by > 0.3 over 20 steps) and
#    differs from causal; the naive and the flash cpu ops give the same losses (both evaluate the
#    same rule: fp32 summation orders only, 1e-4 relative over 20 steps as test_mup_v2144's
#    sim-vs-cpu bound); softcap and prefix_lm (prefix 8) train too.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/corpus.txt" 60000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
T=specs/v2500.yaml
json() { python3 -c "import json,sys; p=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# --- bad input -------------------------------------------------------------------------------
bad() { # bad NAME REGEX gen-args...
  local name=$1 re=$2; shift 2
  expect "test_v2117_bad_$name" 2 "$re" -- "$GEN" "$T" "$@" -o "$TMP/bad_$name"
  check "test_v2117_bad_${name}_no_output" test ! -e "$TMP/bad_$name"
}
bad window0 "v2117.window.*>= 1 — " --enable flash,flex --set v2117.mask=sliding_window --set v2117.window=0 --model tiny
bad softcap0 "v2117.softcap.* — " --enable flash,flex --set v2117.score_mod=softcap --set v2117.softcap=0 --model tiny
bad prefix_missing "^v2117.prefix: mask prefix_lm needs .* — add --set v2117.prefix" --enable flash,flex --set v2117.mask=prefix_lm --model tiny
bad prefix_long "^v2117.prefix: .*longer than the sequence .* — " --enable flash,flex --set v2117.mask=prefix_lm --set v2117.prefix=100 --model tiny --seq 64
bad alibi_12_heads "^v2117.score_mod: .*power-of-two head count.* 12 .* — " --enable flash,flex --set v2117.score_mod=alibi --model gpt2-124m
bad document_no_packing "^v2117.mask: mask document .* — add --enable v2126" --enable flash,flex --set v2117.mask=document --model tiny
bad sim_naive "v2117 flex_attention: .*flash templates only.* — enable flash" --enable flex --model tiny --target sim

# --- plan, render, audit ---------------------------------------------------------------------
expect gen_v2117_sim 0 "wrote" -- "$GEN" "$T" --enable flash,flex --set v2117.mask=sliding_window --set v2117.window=40 \
  --set v2117.score_mod=softcap --set v2117.softcap=5 --model tiny --target sim -o "$TMP/sim"
check test_v2117_plan_attrs python3 -c "
import json, sys; p = json.load(open('$TMP/sim/plan.json'))
a = [o['attrs'] for o in p['forward'] + p['backward'] if 'attention' in o['op']]
sys.exit(not (len(a) == 8 and all((x.get('mask'), x.get('window'), x.get('score_mod'), x.get('softcap')) == ('sliding_window', 40, 'softcap', 5.0) for x in a)))"
check test_v2117_template_renders_rule grep -q "return k <= q && q - k < WINDOW;" "$TMP/sim/kernels/flash_attention.cu"
check test_v2117_template_renders_softcap grep -q "return SOFTCAP \* tanhf(s / SOFTCAP);" "$TMP/sim/kernels/flash_attention.cu"

expect gen_v2117_t1024 0 "wrote" -- "$GEN" "$T" --enable flash,flex --set v2117.mask=sliding_window --set v2117.window=128 \
  --model gpt2-124m --batch 1 --seq 1024 -o "$TMP/t1024"
# closed form: query tile i of BQ rows sees keys [max(0, i BQ - W + 1), i BQ + BQ - 1]
visited() { awk -v T="$1" -v BQ="$2" -v BK="$3" -v W="$4" 'BEGIN { v = 0
  for (i = 0; i * BQ < T; i++) { f = i * BQ - W + 1; if (f < 0) f = 0; v += int((i * BQ + BQ - 1) / BK) - int(f / BK) + 1 }
  print v }'; }
cpu_v=$(visited 1024 64 64 128); tpl_v=$(visited 1024 64 32 128)
line=$(grep -o "cpu op visits [0-9]* of [0-9]*, skips [0-9]*.*FA2 template (64x32 forward tiles) visits [0-9]* of [0-9]*, skips [0-9]* (causal [0-9]*: [0-9.]*% fewer)" "$TMP/t1024/audit.md")
echo "    audit: $line"
echo "    closed form: cpu visits $cpu_v of 256 (skips $((256 - cpu_v))), template visits $tpl_v of 512 (skips $((512 - tpl_v)))"
check test_v2117_audit_skipped_tiles_cpu grep -q "cpu op visits $cpu_v of 256, skips $((256 - cpu_v)) fully masked" "$TMP/t1024/audit.md"
check test_v2117_audit_skipped_tiles_template grep -q "FA2 template (64x32 forward tiles) visits $tpl_v of 512, skips $((512 - tpl_v)) " "$TMP/t1024/audit.md"

# --- training --------------------------------------------------------------------------------
S=(--model tiny --target cpu --batch 4 --seq 64)
run() { # run NAME gen-args...: gen + 20 steps
  local name=$1; shift
  expect "gen_$name" 0 "wrote" -- "$GEN" "$T" "$@" "${S[@]}" -o "$TMP/$name"
  expect "train_$name" 0 "done: 20 steps" -- "$TMP/$name/train" --data "$TMP/data" --steps 20 --eval-every 0 --lr 3e-3 --metrics "$TMP/$name.jsonl"
}
SW=(--set v2117.mask=sliding_window --set v2117.window=16)
run causal --enable flash
run sw_flash --enable flash,flex "${SW[@]}"
run sw_naive --enable flex "${SW[@]}"
run softcap --enable flash,flex --set v2117.score_mod=softcap --set v2117.softcap=2
run prefix --enable flash,flex --set v2117.mask=prefix_lm --set v2117.prefix=8
for r in causal sw_flash sw_naive softcap prefix; do
  echo "    $r: loss $(losses "$TMP/$r.jsonl" | head -1) -> $(losses "$TMP/$r.jsonl" | tail -1)"
done
falls() { awk -v a="$(losses "$1" | head -1)" -v b="$(losses "$1" | tail -1)" 'BEGIN { exit !(a + 0 > 0 && b < a - 0.3) }'; }
check test_v2117_sliding_window_trains falls "$TMP/sw_flash.jsonl"
check test_v2117_softcap_trains falls "$TMP/softcap.jsonl"
check test_v2117_prefix_lm_trains falls "$TMP/prefix.jsonl"
differs() { paste <(losses "$1") <(losses "$2") | awk '{ d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > m) m = d } END { exit !(m > 1e-3) }'; }
check test_v2117_sliding_window_differs_from_causal differs "$TMP/sw_flash.jsonl" "$TMP/causal.jsonl"
check test_v2117_softcap_differs_from_causal differs "$TMP/softcap.jsonl" "$TMP/causal.jsonl"
same() { paste <(losses "$1") <(losses "$2") | awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $2) bad = 1 } END { exit bad || n != 20 }'; }
check test_v2117_sliding_window_naive_equals_flash same "$TMP/sw_naive.jsonl" "$TMP/sw_flash.jsonl"
finish
