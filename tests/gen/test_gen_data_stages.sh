#!/usr/bin/env bash
# gen data's stages from the command line (v2120 curriculum, v2121 mixing, v2122 dedup, v2123
# filtering): the fortunes corpus (Debian `fortunes`, one document per fortune with --doc-sep %)
# and .jsonl/.gz inputs; --enable/--set resolved through the tree like the main command;
# report.json per stage (per-rule counts, duplicate clusters, realized mix within a binomial
# interval, curriculum order); planted near-duplicates scored against brute-force Jaccard
# (tests/tools/dedup_eval); the `data` preset without --allow-planned; every bad input one line,
# exit 2, nothing written.
source "$(dirname "$0")/lib.sh" "$1"
T="$ROOT/specs/v2500.yaml"
FORT=/usr/share/games/fortunes
if [ ! -d "$FORT" ]; then echo "FAIL: $FORT missing — run scripts/install-deps.sh (Debian package fortunes)"; exit 1; fi
for f in "$FORT"/*; do case "$f" in *.dat|*.u8) ;; *) cat "$f";; esac; done > "$TMP/fortunes.txt"
n_fortunes=$(python3 - "$TMP/fortunes.txt" <<'EOF2'
import sys
docs, cur = 0, []
for line in open(sys.argv[1], encoding="latin-1").read().split("\n"):
    if line.rstrip("\r") == "%":
        docs += bool("".join(cur).strip()); cur = []
    else:
        cur.append(line)
docs += bool("".join(cur).strip())
print(docs)
EOF2
)
# a second domain: 400 short English documents in .jsonl.gz
python3 - "$TMP/other.jsonl" <<'EOF2'
import json, random, sys
r = random.Random(5)
stop = "the of and to in that with have be is was for on as at by it this from his they".split()
other = ["".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(3, 8))) for i in range(400)]
with open(sys.argv[1], "w") as f:
    for i in range(400):
        words = [r.choice(stop) if r.random() < 0.4 else r.choice(other) for _ in range(r.randint(20, 60))]
        f.write(json.dumps({"text": " ".join(words)}) + "\n")
EOF2
gzip -k "$TMP/other.jsonl"
meta() { python3 -c "import json,sys; m=json.load(open(sys.argv[1]+'/meta.json')); print(eval(sys.argv[2]))" "$1" "$2"; }
report() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/report.json')); st={s['stage']: s for s in r['stages']}; print(eval(sys.argv[2]))" "$1" "$2"; }

# --- documents and sidecars ----------------------------------------------------------------------
expect test_fortunes_one_document_per_fortune 0 "wrote shards" -- "$GEN" data "$TMP/fortunes.txt" --doc-sep % -o "$TMP/fort"
check test_fortunes_documents_read test "$(report "$TMP/fort" "r['documents_read']")" = "$n_fortunes"
check test_fortunes_meta_documents test "$(meta "$TMP/fort" "m['documents'] >= $n_fortunes and all(s['docs'] > 0 and len(s['docs_xxh3_64']) == 16 for s in m['shards'])")" = True
check test_fortunes_sidecars_written test -s "$TMP/fort/train_000000.docs" -a -s "$TMP/fort/val_000000.docs"
expect test_jsonl_gz_input 0 "wrote shards" -- "$GEN" data "$TMP/other.jsonl.gz" -o "$TMP/gz"
check test_jsonl_gz_400_documents test "$(report "$TMP/gz" "r['documents_read']")" = 400

# with GPT-2's tokenizer: EOT before every document, sidecar offsets pointing at it (docs contract)
expect test_stages_with_gpt2_tokenizer 0 "wrote shards" -- "$GEN" data "$FORT/fortunes" --doc-sep % --enable dedup \
  --tokenizer "$ROOT/assets/tokenizers/gpt2.tiktoken.gz" -o "$TMP/gpt2"
python3 - "$TMP/gpt2" > "$TMP/eot.txt" <<'EOF2'
import json, os, struct, sys
d = sys.argv[1]; m = json.load(open(d + "/meta.json")); off_eot = cut = 0
for s in m["shards"]:
    b = open(os.path.join(d, s["file"]), "rb").read(); w = 2 if struct.unpack("<i", b[4:8])[0] == 1 else 4
    x = open(os.path.join(d, s["file"][:-4] + ".docs"), "rb").read(); n = struct.unpack("<i", x[8:12])[0]
    for o in struct.unpack("<%dQ" % n, x[1024:1024 + 8 * n]):
        if int.from_bytes(b[1024 + o * w:1024 + (o + 1) * w], "little") == m["eot_id"]: off_eot += 1
        else: cut += 1
print(m["eot_id"], off_eot, cut, len(m["shards"]), m["documents"])
EOF2
read -r eot at_eot cut n_shards n_docs < "$TMP/eot.txt"
check test_sidecar_offsets_point_at_eot test "$eot" = 50256 -a "$at_eot" -gt 400 -a "$cut" -le "$n_shards" -a "$((at_eot + cut))" = "$n_docs"

# --- the stages, selected like every technique ------------------------------------------------------
expect test_data_preset_in_gen_data 0 "wrote shards" -- "$GEN" data "$TMP/fortunes.txt" "$TMP/other.jsonl.gz" --doc-sep % \
  --enable data --set filter.min_words=5 --set v2121.weights=0.7,0.3 --set mixing.size=8000 -o "$TMP/mix"
check test_report_stages_in_order_with_spec_ids test "$(report "$TMP/mix" "[(s['stage'], s['spec']) for s in r['stages']]")" = \
  "[('filter', 'v2123'), ('dedup', 'v2122'), ('mixing', 'v2121')]"
check test_v2123_report_removed_by_rule_adds_up test "$(report "$TMP/mix" "sum(st['filter']['removed_by_rule'].values()) == st['filter']['documents_in'] - st['filter']['documents_out'] > 0")" = True
check test_v2123_threshold_reaches_the_stage test "$(report "$TMP/mix" "st['filter']['thresholds']['min_words']")" = 5
check test_v2122_report_names_cluster_representatives test "$(report "$TMP/mix" "all(x['kept'] < x['doc'] and x['why'] in ('exact', 'near') for x in st['dedup']['removed']) and st['dedup']['documents_in'] - st['dedup']['documents_out'] == st['dedup']['exact_removed'] + st['dedup']['near_removed'] > 0")" = True
# v2121: realized share of each domain within the 99.9% binomial interval of 8000 draws
check test_v2121_realized_mix_within_binomial_interval test "$(report "$TMP/mix" "all(abs(s['documents_drawn'] - 8000 * p) <= 3.29 * (8000 * p * (1 - p)) ** 0.5 for s, p in zip(st['mixing']['sources'], (0.7, 0.3))) and st['mixing']['documents_out'] == 8000")" = True
check test_v2121_mix_reaches_the_shards test "$(report "$TMP/mix" "r['output']['documents']")" = 8000
"$GEN" data "$TMP/fortunes.txt" "$TMP/other.jsonl.gz" --doc-sep % --enable mixing --set mixing.unit=bytes --set mixing.weights=1,1 -o "$TMP/mixb" >/dev/null 2>&1
check test_v2121_unit_bytes_draws_by_mean_document_bytes test "$(report "$TMP/mixb" "st['mixing']['unit'] == 'bytes' and abs(sum(s['draw_probability'] for s in st['mixing']['sources']) - 1) < 1e-9 and all(abs(s['byte_share'] - 0.5) < 0.05 for s in st['mixing']['sources'])")" = True
"$GEN" data "$TMP/fortunes.txt" --doc-sep % --enable curriculum --set curriculum.metric=length --set curriculum.pacing=root -o "$TMP/cur" >/dev/null 2>&1
check test_v2120_curriculum_easy_to_hard test "$(report "$TMP/cur" "st['curriculum']['mean_score_by_tenth'][0] < st['curriculum']['mean_score_by_tenth'][4] < st['curriculum']['mean_score_by_tenth'][9] and st['curriculum']['pacing'] == 'root'")" = True
check test_v2120_meta_train_order test "$(meta "$TMP/cur" "m['train_order']")" = curriculum
# the same selection, stage by stage, by id and alias alike
"$GEN" data "$TMP/other.jsonl.gz" --enable v2122 --set v2122.near=false -o "$TMP/exact" >/dev/null 2>&1
check test_v2122_params_by_id test "$(report "$TMP/exact" "st['dedup']['params']['near']")" = False

# --- v2122 planted near-duplicates vs brute-force Jaccard (tests/tools/dedup_eval) ---------------
"$BUILD/tests/dedup_eval" planted 400 7 > "$TMP/planted.json"
pl() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$TMP/planted.json" "$1"; }
check test_v2122_planted_precision_and_recall_at_least_0.9 test "$(pl "r['precision'] >= 0.9 and r['recall'] >= 0.9 and r['true_duplicates'] > 50")" = True
check test_v2122_planted_recall_1_above_jaccard_0.9 test "$(pl "all(b['recall'] == 1 for k, b in r['recall_by_true_jaccard'].items() if k in ('[0.9,0.95)', '[0.95,1]'))")" = True
check test_v2122_planted_nothing_removed_below_threshold_minus_0.15 test "$(pl "r['removed_below_threshold_minus_0.15']")" = 0
pl "'planted: %d docs, %d true duplicates, precision %.3f recall %.3f' % (r['documents'], r['true_duplicates'], r['precision'], r['recall'])"

# --- v2124 augmentation: samples of a briefly trained tiny trainer, mixed in at a fixed share ------
"$GEN" "$T" --enable adamw --model tiny -o "$TMP/tr" >/dev/null 2>&1
OMP_NUM_THREADS=1 "$TMP/tr/train" --data "$TMP/fort" --steps 4 --batch 2 --seq 64 --eval-every 0 --ckpt-dir "$TMP/tr/ckpt" >/dev/null 2>&1
expect test_v2124_samples_mixed_in 0 "wrote shards" -- "$GEN" data "$TMP/fortunes.txt" --doc-sep % --enable augmentation,dedup \
  --set augmentation.trainer="$TMP/tr" --set augmentation.documents=8 --set augmentation.length=64 --set augmentation.weight=0.2 \
  --set mixing.size=2000 -o "$TMP/aug"
check test_v2124_synthetic_input_in_the_report test "$(report "$TMP/aug" "r['inputs'][1]['documents'] == 8 and r['inputs'][1]['path'].startswith('<synthetic: 8 samples')")" = True
check test_v2124_share_within_binomial_interval test "$(report "$TMP/aug" "abs(st['mixing']['sources'][1]['documents_drawn'] - 400) <= 3.29 * (2000 * 0.2 * 0.8) ** 0.5 and st['mixing']['sources'][1]['target_share'] == 0.2 and st['mixing']['sources'][0]['target_share'] == 0.8")" = True
check test_v2124_no_samples_file_left test -z "$(ls "$TMP" | grep synthetic)"
bad_aug() { expect "$1" 2 "$2" -- "$GEN" data "$TMP/other.jsonl" --enable augmentation "${@:3}" -o "$TMP/never"; check "${1}_writes_nothing" test ! -e "$TMP/never"; }
bad_aug test_bad_v2124_no_trainer "augmentation.trainer is empty"
bad_aug test_bad_v2124_no_checkpoint "no checkpoint directory '$TMP/other/ckpt'" --set augmentation.trainer="$TMP/tr" --set augmentation.ckpt="$TMP/other/ckpt"

# --- the data preset in the main command --------------------------------------------------------------
expect test_data_preset_without_allow_planned 0 "wrote" -- "$GEN" "$T" --enable data --model tiny -o "$TMP/trainer"
expect test_data_specs_say_where_they_act 0 "data-preparation stage: .gen data --enable dedup" -- "$GEN" audit "$TMP/trainer"
expect test_list_data_preset_not_planned 0 "^  data +dedup,filter,mixing — Phase 3 \(data\)[^[]*$" -- "$GEN" list "$T"

# --- bad input: one line, exit 2, nothing written --------------------------------------------------
: > "$TMP/empty.txt"
printf 'some text\0binary' > "$TMP/bin.txt"
printf '{"text": "ok"}\n{"txt": "no"}\n' > "$TMP/bad.jsonl"
bad() { # NAME REGEX ARGS...
  local name=$1 re=$2; shift 2
  expect "$name" 2 "$re" -- "$GEN" data "$@" -o "$TMP/never"
  local lines; lines=$("$GEN" data "$@" -o "$TMP/never" 2>&1 | wc -l)
  check "${name}_one_line" test "$lines" = 1
  check "${name}_writes_nothing" test ! -e "$TMP/never"
}
bad test_bad_empty_source "empty.txt: input is empty" "$TMP/empty.txt"
bad test_bad_binary_source "bin.txt: NUL byte at offset 9 — this is not a text file" "$TMP/bin.txt"
bad test_bad_jsonl_line "bad.jsonl:2: no \"text\" string" "$TMP/bad.jsonl"
bad test_bad_weight_list_mismatch "v2121 data_mixing: weights '0.5,0.3,0.2' has 3 values for 2 inputs — give one weight per input" \
  "$TMP/fortunes.txt" "$TMP/other.jsonl.gz" --enable mixing --set mixing.weights=0.5,0.3,0.2
bad test_bad_weight_not_a_number "weights 'a,b': 'a' is not a number" "$TMP/fortunes.txt" "$TMP/other.jsonl.gz" --enable mixing --set mixing.weights=a,b
bad test_bad_unknown_stage "unknown technique 'dedupe' in --enable.*did you mean 'dedup'" "$TMP/other.jsonl" --enable dedupe
bad test_bad_trainer_technique "v2113 flash_attention_2 .* does not act in gen data" "$TMP/other.jsonl" --enable flash
# a planned spec: a copy of the tree whose v2164 (advisory, no module) is made planned
cp -r "$ROOT/specs" "$TMP/ptree" && sed -i 's/^status: advisory$/status: planned/' "$TMP/ptree/compilation/v2164_compile_optimization.yaml"
bad test_bad_planned_stage "v2164 compile_optimization .*planned" "$TMP/other.jsonl" --tree "$TMP/ptree/v2500.yaml" --enable compile
bad test_bad_trainer_only_data_technique "v2129 streaming_dataset .* does not act in gen data: it shapes the trainer" "$TMP/other.jsonl" --enable streaming
bad test_bad_set_value "v2122.num_perm" "$TMP/other.jsonl" --enable dedup --set dedup.num_perm=abc
bad test_bad_set_out_of_range "v2123.max_digit_ratio" "$TMP/other.jsonl" --enable filter --set filter.max_digit_ratio=7
bad test_bad_set_unknown_spec "--set 'dedupe.ngram=3': unknown spec 'dedupe'" "$TMP/other.jsonl" --enable dedup --set dedupe.ngram=3
bad test_bad_bands_do_not_divide "bands 7 does not divide num_perm 128" "$TMP/other.jsonl" --enable dedup --set dedup.bands=7
bad test_bad_curriculum_loss "metric=loss .* is not implemented" "$TMP/other.jsonl" --enable curriculum --set curriculum.metric=loss
bad test_bad_set_without_enable "--set without --enable" "$TMP/other.jsonl" --set dedup.ngram=3
bad test_bad_everything_filtered "no document is left after the stages" "$TMP/other.jsonl" --enable filter --set filter.min_words=1000

finish
