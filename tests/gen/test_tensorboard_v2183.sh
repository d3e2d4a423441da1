#!/usr/bin/env bash
# TensorBoard event files (v2183) from a real trainer: `train --tensorboard DIR` writes one file
# that parses back (CRCs, protobuf; tests/unit/test_tboard_v2183 --dump) with the losses of the
# metrics log; a trainer generated with v2183 writes into OUT/runs by default every `every` steps,
# `--tensorboard none` turns that off; a resumed run adds a second file starting with SessionLog
# START; the section is outside the checkpoint's state hash; under mpirun -np 2 only rank 0 writes. When the `tensorboard` Python package is importable,
# its EventAccumulator loads the directory too (skipped otherwise: CI needs no PyPI). ~10 s.
source "$(dirname "$0")/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
DUMP="$BUILD/tests/test_tboard_v2183"
kjv_corpus "$TMP/corpus.txt"
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SEL=adamw,clip,memory-planning,dp
expect gen_plain 0 "wrote" -- "$GEN" specs/v2500.yaml --enable $SEL --model tiny --target cpu --batch 4 --seq 32 -o "$TMP/t"
expect gen_v2183 0 "v2183 tensorboard is partial" -- "$GEN" specs/v2500.yaml --enable $SEL,tensorboard --set v2183.every=5 --model tiny --target cpu --batch 4 --seq 32 -o "$TMP/tb"
check test_v2183_plan_has_tensorboard_section grep -q '"tensorboard"' "$TMP/tb/plan.json"
check test_v2183_plain_plan_has_none bash -c "! grep -q '\"tensorboard\"' '$TMP/t/plan.json'"
C=(--data "$TMP/data" --steps 12 --eval-every 6 --sample 0)

# --tensorboard DIR on a trainer without v2183: every step; the losses of the metrics log
expect train_flag 0 "tensorboard: $TMP/ev/events.out.tfevents" -- "$TMP/t/train" "${C[@]}" --tensorboard "$TMP/ev" --metrics "$TMP/m.jsonl"
check test_no_default_dir_without_v2183 test ! -e "$TMP/t/runs"
F=$(ls "$TMP"/ev/events.out.tfevents.* 2>/dev/null)
check test_one_event_file test "$(echo "$F" | grep -c .)" = 1
"$DUMP" --dump "$F" > "$TMP/dump.txt"
check test_event_file_parses_back_crcs_valid test $? = 0
tb_loss() { awk -v t="$2" '$2 == t { print $1, $3 }' "$1"; }
check test_loss_every_step test "$(tb_loss "$TMP/dump.txt" train/loss | wc -l)" = 12
check test_all_scalars_present bash -c "for t in train/loss train/lr train/grad_norm perf/tokens_per_s perf/mfu memory/peak_rss_mib val/loss; do grep -q \" \$t \" '$TMP/dump.txt' || exit 1; done"
check test_val_loss_on_eval_steps test "$(tb_loss "$TMP/dump.txt" val/loss | cut -d' ' -f1 | tr '\n' ' ')" = "6 12 "
# float32 of the log's losses: the event file holds (float)loss, relative error <= 2^-24 = 6e-8;
# both the log and the dump print %.9g (<= 5e-9 each): bound 1e-7 relative. A loss of another step
# or the mean of another window differs by >= 1e-4.
check test_losses_equal_the_metrics_log bash -c "paste <(tb_loss() { awk '\$2 == \"train/loss\" { print \$3 }' \"\$1\"; }; tb_loss '$TMP/dump.txt') <(grep -o '\"loss\":[^,}]*' '$TMP/m.jsonl' | cut -d: -f2) | awk '{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 1e-7 * (\$2 < 0 ? -\$2 : \$2)) bad = 1 } END { exit bad || NR != 12 }'"

# the plan's default (v2183): OUT/runs, every 5 steps (and eval steps, and the last)
expect train_default 0 "tensorboard: $TMP/tb/runs/events.out.tfevents.* \(every 5 steps\)" -- "$TMP/tb/train" "${C[@]}"
"$DUMP" --dump "$TMP"/tb/runs/events.out.tfevents.* > "$TMP/dump2.txt"
check test_v2183_default_steps test "$(tb_loss "$TMP/dump2.txt" train/loss | cut -d' ' -f1 | tr '\n' ' ')" = "5 6 10 12 "
rm -rf "$TMP/tb/runs"
expect train_none 0 "done: 12 steps" -- "$TMP/tb/train" "${C[@]}" --tensorboard none
check test_tensorboard_none_writes_nothing test ! -e "$TMP/tb/runs"

# resume: a second file whose first event after file_version is SessionLog START at step 7
expect train_stop 0 "done: 6 steps" -- "$TMP/t/train" "${C[@]}" --tensorboard "$TMP/rs" --ckpt-dir "$TMP/ck" --stop-after 6
sleep 1
expect train_resume 0 "done: 6 steps" -- "$TMP/t/train" "${C[@]}" --tensorboard "$TMP/rs" --ckpt-dir "$TMP/ck" --resume
check test_resume_adds_a_file test "$(ls "$TMP"/rs/events.out.tfevents.* | wc -l)" = 2
R2=$(ls "$TMP"/rs/events.out.tfevents.* | sort | tail -1)
check test_resumed_file_starts_with_session_start test "$("$DUMP" --dump "$R2" | head -1)" = "7 START"

# the section is outside the checkpoint's state hash: the v2183 trainer resumes the plain one's checkpoint
expect resume_across_plans 0 "resumed from .*step_00000012 at step 12" -- "$TMP/tb/train" "${C[@]}" --ckpt-dir "$TMP/ck" --resume --steps 14 --tensorboard none

# mpirun -np 2: one file (rank 0)
MPI="mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS"
expect train_np2 0 "done: 12 steps" -- $MPI "$TMP/t/train" "${C[@]}" --batch 2 --tensorboard "$TMP/mp"
check test_np2_only_rank0_writes test "$(ls "$TMP"/mp/events.out.tfevents.* | wc -l)" = 1

# TensorBoard's own reader, where installed (offline fixture machines); skipped in CI
PY=${HYP_TB_PYTHON:-python3}
if "$PY" -c "import tensorboard" 2>/dev/null; then
  check test_event_accumulator_loads_our_losses "$PY" - "$TMP/ev" "$TMP/rs" <<'PYEOF'
import sys
from tensorboard.backend.event_processing import event_accumulator as ea
a = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0}); a.Reload()
assert [e.step for e in a.Scalars("train/loss")] == list(range(1, 13)), a.Scalars("train/loss")
assert [e.step for e in a.Scalars("val/loss")] == [6, 12]
b = ea.EventAccumulator(sys.argv[2], size_guidance={ea.SCALARS: 0}); b.Reload()
assert [e.step for e in b.Scalars("train/loss")] == list(range(1, 13)), b.Scalars("train/loss")
PYEOF
else
  echo "skip test_event_accumulator_loads_our_losses: the tensorboard package is not importable (HYP_TB_PYTHON)"
fi
finish
