#!/usr/bin/env bash
# v2126 best-fit-decreasing packing and v2127 dynamic batching in the generated cpu trainer, end to
# end on the short-document corpus (Debian's fortunes, one document per fortune, gen data
# --doc-sep %): the trainers report their row layout and padding, write batch_tokens / batch_rows /
# pad_frac / loss_tokens per step in the metrics, train, and resume bit-exactly from a checkpoint
# (v2127 also under prefetch); rows = contiguous keeps the T-token windows; dynamic batching varies
# the batch shape under the token budget; bad selections are refused with exit 2 and one line.
# The exact checks (every document whole in one row, budget and buckets, a padded packed row and a
# dynamic batch = their documents alone) are in tests/unit/test_pack_rows_v2126_v2127.c.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
FORT=/usr/share/games/fortunes
[ -s "$FORT/fortunes" ] || { echo "FAIL: $FORT/fortunes missing — run scripts/install-deps.sh (Debian package fortunes)"; exit 1; }
expect gen_data 0 "wrote shards" -- "$GEN" data "$FORT/fortunes" -o "$TMP/data" --val-fraction 0.05 --doc-sep %

g() { local out=$1; shift; "$GEN" specs/v2500.yaml --model tiny --target cpu --seq 128 -o "$TMP/$out" "$@" >/dev/null 2>&1; }
g pk --enable adamw,packing,flash --batch 8
g pkc --enable adamw,packing,flash --batch 8 --set v2126.rows=contiguous
g dyn --enable adamw,dynamic-batching,prefetch --batch 16 --set v2127.token_budget=1024 --set v2127.buckets=4
check trainers_generated test -x "$TMP/pk/train" -a -x "$TMP/pkc/train" -a -x "$TMP/dyn/train"
C=(--data "$TMP/data" --eval-every 4 --lr 1e-3)

# v2126: best-fit rows (padding reported), contiguous windows (no rows line), different batches
expect test_v2126_bfd_trainer_reports_rows 0 "rows: best-fit-decreasing packing of whole documents: [0-9]+ rows per epoch, .* padding [0-9.]+%" \
  -- "$TMP/pk/train" "${C[@]}" --steps 8 --metrics "$TMP/pk.jsonl"
check test_v2126_bfd_metrics_pad_frac awk -v f="$(last_metric "$TMP/pk.jsonl" pad_frac)" 'BEGIN {exit !(f != "" && f >= 0 && f < 0.1)}'
check test_v2126_bfd_trains awk -v a="$(losses "$TMP/pk.jsonl" | head -1)" -v b="$(losses "$TMP/pk.jsonl" | tail -1)" 'BEGIN {exit !(a != "" && b < a - 0.5)}'
"$TMP/pkc/train" "${C[@]}" --steps 8 --metrics "$TMP/pkc.jsonl" > "$TMP/pkc.out" 2>&1
no_rows_line() { grep -q "done: 8 steps" "$1" && ! grep -q "^rows:" "$1"; }
check test_v2126_contiguous_rows_option no_rows_line "$TMP/pkc.out"
check test_v2126_contiguous_vs_bfd_differ test "$(losses "$TMP/pk.jsonl" | tail -1)" != "$(losses "$TMP/pkc.jsonl" | tail -1)"
# resume: 4 + 4 steps == 8 straight
expect bfd_ckpt 0 "done: 4 steps" -- "$TMP/pk/train" "${C[@]}" --steps 8 --metrics "$TMP/pkr.jsonl" --ckpt-dir "$TMP/ck1" --ckpt-every 4 --stop-after 4
expect bfd_resume 0 "resumed from" -- "$TMP/pk/train" "${C[@]}" --steps 8 --metrics "$TMP/pkr.jsonl" --ckpt-dir "$TMP/ck1" --resume
check test_v2126_bfd_resume_bit_exact test -n "$(losses "$TMP/pk.jsonl")" -a "$(losses "$TMP/pk.jsonl")" = "$(losses "$TMP/pkr.jsonl")"

# v2127: dynamic batches (prefetched), shapes under the budget, resume bit-exact
expect test_v2127_dynamic_trainer_reports_batches 0 "rows: dynamic batches \(length buckets, token budget\): [0-9]+ batches per epoch" \
  -- "$TMP/dyn/train" "${C[@]}" --steps 8 --metrics "$TMP/dyn.jsonl"
check test_v2127_batch_tokens_within_budget awk 'BEGIN {bad = 0} {if ($1 > 1024 || $1 < 1) bad = 1} END {exit bad || NR != 8}' <(metric "$TMP/dyn.jsonl" batch_tokens)
check test_v2127_batch_rows_vary test "$(metric "$TMP/dyn.jsonl" batch_rows | sort -u | wc -l)" -ge 2
check test_v2127_dynamic_trains awk -v a="$(losses "$TMP/dyn.jsonl" | head -1)" -v b="$(losses "$TMP/dyn.jsonl" | tail -1)" 'BEGIN {exit !(a != "" && b < a - 0.5)}'
expect dyn_ckpt 0 "done: 4 steps" -- "$TMP/dyn/train" "${C[@]}" --steps 8 --metrics "$TMP/dynr.jsonl" --ckpt-dir "$TMP/ck2" --ckpt-every 4 --stop-after 4
expect dyn_resume 0 "resumed from" -- "$TMP/dyn/train" "${C[@]}" --steps 8 --metrics "$TMP/dynr.jsonl" --ckpt-dir "$TMP/ck2" --resume
check test_v2127_dynamic_resume_bit_exact test -n "$(losses "$TMP/dyn.jsonl")" -a "$(losses "$TMP/dyn.jsonl")" = "$(losses "$TMP/dynr.jsonl")"
check test_v2127_resume_same_shapes test -n "$(metric "$TMP/dynr.jsonl" batch_rows)" -a "$(metric "$TMP/dyn.jsonl" batch_rows)" = "$(metric "$TMP/dynr.jsonl" batch_rows)"

# bad selections
expect test_v2127_refused_on_sim 2 "v2127 dynamic_batching: the sim target runs one planned batch shape" \
  -- "$GEN" specs/v2500.yaml --enable adamw,dynamic-batching --model tiny --target sim --seq 64 -o "$TMP/x1"
expect test_v2127_budget_below_T_refused 2 "token_budget 100 is below one row of the longest bucket" \
  -- "$GEN" specs/v2500.yaml --enable adamw,dynamic-batching --model tiny --target cpu --seq 128 --set v2127.token_budget=100 -o "$TMP/x2"
expect test_v2126_v2127_conflict 2 "v2127|v2126" \
  -- "$GEN" specs/v2500.yaml --enable adamw,dynamic-batching,packing --model tiny --target cpu --seq 128 -o "$TMP/x3"
check refusals_wrote_nothing test ! -e "$TMP/x1" -a ! -e "$TMP/x2" -a ! -e "$TMP/x3"
finish
