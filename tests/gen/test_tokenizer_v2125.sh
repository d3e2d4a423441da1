#!/usr/bin/env bash
# v2125 byte-level BPE end to end through the CLI: gen tokenizer train/encode/decode/info (round
# trip of a corpus, GPT-2's ids of a known text), gen data --tokenizer (meta.json's tokenizer
# fields and hash, the tokenizer copy, EOT before each document, uint16 shards, byte data
# unchanged), a trainer sized to the data (--enable bpe --set v2125.data=DIR), training, sampling
# text from the checkpoint; and every bad input one line + exit 2: a tokenizer file that does not
# parse, empty/binary sources, data made with another tokenizer (byte model, BPE model, resume on
# another tokenizer's data), a replaced tokenizer file at sample time.
source "$(dirname "$0")/lib.sh" "$1"
T="$ROOT/specs/v2500.yaml"
cat "$ROOT"/specs/*/*.yaml > "$TMP/a.txt"
cat "$ROOT"/tests/fixtures/recipe/kjv_180k.txt > "$TMP/b.txt"

expect test_v2125_train_tokenizer 0 "wrote $TMP/tk/tokenizer.json .*vocab 512, <\|endoftext\|> = 511" \
  -- "$GEN" tokenizer train "$TMP/a.txt" "$TMP/b.txt" --vocab 512 -o "$TMP/tk"
check test_v2125_tokenizer_json_is_byte_level_bpe grep -q '"type":[[:space:]]*"ByteLevel"' "$TMP/tk/tokenizer.json"
"$GEN" tokenizer encode "$TMP/tk/tokenizer.json" "$TMP/a.txt" > "$TMP/ids.txt"
"$GEN" tokenizer decode "$TMP/tk/tokenizer.json" "$TMP/ids.txt" > "$TMP/a.back"
check test_v2125_encode_decode_round_trip cmp -s "$TMP/a.txt" "$TMP/a.back"
n_ids=$(wc -l < "$TMP/ids.txt"); n_bytes=$(wc -c < "$TMP/a.txt")
check test_v2125_bpe_compresses test $((n_ids * 10)) -lt $((n_bytes * 7))
expect test_v2125_gpt2_hello_world 0 "^15496 995$" -- bash -c "printf 'Hello world' | '$GEN' tokenizer encode '$ROOT/assets/tokenizers/gpt2.tiktoken.gz' | paste -sd' '"
expect test_v2125_info_gpt2 0 "vocab_size 50257.*eot_id 50256.*xxh3_64 3cb2fbe95939bd2d" \
  -- bash -c "'$GEN' tokenizer info '$ROOT/assets/tokenizers/gpt2.tiktoken.gz' | paste -sd' '"
hash=$("$GEN" tokenizer info "$TMP/tk/tokenizer.json" | awk '/xxh3_64/ {print $2}')

# --- gen data --tokenizer ------------------------------------------------------------------------
expect test_v2125_gen_data_bpe 0 "wrote shards" -- "$GEN" data "$TMP/a.txt" "$TMP/b.txt" -o "$TMP/d" --tokenizer "$TMP/tk/tokenizer.json"
check test_v2125_meta_records_tokenizer python3 - "$TMP/d" "$hash" <<'PY'
import json, struct, sys, glob
d, h = sys.argv[1], sys.argv[2]
m = json.load(open(d + "/meta.json"))
assert m["tokenizer"] == "bpe" and m["vocab_size"] == 512 and m["eot_id"] == 511, m
assert m["tokenizer_xxh3_64"] == h and m["tokenizer_file"] == "tokenizer.json" and m["token_dtype"] == "uint16", m
toks = []
for f in sorted(glob.glob(d + "/train_*.bin")) + sorted(glob.glob(d + "/val_*.bin")):
    b = open(f, "rb").read()
    n = struct.unpack("<i", b[8:12])[0]
    toks += struct.unpack("<%dH" % n, b[1024:1024 + 2 * n])
assert toks[0] == 511, toks[:5]            # EOT before the first document
assert toks.count(511) == 2, toks.count(511)  # one per input document
assert max(toks) <= 511
PY
check test_v2125_tokenizer_copied cmp -s "$TMP/tk/tokenizer.json" "$TMP/d/tokenizer.json"
expect test_v2125_byte_data_unchanged 0 "" -- "$GEN" data "$TMP/a.txt" -o "$TMP/dbyte"
check test_v2125_byte_meta python3 -c "import json,sys; m=json.load(open('$TMP/dbyte/meta.json')); sys.exit(not (m['tokenizer']=='byte' and m['vocab_size']==256 and 'eot_id' not in m))"
expect test_v2125_gen_data_gpt2 0 "" -- "$GEN" data "$TMP/b.txt" -o "$TMP/dg2" --tokenizer "$ROOT/assets/tokenizers/gpt2.tiktoken.gz"
check test_v2125_gpt2_meta python3 -c "import json,sys; m=json.load(open('$TMP/dg2/meta.json')); sys.exit(not (m['tokenizer']=='tiktoken' and m['vocab_size']==50257 and m['eot_id']==50256 and m['token_dtype']=='uint16'))"

# --- bad input: one line, exit 2, nothing written --------------------------------------------------
printf '{"model": {"type": "BPE", ' > "$TMP/broken.json"
printf 'abc\0def' > "$TMP/bin.txt"
: > "$TMP/empty.txt"
expect test_v2125_broken_tokenizer_refused 2 "^/.*broken.json: not valid JSON .* — " -- "$GEN" data "$TMP/a.txt" -o "$TMP/dbad" --tokenizer "$TMP/broken.json"
check test_v2125_broken_tokenizer_writes_nothing test ! -e "$TMP/dbad"
expect test_v2125_missing_tokenizer_refused 2 "nope.json: No such file" -- "$GEN" data "$TMP/a.txt" -o "$TMP/dbad" --tokenizer "$TMP/nope.json"
expect test_v2125_binary_source_refused 2 "bin.txt: NUL byte at offset 3" -- "$GEN" data "$TMP/bin.txt" -o "$TMP/dbad" --tokenizer "$TMP/tk/tokenizer.json"
expect test_v2125_empty_source_refused 2 "empty.txt: input is empty" -- "$GEN" data "$TMP/empty.txt" -o "$TMP/dbad" --tokenizer "$TMP/tk/tokenizer.json"
check test_v2125_bad_sources_write_nothing test ! -e "$TMP/dbad"
expect test_v2125_train_binary_refused 2 "bin.txt: NUL byte" -- "$GEN" tokenizer train "$TMP/bin.txt" --vocab 300 -o "$TMP/tkbad"
expect test_v2125_train_empty_refused 2 "empty.txt: input is empty" -- "$GEN" tokenizer train "$TMP/empty.txt" --vocab 300 -o "$TMP/tkbad"
expect test_v2125_train_small_vocab_refused 2 "outside 257" -- "$GEN" tokenizer train "$TMP/a.txt" --vocab 100 -o "$TMP/tkbad"
expect test_v2125_encode_broken_refused 2 "broken.json: not valid JSON" -- "$GEN" tokenizer encode "$TMP/broken.json" "$TMP/a.txt"
echo 99999 > "$TMP/badids.txt"
expect test_v2125_decode_bad_id_refused 2 "id 99999 .*outside the vocabulary 0..511" -- "$GEN" tokenizer decode "$TMP/tk/tokenizer.json" "$TMP/badids.txt"
expect test_v2125_unknown_subcommand 2 "gen tokenizer needs one of train, encode, decode, info" -- "$GEN" tokenizer trian
expect test_v2125_set_data_missing_refused 2 "v2125 .*data=$TMP/nodir: no such file" -- "$GEN" "$T" --enable adamw,bpe --set v2125.data="$TMP/nodir" --model tiny -o "$TMP/gbad"

# --- a trainer sized to the data: train, sample text ------------------------------------------------
expect test_v2125_gen_sizes_model 0 "" -- "$GEN" "$T" --enable adamw,bpe --set v2125.data="$TMP/d" --model tiny -o "$TMP/g"
expect test_v2125_audit_vocab_and_bytes_per_token 0 "vocab_size 256 -> 512 .*bytes/token" -- "$GEN" audit "$TMP/g"
TR=(--batch 2 --seq 32 --eval-every 0 --lr 3e-3)
expect test_v2125_train_on_bpe_data 0 "done: 4 steps" -- "$TMP/g/train" --data "$TMP/d" --steps 4 "${TR[@]}" --ckpt-dir "$TMP/ck" --ckpt-every 4 --sample 0
expect test_v2125_sample_runs 0 "^Hyperion" -- "$TMP/g/train" sample --ckpt-dir "$TMP/ck" --sample 12 --prompt Hyperion
"$TMP/g/train" sample --ckpt-dir "$TMP/ck" --sample 12 --prompt Hyperion > "$TMP/sample.txt" 2>&1
check test_v2125_sample_is_text_not_ids bash -c "! grep -Eq '^Hyperion ?[0-9]+ [0-9]+ ' '$TMP/sample.txt'"
check test_v2125_checkpoint_records_tokenizer grep -q "\"xxh3_64\":[[:space:]]*\"$hash\"" "$TMP/ck/step_00000004/state.json"

# --- data made with another tokenizer --------------------------------------------------------------
"$GEN" specs/v2500.yaml --enable adamw --model tiny -o "$TMP/gbyte" >/dev/null 2>&1
expect test_v2125_byte_model_refuses_bpe_data 2 "^train: $TMP/d: made with tokenizer bpe .*vocab 512.* but the model reads bytes" -- "$TMP/gbyte/train" --data "$TMP/d" --steps 1 "${TR[@]}"
expect test_v2125_bpe_model_refuses_byte_data 2 "byte-level data, but the model was sized to a BPE vocabulary of 512" -- "$TMP/g/train" --data "$TMP/dbyte" --steps 1 "${TR[@]}"
"$GEN" tokenizer train "$TMP/b.txt" --vocab 512 -o "$TMP/tk2" >/dev/null
"$GEN" data "$TMP/a.txt" -o "$TMP/d2" --tokenizer "$TMP/tk2/tokenizer.json" >/dev/null
expect test_v2125_resume_refuses_other_tokenizer 2 "trained on data of tokenizer bpe $hash but --data $TMP/d2 was made with bpe" \
  -- "$TMP/g/train" --data "$TMP/d2" --steps 5 "${TR[@]}" --ckpt-dir "$TMP/ck" --resume
expect test_v2125_init_from_refuses_other_tokenizer 2 "init-from weights trained on data of tokenizer bpe $hash, but this data was made with bpe" \
  -- "$TMP/g/train" --data "$TMP/d2" --steps 1 "${TR[@]}" --init-from "$TMP/ck"
cp "$TMP/tk2/tokenizer.json" "$TMP/d/tokenizer.json"
expect test_v2125_sample_refuses_replaced_tokenizer 2 "tokenizer.json: xxh3 .* but the checkpoint was trained with tokenizer $hash" \
  -- "$TMP/g/train" sample --ckpt-dir "$TMP/ck" --sample 4
finish
