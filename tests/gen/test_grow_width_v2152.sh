#!/usr/bin/env bash
# v2152 width growth by `gen grow`: a trained tiny (d_model 128, 4 heads, MLP 512) grown into wider
# trainers, checked by the loss of one step at learning rate 0 on the same batch (the function on
# real data), then trained on; a trained tiny-llama (RMSNorm, RoPE, GQA 2:1, QK-norm, untied head)
# the same way; what cannot grow is refused.
# - d_model 128 -> 256 with 8 heads (the head size 32 kept) and MLP 512 -> 768: every residual unit
#   and every head has exactly two copies, the consumers' weights are halved (exact in binary), the
#   norms see the same mean and variance (each value twice), so the only change is rounding: the
#   dot products get longer (the residual sums over 256 instead of 128 terms, the MLP's over 768
#   instead of 512, the norms' statistics over 256), whose worst-case relative error is n*u =
#   768 * 6e-8 = 4.6e-5 of the summed |terms| (Higham, Accuracy and Stability, eq. 3.5); the loss
#   is held to that 5e-5 relative, like the MLP-only growth of test_grow_v2151_v2153;
# - d_model 128 -> 192 (6 heads): not a multiple, half the units have two copies and half one, so
#   the norms' mean and variance change (bert2BERT's approximation): measured and reported;
# - --noise 0.01 (Net2Net's symmetry breaking): the copies differ, the loss moves a little;
# - the grown files: the new units are copies (source weights, consumers divided by 2);
# - refusals (exit 2, nothing written): a head size that changes, a narrower d_model, a wider
#   d_model with a narrower MLP, another vocabulary, another query-per-kv-head ratio, a bad --noise;
#   selecting v2152 for a trainer (it does not grow itself) with the pointer to gen grow.
source "$(dirname "$0")/lib.sh" "$1"
export OMP_NUM_THREADS=1
T=specs/v2500.yaml
kjv_corpus "$TMP/corpus.txt"
expect data 0 "" -- "$GEN" data "$TMP/corpus.txt" -o "$TMP/data"
# model NAME BASE KEY=VALUE...: a copy of specs/models/BASE.yaml with the keys replaced
model() {
  local n=$1 b=$2; shift 2
  local s="s/^name: .*/name: $n/"
  for kv in "$@"; do s="$s; s/^${kv%%=*}: .*/${kv%%=*}: ${kv#*=}/"; done
  sed "$s" "specs/models/$b.yaml" > "$TMP/$n.yaml"
}
model w2 tiny d_model=256 n_heads=8 ffn_hidden=768
model w15 tiny d_model=192 n_heads=6
model lw2 tiny-llama d_model=256 n_heads=8 n_kv_heads=4 ffn_hidden=512
model bad-hd tiny d_model=256
model bad-narrow tiny d_model=64 n_heads=2
model bad-mlp tiny d_model=256 n_heads=8 ffn_hidden=384
model bad-vocab tiny vocab_size=512
model bad-gqa tiny-llama d_model=256 n_heads=8 n_kv_heads=8
COMMON=(--target cpu --batch 4 --seq 32)
for m in tiny tiny-llama w2 w15 lw2 bad-hd bad-narrow bad-mlp bad-vocab bad-gqa; do
  f=$m; [ -f "$TMP/$m.yaml" ] && f="$TMP/$m.yaml"
  expect "gen_$m" 0 "wrote" -- "$GEN" "$T" --enable adamw --model "$f" "${COMMON[@]}" -o "$TMP/$m"
done
ONE=(--data "$TMP/data" --steps 1 --lr 0 --sample 0 --eval-every 0)
for s in tiny tiny-llama; do
  expect "train_$s" 0 "done: 30 steps" -- "$TMP/$s/train" --data "$TMP/data" --steps 30 --sample 0 --eval-every 0 --ckpt-dir "$TMP/ck-$s" --metrics "$TMP/$s-30.jsonl"
  expect "loss_$s" 0 "done: 1 steps" -- "$TMP/$s/train" "${ONE[@]}" --init-from "$TMP/ck-$s/step_00000030" --metrics "$TMP/$s.jsonl"
done
SRC="$TMP/ck-tiny/step_00000030"
grow_loss() { # grow_loss NAME SRC TO EXPECT [gen grow args...]
  local n=$1 src=$2 to=$3 want=$4; shift 4
  expect "grow_$n" 0 "$want" -- "$GEN" grow "$src" --to "$TMP/$to" -o "$TMP/init-$n" "$@"
  expect "loss_$n" 0 "done: 1 steps" -- "$TMP/$to/train" "${ONE[@]}" --init-from "$TMP/init-$n" --metrics "$TMP/$n.jsonl"
}
grow_loss w2 "$SRC" w2 "d_model 128 -> 256 and heads 4 -> 8 \(function-preserving copies, v2152\)"
grow_loss lw2 "$TMP/ck-tiny-llama/step_00000030" lw2 "d_model 128 -> 256 and heads 4 -> 8 \(function-preserving"
grow_loss w15 "$SRC" w15 "approximately function-preserving"
grow_loss noise "$SRC" w2 "perturbed by 0.01 relative noise" --noise 0.01
rel() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print(f'    {sys.argv[3]}: {a:.9g} vs {b:.9g}, rel {abs(a - b) / b:.2e}'); sys.exit(0 if abs(a - b) <= 5e-5 * b else 1)" "$@"; }
check test_v2152_width_dmodel_heads_mlp_preserve_function rel "$(first_metric "$TMP/w2.jsonl" loss)" "$(first_metric "$TMP/tiny.jsonl" loss)" "gpt2 128->256, 4->8 heads, MLP 512->768"
check test_v2152_width_llama_gqa_qknorm_preserve_function rel "$(first_metric "$TMP/lw2.jsonl" loss)" "$(first_metric "$TMP/tiny-llama.jsonl" loss)" "llama 128->256, 4->8 heads (kv 2->4), MLP 384->512"
echo "    not a multiple (128 -> 192, norms' statistics change): $(first_metric "$TMP/w15.jsonl" loss) vs $(first_metric "$TMP/tiny.jsonl" loss); --noise 0.01: $(first_metric "$TMP/noise.jsonl" loss)"
check test_v2152_noise_moves_the_loss test "$(first_metric "$TMP/noise.jsonl" loss)" != "$(first_metric "$TMP/w2.jsonl" loss)"
"$GEN" export "$SRC" -o "$TMP/src_hf" >/dev/null 2>&1
check test_v2152_new_units_are_copies python3 - "$TMP/src_hf/model.safetensors" "$TMP/init-w2/model.safetensors" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]; out[k] = (v["shape"], struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e]))
    return out
s, g = load(sys.argv[1]), load(sys.argv[2])
C, Ct = 128, 256
(_, wte), (gs, gwte) = s["transformer.wte.weight"], g["transformer.wte.weight"]
emb = gs == [256, Ct] and all(gwte[r * Ct + c] == wte[r * C + c % C] for r in range(256) for c in range(Ct))
(_, lnf), (_, glnf) = s["transformer.ln_f.weight"], g["transformer.ln_f.weight"]
final = all(glnf[c] == lnf[c % C] / 2 for c in range(Ct))
# c_attn [C, 3C] (Conv1D [in, out]): input rows halved, q/k/v columns of head h copy head h mod 4
(_, qkv), (qs, gqkv) = s["transformer.h.1.attn.c_attn.weight"], g["transformer.h.1.attn.c_attn.weight"]
att = qs == [Ct, 3 * Ct] and all(gqkv[r * 3 * Ct + p * Ct + a] == qkv[(r % C) * 3 * C + p * C + a % C] / 2
                                 for r in range(Ct) for p in range(3) for a in range(Ct))
# c_proj [C, C]: the heads' rows halved, the residual columns copied
(_, pr), (_, gpr) = s["transformer.h.1.attn.c_proj.weight"], g["transformer.h.1.attn.c_proj.weight"]
proj = all(gpr[r * Ct + c] == pr[(r % C) * C + c % C] / 2 for r in range(Ct) for c in range(Ct))
print(f"    embedding columns copied: {emb}; final norm halved: {final}; q/k/v of the new heads copied, inputs halved: {att}; output projection: {proj}")
sys.exit(0 if emb and final and att and proj else 1)
PY
expect train_w2 0 "done: 20 steps" -- "$TMP/w2/train" --data "$TMP/data" --steps 20 --sample 0 --eval-every 0 --init-from "$TMP/init-noise" --metrics "$TMP/w2-20.jsonl" --ckpt-dir "$TMP/ck-noise"
# Without noise a copy and its source get equal gradients and AdamW updates, so they stay equal
# (the wider model computes what the narrow one would): trained 5 steps, the embedding's new
# columns still equal their sources (bit for bit here; held to 1e-6: only a GEMM summing a copy's
# column in another order could separate them, a relative gradient difference of at most
# n*u = 128 * 6e-8 (B*T terms), which AdamW's normalized step turns into at most lr * 7.7e-6 =
# 1.5e-8 per step, 7.7e-8 over 5, with a margin for the compounding through the forward); with
# --noise 0.01 they differ by more than that bound
expect train_w2_exact 0 "done: 5 steps" -- "$TMP/w2/train" --data "$TMP/data" --steps 5 --sample 0 --eval-every 0 --init-from "$TMP/init-w2" --ckpt-dir "$TMP/ck-exact"
"$GEN" export "$TMP/ck-exact/step_00000005" -o "$TMP/exact_hf" >/dev/null 2>&1
"$GEN" export "$TMP/ck-noise/step_00000020" -o "$TMP/noise_hf" >/dev/null 2>&1
copies() { python3 - "$1" "$2" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; v = json.loads(b[8:8 + n])["transformer.wte.weight"]
s, e = v["data_offsets"]; w = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
d = max(abs(w[r * 256 + c] - w[r * 256 + c + 128]) for r in range(256) for c in range(128))
print(f"    {sys.argv[2]}: max |new embedding column - its source| = {d:.3g}")
sys.exit(0 if (d <= 1e-6) == (sys.argv[2] == "exact") else 1)
PY
}
check test_v2152_exact_copies_stay_copies copies "$TMP/exact_hf/model.safetensors" exact
check test_v2152_noise_breaks_symmetry copies "$TMP/noise_hf/model.safetensors" noise
mean() { losses "$1" | sed -n "$2,$3p" | awk '{ s += $1 } END { printf "%.4f", s / NR }'; }
a=$(mean "$TMP/w2-20.jsonl" 1 5); b=$(mean "$TMP/w2-20.jsonl" 16 20)
echo "    grown (noise 0.01) trained 20 steps: mean loss steps 1-5 $a, steps 16-20 $b"
check test_v2152_grown_model_trains awk -v a="$a" -v b="$b" 'BEGIN { exit !(a > 0 && b < a) }'

expect refuse_head_size 2 "the head size changes" -- "$GEN" grow "$SRC" --to "$TMP/bad-hd" -o "$TMP/x1"
expect refuse_narrower 2 "d_model 64 in .* is narrower" -- "$GEN" grow "$SRC" --to "$TMP/bad-narrow" -o "$TMP/x2"
expect refuse_wider_and_narrower 2 "wider in d_model \(256 > 128\) but narrower in the MLP" -- "$GEN" grow "$SRC" --to "$TMP/bad-mlp" -o "$TMP/x3"
expect refuse_vocab 2 "the vocabulary differs" -- "$GEN" grow "$SRC" --to "$TMP/bad-vocab" -o "$TMP/x4"
expect refuse_gqa 2 "same number of query heads per kv head" -- "$GEN" grow "$TMP/ck-tiny-llama/step_00000030" --to "$TMP/bad-gqa" -o "$TMP/x5"
expect refuse_noise 2 "--noise must be a number in \[0, 1\]" -- "$GEN" grow "$SRC" --to "$TMP/w2" -o "$TMP/x6" --noise 2
expect refuse_select_v2152 2 "the trainer does not grow itself" -- "$GEN" "$T" --enable adamw,v2152 --model tiny "${COMMON[@]}" -o "$TMP/x7"
check no_partial_output test ! -e "$TMP/x1" -a ! -e "$TMP/x2" -a ! -e "$TMP/x3" -a ! -e "$TMP/x4" -a ! -e "$TMP/x5" -a ! -e "$TMP/x6" -a ! -e "$TMP/x7"
echo "grow width: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
