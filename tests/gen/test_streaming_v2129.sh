#!/usr/bin/env bash
# v2129 streaming dataset end to end: `train --stream FILES` on raw KJV documents (text with '%'
# separators, .jsonl, .jsonl.gz) against `gen data` shards of the same documents:
#   - with shuffle_buffer 1 the stream trains on exactly the rows the shard loader reads in file
#     order (its epoch 0 in file order: meta.json "train_order": "curriculum", the v2120 switch),
#     so 12 steps give bit-identical losses; .jsonl.gz and .jsonl give the losses of the text;
#   - with v2126 packing the stream's document positions give the packed shard trainer's losses;
#   - resume is bit-exact (10 straight == 5 + --resume 5), on 1 rank and on 2 ranks (mpirun), and
#     a stream checkpoint refuses another world size / shards (exit 2, one line);
#   - np=2: each rank's saved stream position names one of its own documents (even / odd
#     indices; the full disjointness check is tests/unit/test_stream_v2129.c);
#   - peak RSS (ru_maxrss, --memory-profile) for the same steps on a 1x and an 8x larger corpus
#     differs by less than 4 MiB while the 8x corpus holds 8x the text (tokens as int32: ~10 MiB
#     more for a loader that read it whole);
#   - bad input: missing file, binary file, malformed .jsonl line (file:line), empty file, a
#     tokenizer the model does not match, --stream on a shard trainer and --data on a stream
#     trainer: exit 2 and one line.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
kjv_corpus "$TMP/kjv.txt"
# documents of 12 verses: '%'-separated text, and the same documents as .jsonl (+ .gz)
awk '{print} NR % 12 == 0 {print "%"}' "$TMP/kjv.txt" > "$TMP/docs.txt"
awk 'function flush() { if (d != "") print "{\"text\": \"" d "\"}"; d = "" }
     $0 == "%" { flush(); next }
     { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); d = d $0 "\\n" }
     END { flush() }' "$TMP/docs.txt" > "$TMP/docs.jsonl"
gzip -k "$TMP/docs.jsonl"

# state.json's "stream" (one array of 6 numbers per rank), compact: [[a,b,...],[...]]
stream_of() { tr -d ' \n\t' < "$1" | grep -oE '"stream":\[(\[[0-9,]*\],?)*\]' | cut -d: -f2; }
# rank R's field K (0-based) of state.json's stream
stream_field() { stream_of "$1" | tr -d '[' | tr ']' '\n' | sed 's/^,//' | sed -n "$(($2 + 1))p" | cut -d, -f$(($3 + 1)); }
G=(--model tiny --target cpu --batch 4 --seq 64)
"$GEN" specs/v2500.yaml --enable adamw,warmup "${G[@]}" -o "$TMP/base" >/dev/null 2>&1
"$GEN" specs/v2500.yaml --enable adamw,warmup,streaming --set v2129.shuffle_buffer=1 "${G[@]}" -o "$TMP/s1" >/dev/null 2>&1
"$GEN" specs/v2500.yaml --enable adamw,warmup,streaming --set v2129.shuffle_buffer=24 "${G[@]}" -o "$TMP/s24" >/dev/null 2>&1
"$GEN" specs/v2500.yaml --enable adamw,warmup,dp,v2175,streaming --set v2129.shuffle_buffer=24 "${G[@]}" -o "$TMP/dp" >/dev/null 2>&1
check trainers_generated test -x "$TMP/base/train" -a -x "$TMP/s1/train" -a -x "$TMP/s24/train" -a -x "$TMP/dp/train"
check plan_has_stream_buffer grep -q '"stream_buffer":[[:space:]]*24' "$TMP/s24/plan.json"

# shards of the same documents, read in file order in epoch 0
"$GEN" data "$TMP/docs.txt" -o "$TMP/data" --val-fraction 0 --doc-sep % >/dev/null 2>&1
sed -i '0,/{/s//{"train_order": "curriculum",/' "$TMP/data/meta.json"
R=(--steps 12 --eval-every 0)
expect shard_train 0 "done: 12 steps" -- "$TMP/base/train" --data "$TMP/data" "${R[@]}" --metrics "$TMP/shard.jsonl"
expect test_v2129_stream_trains 0 "streaming .*docs.txt \(v2129\).*shuffle blocks of 1 rows.*loader thread" \
  -- "$TMP/s1/train" --stream "$TMP/docs.txt" --doc-sep % "${R[@]}" --metrics "$TMP/s1.jsonl"
check test_v2129_stream_buffer1_losses_equal_shards_in_order same_losses "$TMP/shard.jsonl" "$TMP/s1.jsonl" 12
# with v2126 packing (contiguous windows: best-fit rows need the whole split): the stream's document
# positions mask attention as the shards' sidecars do
"$GEN" specs/v2500.yaml --enable adamw,warmup,packing --set v2126.rows=contiguous "${G[@]}" -o "$TMP/pk" >/dev/null 2>&1
"$GEN" specs/v2500.yaml --enable adamw,warmup,packing,streaming --set v2129.shuffle_buffer=1 --set v2126.rows=contiguous "${G[@]}" -o "$TMP/pks" >/dev/null 2>&1
"$TMP/pk/train" --data "$TMP/data" "${R[@]}" --metrics "$TMP/pk.jsonl" >/dev/null 2>&1
expect pk_stream 0 "attention masked per document" -- "$TMP/pks/train" --stream "$TMP/docs.txt" --doc-sep % "${R[@]}" --metrics "$TMP/pks.jsonl"
check test_v2129_packing_stream_losses_equal_packed_shards same_losses "$TMP/pk.jsonl" "$TMP/pks.jsonl" 12
check packing_changes_losses test "$(losses "$TMP/pk.jsonl" | tail -1)" != "$(losses "$TMP/shard.jsonl" | tail -1)"
"$TMP/s1/train" --stream "$TMP/docs.jsonl" "${R[@]}" --metrics "$TMP/s1j.jsonl" >/dev/null 2>&1
"$TMP/s1/train" --stream "$TMP/docs.jsonl.gz" "${R[@]}" --metrics "$TMP/s1g.jsonl" >/dev/null 2>&1
check test_v2129_jsonl_equals_text same_losses "$TMP/s1.jsonl" "$TMP/s1j.jsonl" 12
check test_v2129_gzip_equals_plain same_losses "$TMP/s1j.jsonl" "$TMP/s1g.jsonl" 12
"$TMP/s24/train" --stream "$TMP/docs.jsonl.gz" "${R[@]}" --metrics "$TMP/s24.jsonl" >/dev/null 2>&1
check test_v2129_shuffle_changes_the_order test "$(losses "$TMP/s24.jsonl" | tail -1)" != "$(losses "$TMP/s1g.jsonl" | tail -1)"

# resume: 10 straight vs 5 + 5 (blocks of 24 rows, 4 rows a step: the save is inside a block)
S=(--stream "$TMP/docs.jsonl.gz" --steps 10 --eval-every 0)
"$TMP/s24/train" "${S[@]}" --metrics "$TMP/r10.jsonl" >/dev/null 2>&1
expect r5 0 "done: 5 steps" -- "$TMP/s24/train" "${S[@]}" --metrics "$TMP/r55.jsonl" --ckpt-dir "$TMP/ck" --ckpt-every 5 --stop-after 5
expect r5_resume 0 "resumed from .*step_0*5" -- "$TMP/s24/train" "${S[@]}" --metrics "$TMP/r55.jsonl" --ckpt-dir "$TMP/ck" --resume
check test_v2129_resume_bit_exact same_losses "$TMP/r10.jsonl" "$TMP/r55.jsonl" 10
check checkpoint_records_stream_position grep -qE '^\[\[[0-9]+(,[0-9]+){5}\]\]$' <(stream_of "$TMP/ck/step_00000005/state.json")

# np=2 (a trainer with elastic resume, v2175, which a stream checkpoint still refuses on 1 rank):
# ranks deal documents, resume bit-exact on 2 ranks
MPI=(mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS)
expect np2_10 0 "done: 10 steps" -- "${MPI[@]}" "$TMP/dp/train" "${S[@]}" --metrics "$TMP/n10.jsonl" --ckpt-dir "$TMP/ckn" --ckpt-every 5
ST="$TMP/ckn/step_00000010/state.json"
d0=$(stream_field "$ST" 0 3); d1=$(stream_field "$ST" 1 3)
echo "     np=2 stream positions at step 10 (pass, file, offset, doc, line, skip): $(stream_of "$ST"): documents $d0 (rank 0), $d1 (rank 1)"
check test_v2129_np2_ranks_hold_own_documents awk -v a="$d0" -v b="$d1" 'BEGIN {exit !(a != "" && b != "" && a > 0 && a % 2 == 0 && b % 2 == 1)}' 
expect np2_5 0 "done: 5 steps" -- "${MPI[@]}" "$TMP/dp/train" "${S[@]}" --metrics "$TMP/n55.jsonl" --ckpt-dir "$TMP/ckm" --ckpt-every 5 --stop-after 5
expect np2_resume 0 "resumed from" -- "${MPI[@]}" "$TMP/dp/train" "${S[@]}" --metrics "$TMP/n55.jsonl" --ckpt-dir "$TMP/ckm" --resume
check test_v2129_np2_resume_bit_exact same_losses "$TMP/n10.jsonl" "$TMP/n55.jsonl" 10
rm -rf "$TMP/ckm/step_00000010" && echo step_00000005 > "$TMP/ckm/latest"
expect test_v2129_np2_checkpoint_refused_on_1_rank 2 "stream positions of 2 ranks, resumed on 1" \
  -- "$TMP/dp/train" "${S[@]}" --ckpt-dir "$TMP/ckm" --resume

# peak RSS over the same 30 steps: the corpus, and 8 copies of it in one .gz file
for i in 1 2 3 4 5 6 7 8; do cat "$TMP/docs.jsonl"; done | gzip > "$TMP/docs8.jsonl.gz"
rss() { "$TMP/s24/train" --stream "$1" --steps 30 --eval-every 0 --memory-profile "$TMP/m.svg" 2>&1 | grep -o 'peak RSS [0-9.]*' | cut -d' ' -f3; }
r1=$(rss "$TMP/docs.jsonl.gz"); r8=$(rss "$TMP/docs8.jsonl.gz")
echo "     peak RSS, 30 steps: corpus 1x ($(stat -c %s "$TMP/docs.jsonl") bytes) $r1 MiB, 8x ($((8 * $(stat -c %s "$TMP/docs.jsonl"))) bytes) $r8 MiB"
check test_v2129_rss_flat_as_corpus_grows_8x awk -v a="$r1" -v b="$r8" 'BEGIN {d = b - a; if (d < 0) d = -d; exit !(a > 0 && d < 4)}'

# bad input: exit 2, one line
one_line() { [ "$("$@" 2>&1 >/dev/null | wc -l)" -eq 1 ]; }
printf 'GIF89a\0\1\2binary' > "$TMP/img.gif"
(head -3 "$TMP/docs.jsonl"; echo '{"text": oops}'; tail -n +4 "$TMP/docs.jsonl") > "$TMP/broken.jsonl"
: > "$TMP/empty.txt"
T1=(--steps 40 --eval-every 0)
expect test_v2129_missing_file 2 "nope.txt: no such file — " -- "$TMP/s1/train" --stream "$TMP/nope.txt" "${T1[@]}"
expect test_v2129_binary_file 2 "img.gif: NUL byte at offset 6 — this is not a text file" -- "$TMP/s1/train" --stream "$TMP/img.gif" "${T1[@]}"
expect test_v2129_malformed_jsonl_line 2 "broken.jsonl:4: not valid JSON — " -- "$TMP/s1/train" --stream "$TMP/broken.jsonl" "${T1[@]}"
check malformed_jsonl_one_line one_line "$TMP/s1/train" --stream "$TMP/broken.jsonl" "${T1[@]}"
expect test_v2129_empty_file 2 "empty.txt: the file is empty — " -- "$TMP/s1/train" --stream "$TMP/docs.jsonl,$TMP/empty.txt" "${T1[@]}"
expect test_v2129_tokenizer_mismatch 2 "tokenizer tiktoken .*vocab 50257.* but the model reads bytes" \
  -- "$TMP/s1/train" --stream "$TMP/docs.jsonl" --tokenizer "$ROOT/assets/tokenizers/gpt2.tiktoken.gz" "${T1[@]}"
check tokenizer_mismatch_one_line one_line "$TMP/s1/train" --stream "$TMP/docs.jsonl" --tokenizer "$ROOT/assets/tokenizers/gpt2.tiktoken.gz" "${T1[@]}"
expect test_v2129_stream_needs_streaming_trainer 2 "generated without streaming — regenerate with --enable streaming" \
  -- "$TMP/base/train" --stream "$TMP/docs.jsonl" "${T1[@]}"
expect test_v2129_data_on_stream_trainer 2 "generated for streaming \(v2129\) — give --stream" -- "$TMP/s1/train" --data "$TMP/data" "${T1[@]}"
finish
