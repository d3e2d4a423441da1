#!/usr/bin/env bash
# v2150 `gen progressive`: one run of three stages on the KJV — tiny with 2 layers (steps 1-20),
# grown to tiny's 4 layers (identity depth, v2151; steps 21-40), grown to an MLP of 768 (fpi width,
# v2153; steps 41-60) — under a cosine LR schedule spanning the 60 steps. Checks:
# - function preservation at each boundary (the driver's own check: one step at lr 0 on the batch
#   after the boundary, with the stage's trainer before and the next stage's after): depth
#   identity bit-identical (new layers add exactly 0.0); width within 5e-5 relative (the split
#   outgoing weights round once, and the dot products run over 768 instead of 512 terms: n*u =
#   768 * 6e-8 = 4.6e-5 of the summed |terms|, Higham eq. 3.5 — the bound test_grow uses);
# - the run continues as one: stage 2's first step is global step 21 with 21 x 128 tokens seen,
#   and its loss equals, bit for bit, step 21's loss of the 2-layer model trained straight through
#   (same weights after step 20 — the growth adds 0 — and the same batch: the data position
#   carried over); every step's learning rate equals the straight run's (one schedule);
# - the optimizer state: the handoff checkpoint keeps the 2-layer model's AdamW moments for its
#   tensors (bit for bit) and zeros for the new layers';
# - the whole run's loss falls (mean of the last 5 steps below the first 5);
# - refusals (exit 2, no -o directory left): one stage, a malformed stage, a shrinking pair,
#   missing data, --steps after --, an optimizer with packed states (Muon).
source "$(dirname "$0")/lib.sh" "$1"
export OMP_NUM_THREADS=1
T=specs/v2500.yaml
kjv_corpus "$TMP/corpus.txt"
expect data 0 "" -- "$GEN" data "$TMP/corpus.txt" -o "$TMP/data"
sed "s/^name: tiny/name: tiny-2L/; s/^n_layers: 4/n_layers: 2/" specs/models/tiny.yaml > "$TMP/tiny-2L.yaml"
sed "s/^name: tiny/name: tiny-h768/; s/^ffn_hidden: 512/ffn_hidden: 768/" specs/models/tiny.yaml > "$TMP/tiny-h768.yaml"
GOPT=(--enable adamw,cosine --target cpu --batch 4 --seq 32)
TOPT=(--data "$TMP/data" --sample 0 --eval-every 0)
R="$TMP/run"
expect progressive_run 0 "progressive training \(v2150\): 3 stages, 60 steps" -- \
  "$GEN" progressive "$T" --stages "$TMP/tiny-2L.yaml:20,tiny:20,$TMP/tiny-h768.yaml:20" -o "$R" "${GOPT[@]}" -- "${TOPT[@]}" ||
  { sed 's/^/    /' "$R"/stage_*/train.log 2>/dev/null | tail -20; }
M="$R/metrics.jsonl"
grow_row() { grep '"event":"grow"' "$M" | sed -n "${1}p"; }
field() { printf '%s\n' "$1" | grep -o "\"$2\":[^,}]*" | cut -d: -f2; }
g1=$(grow_row 1); g2=$(grow_row 2)
echo "    depth boundary: $(field "$g1" loss_before) -> $(field "$g1" loss_after); width boundary: $(field "$g2" loss_before) -> $(field "$g2" loss_after)"
check test_v2150_depth_growth_loss_bit_identical test "$(field "$g1" loss_before)" = "$(field "$g1" loss_after)"
rel() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'    rel {abs(a - b) / b:.2e}'); sys.exit(0 if abs(a - b) <= 5e-5 * b else 1)" "$@"; }
check test_v2150_width_growth_loss_within_5e-5 rel "$(field "$g2" loss_after)" "$(field "$g2" loss_before)"
row() { grep "\"step\":$1," "$M" | grep -v '"event"'; }
check test_v2150_stage2_starts_at_step_21 test "$(field "$(row 21)" stage)" = 2 -a "$(field "$(row 21)" tokens_seen)" = $((21 * 128))
check test_v2150_stage3_starts_at_step_41 test "$(field "$(row 41)" stage)" = 3 -a "$(field "$(row 41)" tokens_seen)" = $((41 * 128))
check test_v2150_one_row_per_step test "$(grep -vc '"event"' "$M")" = 60
# the 2-layer model straight through the same 60-step schedule
"$R/stage_1/trainer/train" "${TOPT[@]}" --steps 60 --metrics "$TMP/straight.jsonl" > "$TMP/straight.log" 2>&1
echo "    step 21: progressive $(field "$(row 21)" loss), 2 layers straight $(grep '"step":21,' "$TMP/straight.jsonl" | grep -o '"loss":[^,]*' | cut -d: -f2)"
check test_v2150_step21_loss_equals_straight_run_data_continues test "$(field "$(row 21)" loss)" = "$(grep '"step":21,' "$TMP/straight.jsonl" | grep -o '"loss":[^,]*' | cut -d: -f2)"
check test_v2150_lr_schedule_continues test "$(grep -v '"event"' "$M" | grep -o '"lr":[^,]*')" = "$(grep -o '"lr":[^,]*' "$TMP/straight.jsonl")"
check test_v2150_lr_decays test "$(field "$(row 60)" lr)" != "$(field "$(row 1)" lr)"
check test_v2150_optimizer_state_carried_and_fresh python3 - "$R/stage_1/ckpt/step_00000020/optimizer.safetensors" "$R/stage_2/ckpt/step_00000020/optimizer.safetensors" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
s, g = load(sys.argv[1]), load(sys.argv[2])
carried = all(g[k] == v for k, v in s.items())
new = [k for k in g if k not in s]
zero = all(set(g[k]) == {0} for k in new)
print(f"    {len(s)} moments carried bit for bit: {carried}; {len(new)} new (layers 2-3) all zero: {zero}")
sys.exit(0 if carried and zero and len(new) == 2 * 2 * 12 and all(".h.2." in k or ".h.3." in k for k in new) else 1)
PY
check test_v2150_loss_falls python3 - "$M" <<'PY'
import json, sys
l = [json.loads(x)["loss"] for x in open(sys.argv[1]) if '"event"' not in x]
a, b = sum(l[:5]) / 5, sum(l[-5:]) / 5
print(f"    mean loss, steps 1-5: {a:.4f}; steps 56-60: {b:.4f}")
sys.exit(0 if b < a else 1)
PY
check test_v2150_summary_json python3 -c "import json, sys; r = json.load(open(sys.argv[1])); sys.exit(0 if [s['model'] for s in r['stages']] == ['tiny-2L', 'tiny', 'tiny-h768'] and r['flops'] > 0 and len(r['boundaries']) == 2 else 1)" "$R/progressive.json"

# refusals: one line, exit 2, nothing left
refuse() { # refuse NAME REGEX ARGS...
  local name=$1 re=$2; shift 2
  expect "refuse_$name" 2 "$re" -- "$GEN" progressive "$T" -o "$TMP/bad_$name" "${GOPT[@]}" "$@"
  check "test_v2150_refuse_${name}_leaves_nothing" test ! -e "$TMP/bad_$name"
}
refuse one_stage "at least two stages" --stages tiny:10 -- "${TOPT[@]}"
refuse malformed "is not MODEL:STEPS" --stages "$TMP/tiny-2L.yaml:10,tiny" -- "${TOPT[@]}"
refuse shrink "smaller than" --stages "tiny:10,$TMP/tiny-2L.yaml:10" -- "${TOPT[@]}"
refuse no_data "no such data" --stages "$TMP/tiny-2L.yaml:10,tiny:10" -- --data "$TMP/nodata"
refuse steps "sets --steps itself" --stages "$TMP/tiny-2L.yaml:10,tiny:10" -- "${TOPT[@]}" --steps 5
expect refuse_packed_optimizer 2 "packed states" -- "$GEN" progressive "$T" --stages "$TMP/tiny-2L.yaml:10,tiny:10" -o "$TMP/bad_muon" \
  --enable muon --target cpu --batch 4 --seq 32 -- "${TOPT[@]}"
check test_v2150_refuse_packed_optimizer_leaves_nothing test ! -e "$TMP/bad_muon"
finish
