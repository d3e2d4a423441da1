#!/usr/bin/env bash
# v2118 memory-efficient attention through gen and the trainers:
#  - the `flash` alias picks v2118 below sm_80 (sm_75) and v2113 from sm_80; at sm_75 NVRTC
#    compiles the whole tiny trainer, the SIMT attention kernels included, with no spills;
#  - v2117 (flex) with v2118 on sim exits 2 (its rule is not in this kernel);
#  - a tiny sim trainer with v2118 (the generated SIMT kernels under the simulator) equals the cpu
#    trainer (the cpu's fp32 chunked op) step by step within 1e-4 relative (both fp32, different
#    summation orders: the bound test_mup_v2144 uses for sim vs cpu) and its loss falls.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
bible -f 'Gen1:1-Deu34:12' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | head -c 60000 > "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
T=specs/v2500.yaml
expect test_v2118_flash_alias_sm75 0 "no spills" -- "$GEN" "$T" --enable flash --model tiny --target sm_75 -o "$TMP/sm75"
check test_v2118_chosen_below_sm80 grep -q "alias flash → v2118" "$TMP/sm75/audit.md"
check test_v2118_kernels_compiled test -s "$TMP/sm75/kernels/mem_efficient_attention.cubin"
check test_v2118_resources_listed grep -q '"kernel":[[:space:]]*"mea_bwd_dkv"' "$TMP/sm75/kernels/resources.json"
expect gen_flash_sm80 0 "wrote" -- "$GEN" "$T" --enable flash --model tiny --target sim -o "$TMP/fa2"
check test_v2118_not_chosen_from_sm80 grep -q "alias flash → v2113" "$TMP/fa2/audit.md"
expect test_v2118_flex_refused 2 "v2117 flex_attention: .*not into v2118.* — " -- "$GEN" "$T" --enable xformers,flex --set v2117.mask=sliding_window --set v2117.window=8 --model tiny --target sim -o "$TMP/bad"
check test_v2118_flex_refused_no_output test ! -e "$TMP/bad"
S=(--model tiny --batch 2 --seq 32)
expect gen_v2118_sim 0 "wrote" -- "$GEN" "$T" --enable xformers "${S[@]}" --target sim -o "$TMP/sim"
expect gen_v2118_cpu 0 "wrote" -- "$GEN" "$T" --enable xformers "${S[@]}" --target cpu -o "$TMP/cpu"
for t in sim cpu; do
  expect "train_v2118_$t" 0 "done: 6 steps" -- "$TMP/$t/train" --data "$TMP/data" --steps 6 --eval-every 0 --lr 3e-3 --metrics "$TMP/$t.jsonl"
done
paste <(losses "$TMP/sim.jsonl") <(losses "$TMP/cpu.jsonl") | sed 's/^/    sim cpu: /'
same() { paste <(losses "$1") <(losses "$2") | awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $2) bad = 1 } END { exit bad || n != 6 }'; }
check test_v2118_sim_trainer_equals_cpu same "$TMP/sim.jsonl" "$TMP/cpu.jsonl"
check test_v2118_sim_loss_falls awk -v a="$(losses "$TMP/sim.jsonl" | head -1)" -v b="$(losses "$TMP/sim.jsonl" | tail -1)" 'BEGIN { exit !(a + 0 > 0 && b < a - 0.5) }'
finish
