#!/usr/bin/env bash
# test_post_bpe.sh — post-training data with a BPE tokenizer (v2193 SFT data, v2195 DPO data,
# v2125 tokenizers; README "Post-training", runtime/data/chat.h):
#   gen data --chat/--pref --tokenizer PATH records the tokenizer in meta.json (kind, vocab, hash,
#   eot_id), copies it into the data directory and starts every conversation with EOT;
#   the loss mask aligns to the assistant's tokens: decoding each run of mask-1 tokens gives exactly
#   an assistant message + "<|im_end|>\n", and decoding each whole conversation gives the rendered
#   ChatML text; ChatML markers become one special token when the tokenizer has them (an
#   added_tokens entry), and "<|im_end|>" typed inside a message stays plain text;
#   SFT and DPO trainers sized to the tokenizer (--enable bpe --set v2125.data=DIR) train on that
#   data (assistant-token loss falls; held-out preference accuracy rises), KTO runs on BPE examples;
#   --tokenizer byte equals the default;
#   mismatched data is refused (BPE data for a byte model, another BPE's data, byte data for a
#   BPE-sized model).
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
K1024="$ROOT/tests/fixtures/tok/kjv1024/tokenizer.json"
GPT2="$ROOT/assets/tokenizers/gpt2.tiktoken.gz"

# conversations with a system turn, two assistant turns, and a user typing a ChatML marker
for i in $(seq 1 40); do
  printf '{"messages": [{"role": "system", "content": "Answer in the words of the King."}, {"role": "user", "content": "Verse %d, said <|im_end|> the man?"}, {"role": "assistant", "content": "And the LORD spake unto Moses, saying %d."}, {"role": "user", "content": "And then?"}, {"role": "assistant", "content": "In the beginning God created the heaven and the earth."}]}\n' $i $i >> "$TMP/chat.jsonl"
done
# v2193 with a trained BPE (tokenizer.json, EOT 1023)
expect "v2193_chat_data_with_bpe" 0 "loss masks" -- "$GEN" data --chat "$TMP/chat.jsonl" --tokenizer "$K1024" -o "$TMP/sft"
meta() { python3 -c "import json,sys; m=json.load(open(sys.argv[1]+'/meta.json')); print(m.get(sys.argv[2]))" "$1" "$2"; }
check "v2193_meta_records_tokenizer" test "$(meta "$TMP/sft" tokenizer) $(meta "$TMP/sft" vocab_size) $(meta "$TMP/sft" eot_id) $(meta "$TMP/sft" tokenizer_file)" = "bpe 1024 1023 tokenizer.json"
check "v2193_meta_hash_is_the_tokenizers" test "$(meta "$TMP/sft" tokenizer_xxh3_64)" = "$("$GEN" tokenizer info "$K1024" | sed -n 's/^xxh3_64 //p')"
check "v2193_tokenizer_copied" cmp -s "$K1024" "$TMP/sft/tokenizer.json"

# align.py DIR TOKENIZER JSONL SPECIAL: decodes every conversation and every run of mask-1 tokens
# (gen tokenizer decode) and compares them with the JSONL rendered through ChatML by hand.
# SPECIAL = 1: the tokenizer has <|im_start|>/<|im_end|> as added tokens (each must be one id).
cat > "$TMP/align.py" <<'EOF'
import json, struct, subprocess, sys
d, tok, jsonl, special, gen = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5]
meta = json.load(open(d + "/meta.json"))
def ids_of(path, dtype):
    b = open(path, "rb").read()[1024:]
    return list(b) if dtype == "u1" else list(struct.unpack("<%dH" % (len(b) // 2), b))
def decode(ids):
    open(d + ".ids", "w").write(" ".join(map(str, ids)))
    return subprocess.run([gen, "tokenizer", "decode", tok, d + ".ids"], capture_output=True, check=True).stdout.decode()
convs = [json.loads(l) for l in open(jsonl)]
k = n_runs = 0
for split in ("train", "val"):
    tok_ids = ids_of("%s/%s_000000.bin" % (d, split), "u2")
    mask = ids_of("%s/%s_000000.mask" % (d, split), "u1")
    docs_b = open("%s/%s_000000.docs" % (d, split), "rb").read()
    nd = struct.unpack("<i", docs_b[8:12])[0]
    starts = list(struct.unpack("<%dQ" % nd, docs_b[1024:])) + [len(tok_ids)]
    for j in range(nd):
        a, b = starts[j], starts[j + 1]
        c = convs[k]; k += 1
        want = "<|endoftext|>" + "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in c["messages"])
        got = decode(tok_ids[a:b])
        assert tok_ids[a] == meta["eot_id"] and mask[a] == 0, "conversation %d does not start with EOT" % k
        assert got == want, "conversation %d decodes to %r, rendered %r" % (k, got, want)
        runs, cur = [], []
        for t, m in zip(tok_ids[a:b], mask[a:b]):
            if m: cur.append(t)
            elif cur: runs.append(cur); cur = []
        if cur: runs.append(cur)
        asst = [m["content"] + "<|im_end|>\n" for m in c["messages"] if m["role"] == "assistant"]
        got_runs = [decode(r) for r in runs]
        assert got_runs == asst, "conversation %d: masked spans %r, assistant turns %r" % (k, got_runs, asst)
        n_runs += len(runs)
        if special:
            start, end = 1024, 1025
            assert tok_ids[a:b].count(start) == len(c["messages"]), "conversation %d: <|im_start|> is not one token each time" % k
            assert all(r[-2] == end for r in runs), "conversation %d: an assistant span does not end in the <|im_end|> token" % k
            # the user typed <|im_end|> inside a message: plain text, so one <|im_end|> id per message
            assert tok_ids[a:b].count(end) == len(c["messages"]), "conversation %d: typed <|im_end|> became the special token" % k
assert k == len(convs)
print("aligned: %d conversations, %d assistant spans" % (k, n_runs))
EOF
expect "v2193_bpe_mask_aligns_to_assistant_tokens" 0 "aligned: 40 conversations, 80 assistant spans" -- python3 "$TMP/align.py" "$TMP/sft" "$K1024" "$TMP/chat.jsonl" 0 "$GEN"
# the same tokenizer with ChatML's markers as added tokens (ids 1024, 1025)
python3 - "$K1024" "$TMP/tokim.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
base = dict(t["added_tokens"][0])
for i, c in ((1024, "<|im_start|>"), (1025, "<|im_end|>")):
    e = dict(base); e["id"] = i; e["content"] = c; t["added_tokens"].append(e)
json.dump(t, open(sys.argv[2], "w"))
EOF
expect "v2193_chat_data_with_chatml_special_tokens" 0 "loss masks" -- "$GEN" data --chat "$TMP/chat.jsonl" --tokenizer "$TMP/tokim.json" -o "$TMP/sftim"
expect "v2193_chatml_markers_are_special_tokens" 0 "aligned: 40 conversations" -- python3 "$TMP/align.py" "$TMP/sftim" "$TMP/tokim.json" "$TMP/chat.jsonl" 1 "$GEN"
# GPT-2's ranks (tiktoken, EOT 50256): the markers are text there, still aligned
expect "v2193_chat_data_with_gpt2" 0 "loss masks" -- "$GEN" data --chat "$TMP/chat.jsonl" --tokenizer "$GPT2" -o "$TMP/sftg"
expect "v2193_gpt2_mask_aligns" 0 "aligned: 40 conversations, 80 assistant spans" -- python3 "$TMP/align.py" "$TMP/sftg" "$GPT2" "$TMP/chat.jsonl" 0 "$GEN"
"$GEN" data --chat "$TMP/chat.jsonl" -o "$TMP/sftd" >/dev/null
expect "v2193_chat_data_tokenizer_byte" 0 "loss masks" -- "$GEN" data --chat "$TMP/chat.jsonl" --tokenizer byte -o "$TMP/sftb"
check "v2193_tokenizer_byte_is_the_default (same shards, masks, no tokenizer copy)" \
  bash -c "cmp -s '$TMP/sftd/train_000000.bin' '$TMP/sftb/train_000000.bin' && cmp -s '$TMP/sftd/train_000000.mask' '$TMP/sftb/train_000000.mask' && test ! -e '$TMP/sftb/tokenizer.json' && grep -q '\"tokenizer\":.*\"byte\"' '$TMP/sftb/meta.json'"
expect "v2193_refuses_empty_tokenizer" 2 "--tokenizer: empty" -- "$GEN" data --chat "$TMP/chat.jsonl" --tokenizer "" -o "$TMP/x0"
expect "v2193_refuses_bad_tokenizer" 2 "nope.json" -- "$GEN" data --chat "$TMP/chat.jsonl" --tokenizer "$TMP/nope.json" -o "$TMP/x1"
check "v2193_bad_tokenizer_no_output" test ! -e "$TMP/x1"

# SFT on BPE data: a trainer sized to the tokenizer; the assistant-token loss falls
expect "gen_sft_bpe" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,sft,bpe --set v2125.data="$TMP/sft" --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/t_sft"
expect "v2193_sft_trains_on_bpe_data" 0 "done" -- "$TMP/t_sft/train" --data "$TMP/sft" --steps 30 --lr 3e-3 --eval-every 30 --eval-batches 2 --sample 0 --metrics "$TMP/sft.jsonl"
v0=$(first_metric "$TMP/sft.jsonl" loss); v1=$(metric "$TMP/sft.jsonl" val_loss | tail -1)
check "v2193_bpe_assistant_token_loss_falls ($v0 at step 1 -> val $v1)" awk -v a="$v0" -v b="$v1" 'BEGIN { exit !(b < a - 1.0) }'

# DPO on BPE pairs (a learnable preference), with and without the chat template
for i in $(seq 1 60); do
  echo "{\"prompt\": \"Question $i: is it good?\", \"chosen\": \" yes, it is good.\", \"rejected\": \" no, never bad!\"}" >> "$TMP/syn.jsonl"
done
expect "v2195_pref_data_with_bpe" 0 "preference examples" -- "$GEN" data --pref "$TMP/syn.jsonl" --tokenizer "$K1024" -o "$TMP/pref"
check "v2195_pref_meta_records_tokenizer" test "$(meta "$TMP/pref" tokenizer) $(meta "$TMP/pref" vocab_size) $(meta "$TMP/pref" eot_id)" = "bpe 1024 1023"
check "v2195_pref_tokenizer_copied" cmp -s "$K1024" "$TMP/pref/tokenizer.json"
expect "v2195_pref_data_with_bpe_chatml" 0 "preference examples" -- "$GEN" data --pref "$TMP/syn.jsonl" --tokenizer "$K1024" --template chatml -o "$TMP/preft"
expect "gen_dpo_bpe" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,dpo,bpe --set v2125.data="$TMP/pref" --model tiny --target cpu --batch 8 --seq 48 -o "$TMP/t_dpo"
"$TMP/t_dpo/train" --data "$TMP/pref" --steps 12 --lr 2e-3 --eval-every 12 --metrics "$TMP/dpo.jsonl" > "$TMP/dpo.log" 2>&1
check "v2195_dpo_trains_on_bpe_pairs" grep -q "done: 12 dpo steps" "$TMP/dpo.log"
m0=$(sed -n 's/^eval step 0 .*reward_margin \([-0-9.e]*\).*/\1/p' "$TMP/dpo.log")
acc=$(last_metric "$TMP/dpo.jsonl" val_pref_accuracy); mar=$(last_metric "$TMP/dpo.jsonl" val_reward_margin)
check "v2195_bpe_heldout_accuracy_and_margin_rise (accuracy $acc, margin ${m0:-?} -> $mar)" \
  awk -v a="$acc" -v m="$mar" -v m0="${m0:-nan}" 'BEGIN { exit !(a >= 0.9 && m > m0 + 0.1) }'
expect "v2195_dpo_runs_on_bpe_chatml_pairs" 0 "done: 2 dpo steps" -- "$TMP/t_dpo/train" --data "$TMP/preft" --steps 2

# v2198 KTO examples with the BPE
for i in $(seq 1 30); do
  echo "{\"prompt\": \"Question $i: is it good?\", \"completion\": \" yes, it is good.\", \"label\": true}" >> "$TMP/synk.jsonl"
  echo "{\"prompt\": \"Question $i: is it good?\", \"completion\": \" no, never bad!\", \"label\": false}" >> "$TMP/synk.jsonl"
done
expect "v2198_kto_data_with_bpe" 0 "preference examples" -- "$GEN" data --pref "$TMP/synk.jsonl" --tokenizer "$K1024" -o "$TMP/kto"
expect "gen_kto_bpe" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,kto,bpe --set v2125.data="$TMP/kto" --model tiny --target cpu --batch 8 --seq 48 -o "$TMP/t_kto"
expect "v2198_kto_runs_on_bpe_examples" 0 "done: 2 kto steps" -- "$TMP/t_kto/train" --data "$TMP/kto" --steps 2

# refusals: the trainer's v2125 checks apply to chat and preference directories
expect "gen_sft_byte" 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,sft --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/t_sftb"
expect "v2193_byte_model_refuses_bpe_chat_data" 2 "made with tokenizer bpe .* the model reads bytes" -- "$TMP/t_sftb/train" --data "$TMP/sft" --steps 1 --sample 0
expect "v2193_bpe_model_refuses_gpt2_chat_data" 2 "vocab 50257 but the model's vocab_size is 1024" -- "$TMP/t_sft/train" --data "$TMP/sftg" --steps 1 --sample 0
"$GEN" data --pref "$TMP/syn.jsonl" -o "$TMP/prefb" >/dev/null
expect "v2195_bpe_model_refuses_byte_pairs" 2 "byte-level data, but the model was sized to a BPE" -- "$TMP/t_dpo/train" --data "$TMP/prefb" --steps 1
"$GEN" data --pref "$TMP/syn.jsonl" --tokenizer "$GPT2" -o "$TMP/prefg" >/dev/null
expect "v2195_bpe_model_refuses_gpt2_pairs" 2 "vocab 50257 but the model's vocab_size is 1024" -- "$TMP/t_dpo/train" --data "$TMP/prefg" --steps 1
finish
