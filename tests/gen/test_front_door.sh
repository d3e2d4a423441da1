#!/usr/bin/env bash
# The first commands a new user types: every command of gen and of a generated train (and every
# subcommand: gen tokenizer train|encode|decode|info, train sample) answers --help and -h with its
# usage on stdout, nothing on stderr, exit 0 — the lists are read from the top-level usage texts,
# so a command added there is covered here; the directory `gen tokenizer train -o DIR` writes is
# taken wherever a tokenizer is (gen data, gen tokenizer info/encode, train --stream); plain text
# split into paragraphs with --doc-sep blank (or '') so that dedup finds repeated paragraphs.
source "$(dirname "$0")/lib.sh" "$1"
export OMP_NUM_THREADS=1

# help_ok NAME COMMAND...: usage on stdout, empty stderr, exit 0
help_ok() {
  local name=$1; shift
  local out err rc
  out=$("$@" 2>"$TMP/help.err"); rc=$?
  err=$(cat "$TMP/help.err")
  if [ "$rc" = 0 ] && [ -z "$err" ] && printf '%s\n' "$out" | grep -q "usage"; then
    echo "ok   $name"; PASS=$((PASS + 1))
  else
    echo "FAIL $name: exit $rc, stderr '$err'"; printf '%s\n' "$out" | head -5 | sed 's/^/    /'; FAIL=$((FAIL + 1))
  fi
}

# --- gen: every command in `gen --help` (the main command through its tree file) ---------------
cmds=$("$GEN" --help | sed -n 's/^  gen \([a-z][a-z-]*\) .*/\1/p' | sort -u)
n=0
for c in $cmds; do
  n=$((n + 1))
  for h in --help -h; do help_ok "gen_${c}_${h}" "$GEN" "$c" "$h"; done
done
check gen_usage_lists_the_commands test "$n" -ge 9
for h in --help -h; do help_ok "gen_main_${h}" "$GEN" specs/v2500.yaml "$h"; done
help_ok gen_data_help_after_flags "$GEN" data corpus.txt -o x --help
check gen_data_help_is_its_own sh -c "'$GEN' data --help | grep -q 'gen data INPUT' && ! '$GEN' data --help | grep -q 'gen export'"
subs=$("$GEN" tokenizer --help | sed -n 's/^  gen tokenizer \([a-z|]*\) .*/\1/p' | tr '|' ' ')
for s in $subs; do
  for h in --help -h; do help_ok "gen_tokenizer_${s}_${h}" "$GEN" tokenizer "$s" "$h"; done
done
check gen_tokenizer_has_four_subcommands test "$(echo $subs | wc -w)" = 4
expect gen_unknown_command_still_refused 2 "unknown command" -- "$GEN" nonsense --help

# --- train: the program and every subcommand its usage names -----------------------------------
expect gen_trainer 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw --model tiny --target cpu --batch 2 --seq 32 -o "$TMP/t"
for h in --help -h; do help_ok "train_${h}" "$TMP/t/train" "$h"; done
tsubs=$("$TMP/t/train" --help | sed -n 's/^ *\(usage: \)\{0,1\}train \([a-z][a-z-]*\) .*/\2/p' | sort -u)
for s in $tsubs; do
  for h in --help -h; do help_ok "train_${s}_${h}" "$TMP/t/train" "$s" "$h"; done
done
check train_usage_names_sample sh -c "echo '$tsubs' | grep -qx sample"

# --- a tokenizer directory wherever a tokenizer is taken --------------------------------------
head -c 60000 "$ROOT/specs/SCHEMA.md" > "$TMP/corpus.txt"
expect tok_train 0 "tokenizer.json" -- "$GEN" tokenizer train "$TMP/corpus.txt" --vocab 400 -o "$TMP/bpe"
expect tok_info_dir 0 "vocab_size 400" -- "$GEN" tokenizer info "$TMP/bpe"
check tok_encode_dir_equals_file sh -c "printf 'the plan' | '$GEN' tokenizer encode '$TMP/bpe' > '$TMP/a.ids' &&
  printf 'the plan' | '$GEN' tokenizer encode '$TMP/bpe/tokenizer.json' > '$TMP/b.ids' && test -s '$TMP/a.ids' && cmp -s '$TMP/a.ids' '$TMP/b.ids'"
expect data_tokenizer_dir 0 "wrote shards" -- "$GEN" data "$TMP/corpus.txt" --tokenizer "$TMP/bpe/" -o "$TMP/d_dir"
expect data_tokenizer_file 0 "wrote shards" -- "$GEN" data "$TMP/corpus.txt" --tokenizer "$TMP/bpe/tokenizer.json" -o "$TMP/d_file"
check data_tokenizer_dir_same_shards cmp -s "$TMP/d_dir/train_000000.bin" "$TMP/d_file/train_000000.bin"
check data_tokenizer_dir_meta grep -q '"tokenizer_source":[[:space:]]*"bpe"' "$TMP/d_dir/meta.json"
mkdir -p "$TMP/empty"
expect data_tokenizer_dir_without_one 2 "directory without tokenizer.json .* .gen tokenizer train" -- \
  "$GEN" data "$TMP/corpus.txt" --tokenizer "$TMP/empty" -o "$TMP/d_none"
check data_tokenizer_dir_without_one_wrote_nothing test ! -e "$TMP/d_none"
# --- blank-line-separated documents: dedup finds repeated paragraphs --------------------------
python3 - "$TMP/para.txt" <<'EOF'
import random, sys
r = random.Random(3)
words = "river stone lamp orchard winter letter harbor candle meadow signal bridge lantern".split()
paras = [" ".join(r.choice(words) for _ in range(r.randint(30, 60))) + "\n" + " ".join(r.choice(words) for _ in range(20))
         for _ in range(40)]
out = paras + paras[:5]          # five paragraphs repeated exactly
r.shuffle(out)
open(sys.argv[1], "w").write("\n\n".join(out) + "\n")
EOF
report() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/report.json')); st={s['stage']: s for s in r['stages']}; print(eval(sys.argv[2]))" "$1" "$2"; }
for sep in blank ''; do
  tag=${sep:-empty}
  expect "data_doc_sep_${tag}" 0 "dedup +v2122 45 -> 40 documents" -- \
    "$GEN" data "$TMP/para.txt" --doc-sep "$sep" --enable dedup --set dedup.near=false --val-fraction 0 -o "$TMP/p_$tag"
  check "data_doc_sep_${tag}_dedup_removed_5_exact" test "$(report "$TMP/p_$tag" "st['dedup']['exact_removed']")" = 5
done
check data_doc_sep_recorded test "$(python3 -c "import json; print(json.load(open('$TMP/p_blank/report.json'))['doc_sep'])")" = blank
# train --stream takes the same spellings and the tokenizer directory (refused here only because
# the byte model cannot read a 400-id vocabulary: the directory was opened and read)
expect gen_stream_trainer 0 "wrote" -- "$GEN" specs/v2500.yaml --enable adamw,streaming --model tiny --target cpu \
  --batch 2 --seq 32 -o "$TMP/ts"
expect train_stream_doc_sep_blank 0 "done: 2 steps" -- "$TMP/ts/train" --stream "$TMP/para.txt" --doc-sep blank \
  --steps 2 --sample 0 --eval-every 0
expect train_stream_tokenizer_dir 2 "tokenizer bpe .*vocab 400.* but the model reads bytes" -- \
  "$TMP/ts/train" --stream "$TMP/para.txt" --doc-sep '' --tokenizer "$TMP/bpe" --steps 2 --sample 0 --eval-every 0
expect data_without_doc_sep_one_document 0 "dedup +v2122 1 -> 1 documents" -- \
  "$GEN" data "$TMP/para.txt" --enable dedup --val-fraction 0 -o "$TMP/p_none"

finish
