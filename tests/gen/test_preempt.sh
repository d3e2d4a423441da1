#!/usr/bin/env bash
# Preemption (v2177): SIGTERM, SIGINT and SIGUSR1 stop a trainer after the step in flight with a
# checkpoint and exit status 3 (4 without --ckpt-dir: nothing saved); --resume then gives the
# losses of an uninterrupted run bit for bit. Under mpirun -np 2 a signal to ONE rank stops both
# after the same step (an all-reduce of the flag) with a complete sharded checkpoint. --deadline
# stops before the time budget, the same way. A trainer generated with v2177 (plan.preempt)
# refuses to start without --ckpt-dir and reports the time from the notice to the saved checkpoint.
# SIGTERMs at random moments, each run resumed (np=1 and np=2), end with the straight run's losses.
# Tiny model, B=16 x T=64 on one thread: ~65 ms a step, so a signal lands mid-run. 30 steps: every
# signal is sent at step 5 (or 0.05-0.7 s after a start), so >= 20 steps are left to stop in and
# to compare bit for bit after the resume; each of the ~11 runs to the end costs 30 steps, not 60.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
STEPS=${HYP_PREEMPT_STEPS:-30}
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SEL=adamw,clip,memory-planning,dp,zero1
expect gen_baseline 0 "wrote" -- "$GEN" specs/v2500.yaml --enable $SEL --model tiny --target cpu --batch 16 --seq 64 -o "$TMP/t"
expect gen_v2177 0 "v2177 spot_instance is partial" -- "$GEN" specs/v2500.yaml --enable $SEL,preempt --model tiny --target cpu --batch 16 --seq 64 -o "$TMP/tp"
check test_v2177_plan_has_preempt_section grep -q '"preempt"' "$TMP/tp/plan.json"
check test_v2177_baseline_plan_has_none bash -c "! grep -q '\"preempt\"' '$TMP/t/plan.json'"
C=(--data "$TMP/data" --seq 64 --steps $STEPS --eval-every 0)

wait_step() { # wait_step METRICS K: until the metrics log shows step K (at most 30 s)
  for _ in $(seq 3000); do grep -q "\"step\":$2," "$1" 2>/dev/null && return 0; sleep 0.01; done
  return 1
}
stopped_at() { grep -oE "after step [0-9]+" "$1" | grep -oE "[0-9]+$" | head -1; }
same_losses() { test "$(losses "$1")" = "$(losses "$2")" && test "$(losses "$1" | wc -l)" = $STEPS; }

# the uninterrupted references: one process with B=16, two ranks with B=8 each
expect straight_np1 0 "done: $STEPS steps" -- "$TMP/t/train" "${C[@]}" --batch 16 --metrics "$TMP/straight1.jsonl"
MPI="mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS"
expect straight_np2 0 "done: $STEPS steps" -- $MPI "$TMP/t/train" "${C[@]}" --batch 8 --metrics "$TMP/straight2.jsonl"

# interrupt NAME SIGNAL TRAINER [flags]: starts a run, sends SIGNAL once the metrics show step 5,
# leaves the exit status in $RC and the output in $TMP/NAME.out
interrupt() {
  local name=$1 sig=$2 trainer=$3; shift 3
  "$trainer" "${C[@]}" --batch 16 --metrics "$TMP/$name.jsonl" "$@" > "$TMP/$name.out" 2>&1 &
  local pid=$!
  wait_step "$TMP/$name.jsonl" 5
  if [ "$sig" = INT2 ]; then kill -INT $pid; sleep 0.02; kill -INT $pid; else kill -"$sig" $pid; fi
  wait $pid
  RC=$?
}

# single process: SIGTERM, SIGINT, then SIGUSR1 through a v2177 trainer
for sig in TERM INT; do
  interrupt "np1_$sig" $sig "$TMP/t/train" --ckpt-dir "$TMP/ck_$sig"
  s=$(stopped_at "$TMP/np1_$sig.out")
  echo "SIG$sig: exit $RC, stopped after step ${s:-?} of $STEPS"
  check "test_v2177_sig${sig}_exit_status_3" test "$RC" = 3
  check "test_v2177_sig${sig}_says_stopped" grep -q "stopped by SIG$sig after step $s" "$TMP/np1_$sig.out"
  check "test_v2177_sig${sig}_stopped_mid_run" test "${s:-0}" -ge 5 -a "${s:-99}" -lt $STEPS
  check "test_v2177_sig${sig}_checkpoint_at_that_step" test "$(cat "$TMP/ck_$sig/latest" 2>/dev/null)" = "$(printf 'step_%08d' "${s:-0}")"
  check "test_v2177_sig${sig}_metrics_end_at_that_step" test "$(last_metric "$TMP/np1_$sig.jsonl" step)" = "$s"
  expect "resume_after_sig$sig" 0 "resumed from .* at step $s" -- "$TMP/t/train" "${C[@]}" --batch 16 --metrics "$TMP/np1_$sig.jsonl" --ckpt-dir "$TMP/ck_$sig" --resume
  check "test_v2177_sig${sig}_resume_equals_straight_run_bit_for_bit" same_losses "$TMP/np1_$sig.jsonl" "$TMP/straight1.jsonl"
done

# a second SIGINT right after the first (during the step or the save) is ignored: the checkpoint
# is complete and resumes exactly
interrupt np1_twice INT2 "$TMP/t/train" --ckpt-dir "$TMP/ck_twice"
check test_v2177_second_signal_exit_status_3 test "$RC" = 3
check test_v2177_second_signal_ignored grep -q "later signals were ignored" "$TMP/np1_twice.out"
expect resume_after_two_signals 0 "resumed from" -- "$TMP/t/train" "${C[@]}" --batch 16 --metrics "$TMP/np1_twice.jsonl" --ckpt-dir "$TMP/ck_twice" --resume
check test_v2177_second_signal_resume_bit_exact same_losses "$TMP/np1_twice.jsonl" "$TMP/straight1.jsonl"

# SIGTERMs at random moments (0.05-0.35 s after each start, np=2: 0.4-0.7 s: in setup, mid-step,
# in a save; one during setup stops after the first step), each run resumed until one completes: the losses equal the uninterrupted run's bit for bit, whatever
# step each stop landed on. HYP_PREEMPT_ROUNDS signals (default 3; the issue's measure is 20, with
# HYP_PREEMPT_STEPS=150). chain NAME NP: NP=2 signals one rank chosen at random.
chain() {
  local name=$1 np=$2 rounds=${HYP_PREEMPT_ROUNDS:-3} sent=0 codes="" i pid rc=1 target
  local run=("$TMP/t/train") b=16
  [ "$np" = 2 ] && run=($MPI "$TMP/t/train") && b=8
  rm -f "$TMP/$name.jsonl"
  for i in $(seq 200); do
    "${run[@]}" "${C[@]}" --batch $b --metrics "$TMP/$name.jsonl" --ckpt-dir "$TMP/ck_$name" --resume > "$TMP/$name.out" 2>&1 &
    pid=$!
    if [ $sent -lt "$rounds" ]; then
      sleep "$(awk -v r=$RANDOM -v np=$np 'BEGIN { printf "%.2f", (np > 1 ? 0.4 : 0.05) + 0.3 * r / 32768 }')"
      target=$pid
      [ "$np" = 2 ] && target=$(pgrep -f "^$TMP/t/train" | shuf -n 1)
      [ -n "$target" ] && kill -TERM $target 2>/dev/null && sent=$((sent + 1))
    fi
    wait $pid
    rc=$?
    codes="$codes $rc@$(sed 's/step_0*//' "$TMP/ck_$name/latest" 2>/dev/null)"
    [ $rc = 0 ] || [ $rc = 2 ] && break # 3: stopped (143: killed before main installed the handler)
  done
  echo "$name: $sent SIGTERMs; exit@checkpoint step per run:$codes"
  check "test_v2177_${name}_random_sigterms_chain_completes" test "$rc" = 0
  check "test_v2177_${name}_random_sigterms_resume_bit_exact" same_losses "$TMP/$name.jsonl" "$TMP/straight$np.jsonl"
}
chain chain_np1 1
chain chain_np2 2

# without --ckpt-dir a baseline trainer still stops cleanly, says nothing was saved, exits 4
interrupt np1_nockpt TERM "$TMP/t/train"
check test_v2177_no_ckpt_dir_exit_status_4 test "$RC" = 4
check test_v2177_no_ckpt_dir_says_nothing_saved grep -q "nothing was saved" "$TMP/np1_nockpt.out"

# the v2177 trainer: refuses to start without --ckpt-dir; SIGUSR1 stops it within grace_seconds;
# its checkpoint resumes in the baseline trainer (plan.preempt is outside the state hash)
expect test_v2177_refuses_without_ckpt_dir 2 "preemptible machines .* needs --ckpt-dir" -- "$TMP/tp/train" "${C[@]}" --batch 16
interrupt np1_usr1 USR1 "$TMP/tp/train" --ckpt-dir "$TMP/ck_usr1"
check test_v2177_sigusr1_exit_status_3 test "$RC" = 3
check test_v2177_reports_within_grace grep -qE "SIGUSR1 received [0-9.]+ s ago.*within the plan's grace_seconds 30" "$TMP/np1_usr1.out"
expect resume_v2177_checkpoint_in_baseline 0 "resumed from" -- "$TMP/t/train" "${C[@]}" --batch 16 --metrics "$TMP/np1_usr1.jsonl" --ckpt-dir "$TMP/ck_usr1" --resume
check test_v2177_sigusr1_resume_bit_exact same_losses "$TMP/np1_usr1.jsonl" "$TMP/straight1.jsonl"

# mpirun -np 2: SIGTERM to one rank's process only; both ranks stop after the same step (the
# sharded checkpoint, committed by rank 0 only after every rank wrote its shard, is complete)
$MPI "$TMP/t/train" "${C[@]}" --batch 8 --metrics "$TMP/np2.jsonl" --ckpt-dir "$TMP/ck_np2" > "$TMP/np2.out" 2>&1 &
mpid=$!
wait_step "$TMP/np2.jsonl" 5
ranks=$(pgrep -f "^$TMP/t/train")
echo "rank pids: $(echo $ranks)"
kill -TERM $(echo "$ranks" | tail -1)
wait $mpid
RC=$?
s=$(stopped_at "$TMP/np2.out")
echo "np=2 SIGTERM to pid $(echo "$ranks" | tail -1): exit $RC, stopped after step ${s:-?}"
check test_v2177_np2_two_rank_processes test "$(echo "$ranks" | wc -l)" = 2
check test_v2177_np2_exit_status_3 test "$RC" = 3
check test_v2177_np2_checkpoint_at_that_step test "$(cat "$TMP/ck_np2/latest" 2>/dev/null)" = "$(printf 'step_%08d' "${s:-0}")"
d="$TMP/ck_np2/$(printf 'step_%08d' "${s:-0}")"
check test_v2177_np2_shard_checkpoint_complete test -s "$d/shard_00000.safetensors" -a -s "$d/shard_00001.safetensors" -a -s "$d/state.json"
expect resume_np2 0 "resumed from .* at step $s" -- $MPI "$TMP/t/train" "${C[@]}" --batch 8 --metrics "$TMP/np2.jsonl" --ckpt-dir "$TMP/ck_np2" --resume
check test_v2177_np2_resume_equals_straight_run_bit_for_bit same_losses "$TMP/np2.jsonl" "$TMP/straight2.jsonl"

# SIGUSR1 to mpirun itself: Open MPI forwards it to every rank (SIGTERM it does not forward)
$MPI "$TMP/t/train" "${C[@]}" --batch 8 --metrics "$TMP/np2u.jsonl" --ckpt-dir "$TMP/ck_np2u" > "$TMP/np2u.out" 2>&1 &
mpid=$!
wait_step "$TMP/np2u.jsonl" 5
kill -USR1 $mpid
wait $mpid
RC=$?
s=$(stopped_at "$TMP/np2u.out")
check test_v2177_np2_sigusr1_to_mpirun_exit_status_3 test "$RC" = 3
check test_v2177_np2_sigusr1_to_mpirun_checkpoint_complete test -s "$TMP/ck_np2u/$(printf 'step_%08d' "${s:-0}")/shard_00001.safetensors"

# --deadline: a budget of 0.5 s (the whole run needs ~2 s here, >= 0.9 s on a fast machine) stops
# before it with a checkpoint (at the earliest after step 1: the check is after each step)
t0=$(date +%s.%N)
"$TMP/t/train" "${C[@]}" --batch 16 --metrics "$TMP/dl.jsonl" --ckpt-dir "$TMP/ck_dl" --deadline 0.5 > "$TMP/dl.out" 2>&1
RC=$?
el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
s=$(stopped_at "$TMP/dl.out")
echo "--deadline 0.5: exit $RC after $el s (process start to exit), stopped after step ${s:-?}"
check test_v2177_deadline_exit_status_3 test "$RC" = 3
check test_v2177_deadline_says_why grep -q "stopped by --deadline" "$TMP/dl.out"
# the stop came before the run's end (its wall time from process start is reported above, not
# bounded: on a loaded CI machine start-up alone took 5 s; the deadline arithmetic — a step plus a
# checkpoint must fit in what is left — is checked with a fake clock in tests/unit/test_stop_flag.c)
check test_v2177_deadline_stops_before_the_last_step test "${s:-0}" -ge 1 -a "${s:-0}" -lt "$STEPS"
check test_v2177_deadline_checkpoint_at_that_step test "$(cat "$TMP/ck_dl/latest" 2>/dev/null)" = "$(printf 'step_%08d' "${s:-0}")"
expect resume_after_deadline 0 "resumed from" -- "$TMP/t/train" "${C[@]}" --batch 16 --metrics "$TMP/dl.jsonl" --ckpt-dir "$TMP/ck_dl" --resume
check test_v2177_deadline_resume_bit_exact same_losses "$TMP/dl.jsonl" "$TMP/straight1.jsonl"
expect test_v2177_deadline_needs_ckpt_dir 2 "need --ckpt-dir" -- "$TMP/t/train" "${C[@]}" --deadline 5
finish
