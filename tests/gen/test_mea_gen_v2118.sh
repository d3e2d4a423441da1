#!/usr/bin/env bash
# v2118 memory-efficient attention through gen and the trainers:
#  - the `flash` alias picks v2118 below sm_80 (sm_75) and v2113 from sm_80; at sm_75 NVRTC
#    compiles the whole tiny trainer, the SIMT attention kernels included, with no spills;
#  - v2117's rule (sliding window 8 + softcap 3) rendered into this kernel: the sim trainer equals
#    the cpu trainer with the same rule and differs from the plain one;
#  - a tiny sim trainer with v2118 (the generated SIMT kernels under the simulator) equals the cpu
#    trainer (the cpu's fp32 chunked op) step by step within 1e-4 relative (both fp32, different
#    summation orders: the bound test_mup_v2144 uses for sim vs cpu) and its loss falls.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/corpus.txt" 60000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
T=specs/v2500.yaml
expect test_v2118_flash_alias_sm75 0 "no spills" -- "$GEN" "$T" --enable flash --model tiny --target sm_75 -o "$TMP/sm75"
check test_v2118_chosen_below_sm80 grep -q "alias flash → v2118" "$TMP/sm75/audit.md"
check test_v2118_kernels_compiled test -s "$TMP/sm75/kernels/mem_efficient_attention.cubin"
check test_v2118_resources_listed grep -q '"kernel":[[:space:]]*"mea_bwd_dkv"' "$TMP/sm75/kernels/resources.json"
expect gen_flash_sm80 0 "wrote" -- "$GEN" "$T" --enable flash --model tiny --target sim -o "$TMP/fa2"
check test_v2118_not_chosen_from_sm80 grep -q "alias flash → v2113" "$TMP/fa2/audit.md"
S=(--model tiny --batch 2 --seq 32)
expect gen_v2118_sim 0 "wrote" -- "$GEN" "$T" --enable xformers "${S[@]}" --target sim -o "$TMP/sim"
expect gen_v2118_cpu 0 "wrote" -- "$GEN" "$T" --enable xformers "${S[@]}" --target cpu -o "$TMP/cpu"
# v2117's rule rendered into this kernel: sliding window 8 + softcap 3
FX=(--enable xformers,flex --set v2117.mask=sliding_window --set v2117.window=8 --set v2117.score_mod=softcap --set v2117.softcap=3)
expect gen_v2117_v2118_sim 0 "wrote" -- "$GEN" "$T" "${FX[@]}" "${S[@]}" --target sim -o "$TMP/fsim"
expect gen_v2117_v2118_cpu 0 "wrote" -- "$GEN" "$T" "${FX[@]}" "${S[@]}" --target cpu -o "$TMP/fcpu"
check test_v2117_v2118_rule_rendered grep -q "return k <= q && q - k < WINDOW;" "$TMP/fsim/kernels/mem_efficient_attention.cu"
for t in sim cpu fsim fcpu; do
  expect "train_v2118_$t" 0 "done: 6 steps" -- "$TMP/$t/train" --data "$TMP/data" --steps 6 --eval-every 0 --lr 3e-3 --metrics "$TMP/$t.jsonl"
done
paste <(losses "$TMP/sim.jsonl") <(losses "$TMP/cpu.jsonl") | sed 's/^/    sim cpu: /'
same() { paste <(losses "$1") <(losses "$2") | awk '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $2) bad = 1 } END { exit bad || n != 6 }'; }
check test_v2118_sim_trainer_equals_cpu same "$TMP/sim.jsonl" "$TMP/cpu.jsonl"
paste <(losses "$TMP/fsim.jsonl") <(losses "$TMP/fcpu.jsonl") | sed 's/^/    flex sim cpu: /'
check test_v2117_v2118_sim_trainer_equals_cpu same "$TMP/fsim.jsonl" "$TMP/fcpu.jsonl"
differs() { paste <(losses "$1") <(losses "$2") | awk '{ d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > m) m = d } END { exit !(m > 1e-3) }'; }
check test_v2117_v2118_rule_changes_losses differs "$TMP/fsim.jsonl" "$TMP/sim.jsonl"
check test_v2118_sim_loss_falls awk -v a="$(losses "$TMP/sim.jsonl" | head -1)" -v b="$(losses "$TMP/sim.jsonl" | tail -1)" 'BEGIN { exit !(a + 0 > 0 && b < a - 0.5) }'
finish
