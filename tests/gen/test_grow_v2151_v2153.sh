#!/usr/bin/env bash
# v2151 / v2153 `gen grow`: a trained tiny (4 layers, MLP 512) grown into larger trainers, checked
# by the loss of one step at learning rate 0 on the same batch (the model's function on real data):
# - depth, identity: 4 -> 6 layers. New layers copy a trained one with their attention and MLP
#   output projections zeroed, so they add exactly 0.0 to the residual: the loss is bit-identical;
# - width, function-preserving (fpi): MLP 512 -> 768. New units copy existing ones and the outgoing
#   weights are split among the copies; the only change is rounding: the split (one rounding per
#   weight when a unit has 3+ copies) and the outgoing dot products over 768 instead of 512 terms,
#   whose worst-case relative error is n*u = 768 * 6e-8 = 4.6e-5 of the summed |terms| (Higham,
#   Accuracy and Stability, eq. 3.5); the loss is held to that 5e-5 relative;
# - depth stack (G_stack): not function-preserving — the loss moves (reported), training continues;
# - the grown file: layers 0-3 equal the trained ones, layers 4-5's output projections are zero;
# - bad input refused (exit 2): other d_model, a smaller target, an existing -o, a bad --depth.
source "$(dirname "$0")/lib.sh" "$1"
export OMP_NUM_THREADS=1
T=specs/v2500.yaml
kjv_corpus "$TMP/corpus.txt"
expect data 0 "" -- "$GEN" data "$TMP/corpus.txt" -o "$TMP/data"
model() { sed "s/^name: tiny/name: $1/; s/^n_layers: 4/n_layers: $2/; s/^ffn_hidden: 512/ffn_hidden: $3/; s/^d_model: 128/d_model: ${4:-128}/" specs/models/tiny.yaml > "$TMP/$1.yaml"; }
model tiny-deep 6 512; model tiny-wide 4 768; model tiny-both 6 768; model tiny-c256 6 512 256; model tiny-narrow 4 384
COMMON=(--target cpu --batch 4 --seq 32)
for m in tiny "$TMP/tiny-deep.yaml" "$TMP/tiny-wide.yaml" "$TMP/tiny-both.yaml" "$TMP/tiny-c256.yaml" "$TMP/tiny-narrow.yaml"; do
  n=$(basename "$m" .yaml)
  expect "gen_$n" 0 "wrote" -- "$GEN" "$T" --enable adamw --model "$m" "${COMMON[@]}" -o "$TMP/$n"
done
expect train_small 0 "done: 30 steps" -- "$TMP/tiny/train" --data "$TMP/data" --steps 30 --sample 0 --eval-every 0 --ckpt-dir "$TMP/ck"
SRC="$TMP/ck/step_00000030"
ONE=(--data "$TMP/data" --steps 1 --lr 0 --sample 0 --eval-every 0)
expect loss_small 0 "done: 1 steps" -- "$TMP/tiny/train" "${ONE[@]}" --init-from "$SRC" --metrics "$TMP/small.jsonl"
for n in deep wide both; do
  expect "grow_$n" 0 "function-preserving" -- "$GEN" grow "$SRC" --to "$TMP/tiny-$n" -o "$TMP/init-$n"
  expect "loss_$n" 0 "done: 1 steps" -- "$TMP/tiny-$n/train" "${ONE[@]}" --init-from "$TMP/init-$n" --metrics "$TMP/$n.jsonl"
done
check test_v2151_identity_depth_bit_identical test "$(first_metric "$TMP/deep.jsonl" loss)" = "$(first_metric "$TMP/small.jsonl" loss)"
rel() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'    {sys.argv[3]}: {a:.9g} vs {b:.9g}, rel {abs(a - b) / b:.2e}'); sys.exit(0 if abs(a - b) <= 5e-5 * b else 1)" "$@"; }
check test_v2153_fpi_width_preserves_function rel "$(first_metric "$TMP/wide.jsonl" loss)" "$(first_metric "$TMP/small.jsonl" loss)" wide
check test_v2153_depth_and_width_preserve_function rel "$(first_metric "$TMP/both.jsonl" loss)" "$(first_metric "$TMP/small.jsonl" loss)" both
"$GEN" export "$SRC" -o "$TMP/src_hf" >/dev/null 2>&1
check test_v2151_layers_copied_new_outputs_zero python3 - "$TMP/src_hf/model.safetensors" "$TMP/init-deep/model.safetensors" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
s, g = load(sys.argv[1]), load(sys.argv[2])
same = all(g[k] == v for k, v in s.items())
zero = all(set(g[f"transformer.h.{l}.{r}"]) == {0} for l in (4, 5) for r in ("attn.c_proj.weight", "attn.c_proj.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"))
copied = g["transformer.h.4.attn.c_attn.weight"] == s["transformer.h.0.attn.c_attn.weight"]
print(f"    {len(s)} source tensors equal: {same}; new output projections zero: {zero}; new layer 4 copies layer 0: {copied}")
sys.exit(0 if same and zero and copied and len(g) == len(s) + 2 * 12 else 1)
PY
expect grow_stack 0 "stacked copies" -- "$GEN" grow "$SRC" --to "$TMP/tiny-deep" -o "$TMP/init-stack" --depth stack
expect train_stack 0 "done: 10 steps" -- "$TMP/tiny-deep/train" --data "$TMP/data" --steps 10 --sample 0 --eval-every 0 --init-from "$TMP/init-stack" --metrics "$TMP/stack.jsonl"
check test_v2151_stack_not_function_preserving test "$(first_metric "$TMP/stack.jsonl" loss)" != "$(first_metric "$TMP/small.jsonl" loss)"
echo "    step-1 loss at lr 0: small $(first_metric "$TMP/small.jsonl" loss), identity-deep $(first_metric "$TMP/deep.jsonl" loss), fpi-wide $(first_metric "$TMP/wide.jsonl" loss), both $(first_metric "$TMP/both.jsonl" loss), stack $(first_metric "$TMP/stack.jsonl" loss)"

# v2157 structured pruning of MLP channels: 512 -> 384 units per layer, the units of largest
# ||c_fc column|| x ||c_proj row|| kept (recomputed here from the source export), their weights and
# biases copied exactly; not function-preserving (the loss moves), and the pruned model trains on
expect shrink_narrow 0 "structured pruning, v2157" -- "$GEN" grow "$SRC" --to "$TMP/tiny-narrow" -o "$TMP/init-narrow"
check test_v2157_kept_channels_are_the_largest python3 - "$TMP/src_hf/model.safetensors" "$TMP/init-narrow/model.safetensors" <<'PY'
import json, math, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]; out[k] = (v["shape"], struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e]))
    return out
s, g = load(sys.argv[1]), load(sys.argv[2])
ok = True
for l in range(4):
    (C, H), fc = s[f"transformer.h.{l}.mlp.c_fc.weight"]; _, pr = s[f"transformer.h.{l}.mlp.c_proj.weight"]
    _, fb = s[f"transformer.h.{l}.mlp.c_fc.bias"]
    score = [math.sqrt(sum(fc[r * H + u] ** 2 for r in range(C))) * math.sqrt(sum(pr[u * C + c] ** 2 for c in range(C))) for u in range(H)]
    kept = sorted(sorted(range(H), key=lambda u: (-score[u], u))[:384])
    (gC, gH), gfc = g[f"transformer.h.{l}.mlp.c_fc.weight"]; _, gpr = g[f"transformer.h.{l}.mlp.c_proj.weight"]; _, gfb = g[f"transformer.h.{l}.mlp.c_fc.bias"]
    same = gH == 384 and all(gfc[r * 384 + j] == fc[r * H + u] for r in range(C) for j, u in enumerate(kept)) \
        and all(gpr[j * C + c] == pr[u * C + c] for j, u in enumerate(kept) for c in range(C)) and all(gfb[j] == fb[u] for j, u in enumerate(kept))
    ok = ok and same
    print(f"    layer {l}: kept 384 of {H} (min kept score {min(score[u] for u in kept):.4f} >= max removed {max((score[u] for u in range(H) if u not in set(kept)), default=0):.4f}), weights copied exactly: {same}")
others = all(g[k] == v for k, v in s.items() if ".mlp." not in k)
sys.exit(0 if ok and others else 1)
PY
expect loss_narrow 0 "done: 1 steps" -- "$TMP/tiny-narrow/train" "${ONE[@]}" --init-from "$TMP/init-narrow" --metrics "$TMP/narrow.jsonl"
echo "    step-1 loss at lr 0: small $(first_metric "$TMP/small.jsonl" loss), pruned to MLP 384 $(first_metric "$TMP/narrow.jsonl" loss)"
expect train_narrow 0 "done: 10 steps" -- "$TMP/tiny-narrow/train" --data "$TMP/data" --steps 10 --sample 0 --eval-every 0 --init-from "$TMP/init-narrow" --metrics "$TMP/narrow10.jsonl"
check v2157_pruned_model_trains awk -v a="$(first_metric "$TMP/narrow10.jsonl" loss)" -v b="$(last_metric "$TMP/narrow10.jsonl" loss)" 'BEGIN { exit !(a > 0 && b < a) }'

expect refuse_other_c 2 "C differs" -- "$GEN" grow "$SRC" --to "$TMP/tiny-c256" -o "$TMP/x1"
expect refuse_shrink 2 "fewer than SRC" -- "$GEN" grow "$TMP/init-deep" --to "$TMP/tiny" -o "$TMP/x2"
expect refuse_existing 2 "already exists" -- "$GEN" grow "$SRC" --to "$TMP/tiny-deep" -o "$TMP/init-deep"
expect refuse_depth 2 "--depth 'deep' is not identity or stack" -- "$GEN" grow "$SRC" --to "$TMP/tiny-deep" -o "$TMP/x3" --depth deep
expect refuse_not_dir 2 "not a directory" -- "$GEN" grow "$TMP/corpus.txt" --to "$TMP/tiny-deep" -o "$TMP/x4"
check no_partial_output test ! -e "$TMP/x1" -a ! -e "$TMP/x2" -a ! -e "$TMP/x3" -a ! -e "$TMP/x4"
echo "grow: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
