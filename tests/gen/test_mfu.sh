#!/usr/bin/env bash
# MFU (v2187) and throughput metrics (v2186). A tiny cpu trainer runs a few steps on 2 threads:
# the banner names the peak it used ("peak X GFLOP/s fp32 measured at start ..., 2 threads"),
# which is within a sane range (0.5x..2x) of a separate measurement (tests/tools/fma_peak.c);
# every printed and logged MFU is in (0, 100%]; --peak-flops overrides. The metrics JSONL has the
# windowed tokens/s (p20/p50/p80), step time, data wait and communication wait, non-negative, the
# waits summing to at most the step time (also under mpirun -np 2, where the progress line shows
# the comm wait). The plan: PaLM's FLOP convention by default, v2187 attention=causal halves the
# attention term (formulas.lua), a GPU target's peak comes from specs/hardware at the GEMM dtype
# (bf16 under the bf16 policy), the simulator has none; v2186 sets the window. ~20 s.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
S="$ROOT/specs/v2500.yaml"
plan() { python3 -c "import json,sys; p=json.load(open('$1/plan.json')); print(eval(sys.argv[1]))" "$2"; }

# --- the plan --------------------------------------------------------------------------------
expect gen_baseline 0 "wrote" -- "$GEN" "$S" --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/base"
expect gen_mfu 0 "v2187 mfu_calculation is partial" -- "$GEN" "$S" --enable mfu --set v2186.window=4 --set v2186.skip_steps=1 \
  --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/t"
check test_v2187_baseline_convention_is_palm test "$(plan "$TMP/base" "p['flops_convention'].startswith('PaLM')")" = True
check test_v2187_cpu_peak_is_measured test "$(plan "$TMP/t" "p['hardware']['peak_source']")" = measured
check test_v2186_window_in_plan test "$(plan "$TMP/t" "p['throughput']")" = "{'skip_steps': 1, 'window': 4}"
check test_v2186_baseline_has_no_window test "$(plan "$TMP/base" "'throughput' in p")" = False
expect gen_causal 0 "wrote" -- "$GEN" "$S" --enable mfu --set v2187.attention=causal --model tiny --target cpu --batch 4 --seq 64 -o "$TMP/c"
check test_v2187_causal_halves_attention test "$(plan "$TMP/c" "p['flops_attn_coef']*2.0")" = "$(plan "$TMP/base" "p['flops_attn_coef']*1.0")"
check test_v2187_causal_same_matmul_part test "$(plan "$TMP/c" "p['flops_per_token']-p['flops_attn_coef']*p['train']['T']")" = \
  "$(plan "$TMP/base" "p['flops_per_token']-p['flops_attn_coef']*p['train']['T']")"
expect gen_sm90_bf16 0 "wrote" -- "$GEN" "$S" --enable mfu,bf16 --model tiny --target sm_90 -o "$TMP/g"
check test_v2187_gpu_peak_from_yaml_bf16 test "$(plan "$TMP/g" "(p['hardware']['name'], p['hardware']['peak_dtype'], p['hardware']['peak_flops'])")" = "('h100-sxm', 'bf16', 989400000000000.0)"
expect gen_sim 0 "wrote" -- "$GEN" "$S" --enable mfu --model tiny --target sim -o "$TMP/s"
check test_v2187_sim_has_no_peak test "$(plan "$TMP/s" "p['hardware'].get('peak_flops')")" = None

# --- a cpu run: MFU against this machine's measured peak ------------------------------------
C=(--data "$TMP/data" --steps 8 --eval-every 0)
expect run_2threads 0 "done: 8 steps" -- env OMP_NUM_THREADS=2 "$TMP/t/train" "${C[@]}" --metrics "$TMP/m.jsonl"
OMP_NUM_THREADS=2 "$TMP/t/train" "${C[@]}" --steps 3 > "$TMP/run.out" 2>&1
check test_v2187_banner_names_the_measured_peak grep -qE "peak [0-9.]+ GFLOP/s fp32 measured at start \((8|16)-wide FMA, 2 threads" "$TMP/run.out"
peak=$(grep -oE "peak [0-9.]+ GFLOP/s" "$TMP/run.out" | grep -oE "[0-9.]+" | head -1)
ref=$("$BUILD/tests/fma_peak" 2 0.3)
echo "     peak printed ${peak} GFLOP/s, separate measurement ${ref} GFLOP/s (2 threads)"
check test_v2187_peak_within_2x_of_a_separate_measurement python3 -c "import sys; r=$peak/$ref; sys.exit(not 0.5 <= r <= 2)"
mfus=$(grep -oE "MFU +[0-9.]+%" "$TMP/run.out" | grep -oE "[0-9.]+")
check test_v2187_printed_mfu_in_0_100 python3 -c "import sys; v=[float(x) for x in '''$mfus'''.split()]; sys.exit(not (v and all(0 < x <= 100 for x in v)))"
check test_v2187_logged_mfu_in_0_1 python3 -c "import sys; v=[float(x) for x in '''$(metric "$TMP/m.jsonl" mfu)'''.split()]; sys.exit(not (len(v) == 8 and all(0 < x <= 1 for x in v)))"
expect test_v2187_peak_flops_overrides 0 "peak 1000.0 GFLOP/s from --peak-flops" -- "$TMP/t/train" "${C[@]}" --steps 1 --peak-flops 1e12

# --- v2186: keys present, times non-negative, parts <= step ---------------------------------
times_ok() { # times_ok METRICS: every row has the keys; waits >= 0; data + comm <= step time
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = ["tokens_per_s", "tokens_per_s_window", "tokens_per_s_p20", "tokens_per_s_p50", "tokens_per_s_p80",
        "tokens_per_s_mean", "step_s", "data_wait_s", "comm_wait_s", "mfu"]
ok = rows and all(k in r for r in rows for k in keys)
ok = ok and all(r["data_wait_s"] >= 0 and r["comm_wait_s"] >= 0 and r["step_s"] > 0 for r in rows)
ok = ok and all(r["data_wait_s"] + r["comm_wait_s"] <= r["step_s"] for r in rows)
ok = ok and all(r["tokens_per_s_p20"] <= r["tokens_per_s_p50"] <= r["tokens_per_s_p80"] for r in rows)
sys.exit(not ok)
PY
}
check test_v2186_keys_nonnegative_parts_within_step times_ok "$TMP/m.jsonl"
grep -qE "tok/s \(last [0-9]+: [0-9]+, p50 [0-9]+; mean [0-9]+\) \| data [0-9.]+ ms" "$TMP/run.out"
check test_v2186_progress_line_shows_window_and_data_wait test $? = 0

if command -v mpirun >/dev/null; then
  expect gen_dp 0 "wrote" -- "$GEN" "$S" --enable mfu,dp --model tiny --target cpu --batch 2 --seq 64 -o "$TMP/dp"
  expect run_np2 0 "done: 4 steps" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 "$TMP/dp/train" \
    --data "$TMP/data" --steps 4 --eval-every 0 --metrics "$TMP/dp.jsonl"
  check test_v2186_np2_keys_nonnegative_parts_within_step times_ok "$TMP/dp.jsonl"
  mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 "$TMP/dp/train" --data "$TMP/data" --steps 2 --eval-every 0 > "$TMP/dp.out" 2>&1
  check test_v2186_np2_progress_line_shows_comm_wait grep -qE "\| comm [0-9.]+ ms \| MFU" "$TMP/dp.out"
fi
finish
