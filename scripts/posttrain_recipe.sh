#!/usr/bin/env bash
# posttrain_recipe.sh — the recommended fine-tuning recipe (docs/post-training.md "Fine-tune a model: the
# recommended recipe"; v2199 best practices, presets finetune-sft and finetune-dpo in
# specs/v2500.yaml), end to end on the cpu from a plain-text corpus:
#   1. a BPE tokenizer trained on the corpus (v2125)          OUT/tok/tokenizer.json
#   2. a base model pretrained on the corpus with it           OUT/base/ck   (or BASE=CKPT TOKENIZER=FILE)
#   3. example sets from the corpus (scripts/post_corpus.sh)   OUT/sets
#   4. SFT (preset finetune-sft) on ChatML conversations, loss on the assistant's tokens, from the base
#   5. DPO (preset finetune-dpo) on pairs rendered through the same template, from the SFT model
#      (its starting weights are the reference)
# and prints the held-out measurements before and after each stage (also OUT/recipe.json):
# SFT: assistant-token loss on the validation conversations; DPO: held-out preference accuracy
# and reward margin. SIZE tiny is the test's scale (tests/gen/test_posttrain_recipe.sh, < 60 s);
# full the one docs/post-training.md reports. Never: the network, Python, or anything outside OUT.
#   usage: scripts/posttrain_recipe.sh CORPUS OUT [full|tiny]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 CORPUS OUT [full|tiny]" >&2; exit 2; }
CORPUS=$1 OUT=$2 SIZE=${3:-full}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
G=${GEN:-$ROOT/build/generator/gen}
T=$ROOT/specs/v2500.yaml
[ -s "$CORPUS" ] || { echo "$CORPUS: missing or empty corpus — give a text file (one passage per line)" >&2; exit 2; }
[ -x "$G" ] || { echo "$G: no gen binary — build first (cmake --build build) or set GEN" >&2; exit 2; }
[ ! -e "$OUT" ] || { echo "$OUT: exists — choose a new output directory" >&2; exit 2; }
case $SIZE in
  #         vocab pretrain  sets  sft  dpo  batch seq  warmup
  full) set -- 8192   300    600   150  200   16    64    15 ;;
  tiny) set -- 512     40    120    30   12    8    48     3 ;;
  *) echo "$SIZE: unknown size — give full or tiny" >&2; exit 2 ;;
esac
VOCAB=$1 PRE=$2 NSETS=$3 SFT=$4 DPO=$5 B=$6 S=$7 WARM=$8
mkdir -p "$OUT"
log() { echo "recipe: $*"; }
run() { echo "+ $*" >> "$OUT/commands.txt"; "$@" > "$OUT/last.log" 2>&1 || { cat "$OUT/last.log" >&2; exit 1; }; cat "$OUT/last.log" >> "$OUT/all.log"; }
shape=(--model tiny --target cpu --batch "$B" --seq "$S")

# 1-2. tokenizer and base model (a stand-in for your pretrained checkpoint: BASE + its TOKENIZER)
if [ -n "${BASE:-}" ]; then
  TOK=${TOKENIZER:?BASE needs TOKENIZER, the tokenizer file its data was made with}
else
  run "$G" tokenizer train "$CORPUS" --vocab "$VOCAB" -o "$OUT/tok"
  TOK=$OUT/tok/tokenizer.json
  run "$G" data "$CORPUS" -o "$OUT/pre" --tokenizer "$TOK"
  run "$G" "$T" --enable adamw,warmup,cosine,clip,bpe --set v2125.data="$OUT/pre" --set v2130.warmup_steps=$((PRE / 10)) "${shape[@]}" -o "$OUT/base"
  run "$OUT/base/train" --data "$OUT/pre" --steps "$PRE" --lr 3e-3 --ckpt-dir "$OUT/base/ck" --sample 0
  BASE=$OUT/base/ck/step_$(printf %08d "$PRE")
  log "base model: $BASE ($PRE steps)"
fi

# 3. example sets; the preference prompts in the SFT conversations' wording
run bash "$ROOT/scripts/post_corpus.sh" "$CORPUS" "$OUT/sets" "$NSETS"
sed 's/^{"prompt": "/{"prompt": "Continue: /' "$OUT/sets/pref.jsonl" > "$OUT/sets/pref_chat.jsonl"

# 4. SFT: ChatML, loss on the assistant's tokens, AdamW + clip + warmup/cosine (preset finetune-sft)
run "$G" data --chat "$OUT/sets/chat.jsonl" --template chatml --tokenizer "$TOK" -o "$OUT/sft_data"
run "$G" "$T" --enable finetune-sft,bpe --set v2125.data="$OUT/sft_data" --set v2130.warmup_steps="$WARM" "${shape[@]}" -o "$OUT/sft"
run "$OUT/sft/train" --data "$OUT/sft_data" --init-from "$BASE" --steps 1 --lr 0 --eval-every 1 --eval-batches 8 --sample 0
before=$(sed -n 's/.* | val \([0-9.]*\).*/\1/p' "$OUT/last.log" | tail -1)
run "$OUT/sft/train" --data "$OUT/sft_data" --init-from "$BASE" --steps "$SFT" --lr 1e-3 --eval-every "$SFT" --eval-batches 8 --sample 0 \
    --ckpt-dir "$OUT/sft/ck" --metrics "$OUT/sft/m.jsonl"
after=$(sed -n 's/.* | val \([0-9.]*\).*/\1/p' "$OUT/last.log" | tail -1)
log "SFT: held-out assistant-token loss $before -> $after ($SFT steps)"

# 5. DPO from the SFT model, pairs through the same template (preset finetune-dpo)
run "$G" data --pref "$OUT/sets/pref_chat.jsonl" --template chatml --tokenizer "$TOK" -o "$OUT/pref_data"
run "$G" "$T" --enable finetune-dpo,bpe --set v2125.data="$OUT/pref_data" "${shape[@]}" -o "$OUT/dpo"
run "$OUT/dpo/train" --data "$OUT/pref_data" --init-from "$OUT/sft/ck/step_$(printf %08d "$SFT")" --steps "$DPO" --lr 3e-4 \
    --eval-every "$DPO" --ckpt-dir "$OUT/dpo/ck" --metrics "$OUT/dpo/m.jsonl"
ev() { sed -n "s/^eval step $1 .*accuracy \([0-9.]*\).*reward_margin \([-0-9.e]*\).*/\1 \2/p" "$OUT/last.log"; }
read -r acc0 mar0 <<< "$(ev 0)"; read -r acc1 mar1 <<< "$(ev "$DPO")"
log "DPO: held-out preference accuracy $acc0 -> $acc1, reward margin $mar0 -> $mar1 ($DPO steps)"
printf '{"size": "%s", "sft_val_loss_before": %s, "sft_val_loss_after": %s, "dpo_val_accuracy_before": %s, "dpo_val_accuracy_after": %s, "dpo_val_margin_before": %s, "dpo_val_margin_after": %s, "model": "%s"}\n' \
  "$SIZE" "$before" "$after" "$acc0" "$acc1" "$mar0" "$mar1" "$OUT/dpo/ck/step_$(printf %08d "$DPO")" > "$OUT/recipe.json"
log "wrote $OUT/recipe.json; the fine-tuned model: $OUT/dpo/ck/step_$(printf %08d "$DPO")"
