#!/usr/bin/env bash
# The trainer's progress display: on a terminal (a pty from `script`, or HYP_PROGRESS=bar) one line
# rewritten in place ("\r" + clear) with a bar, loss, tokens/s and the ETA, and only the steps that
# matter (the last, evaluations) as permanent log lines; stdout to a file: a log line every step;
# --log-every N: every N-th step plus the last. Tiny model, 30 steps of batch 2; ~5 s.
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1
unset HYP_FAULT_INJECT HYP_PROGRESS
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
cd "$ROOT"
expect gen_tiny 0 "wrote" -- "$GEN" specs/v2500.yaml --model tiny --target cpu --batch 16 --seq 64 --enable adamw,clip -o "$TMP/b"
# batch 2 of the 16 planned: what is checked is the display, which no batch size changes (the bar's
# first draw is immediate, later ones at most every 0.1 s); 1/8 of the tokens per step
C=(--data "$TMP/data" --batch 2 --seq 64 --steps 30 --eval-every 15 --eval-batches 2)
plain() { tr '\r' '\n' < "$1" | sed 's/\x1b\[K//g'; } # what stays on screen, line by line
log_lines() { plain "$1" | grep -ac '^step .*| MFU'; }
"$TMP/b/train" "${C[@]}" > "$TMP/file.out" 2>&1
check test_progress_file_every_step test "$(grep -c '^step ' "$TMP/file.out")" = 30
check test_progress_file_no_carriage_return bash -c "! grep -q $'\r' '$TMP/file.out'"
HYP_PROGRESS=bar "$TMP/b/train" "${C[@]}" > "$TMP/bar.out" 2>&1
echo "forced bar: $(grep -o $'\r' "$TMP/bar.out" | wc -l) carriage returns, $(log_lines "$TMP/bar.out") permanent step lines"
check test_progress_bar_in_place grep -q $'\r\033\\[K\\[#*>*\\.*\\] .*step [0-9]*/30 | loss .* tok/s | ETA' "$TMP/bar.out"
check test_progress_bar_keeps_only_eval_and_last test "$(log_lines "$TMP/bar.out")" = 2
check test_progress_bar_done_line bash -c "tr '\r' '\n' < '$TMP/bar.out' | sed 's/\x1b\[K//g' | grep -aq '^done: 30 steps'"
if command -v script >/dev/null; then
  TERM=xterm script -qec "'$TMP/b/train' ${C[*]}" /dev/null > "$TMP/tty.out" 2>&1
  check test_progress_tty_gets_the_bar grep -aq $'\r\033\\[K\\[' "$TMP/tty.out"
  TERM=dumb script -qec "'$TMP/b/train' ${C[*]}" /dev/null > "$TMP/dumb.out" 2>&1
  check test_progress_dumb_terminal_gets_log_lines test "$(log_lines "$TMP/dumb.out")" = 30
else
  echo "note: no script(1) here: the pty checks are skipped (HYP_PROGRESS=bar covered the bar)"
fi
"$TMP/b/train" "${C[@]}" --log-every 10 > "$TMP/every.out" 2>&1
check test_progress_log_every_10 test "$(grep -oE '^step +[0-9]+' "$TMP/every.out" | awk '{print $2}' | tr '\n' ' ')" = "10 15 20 30 "
expect progress_log_every_bad 2 "train: --log-every 'x' is not an integer" -- "$TMP/b/train" "${C[@]}" --log-every x
finish
