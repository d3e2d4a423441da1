#!/usr/bin/env bash
# test_continual_v2192.sh — v2192 continual pre-training end to end on the cpu (docs/post-training.md
# "Continual pre-training"): a tiny model pretrained on corpus A (KJV Genesis–Leviticus, Debian
# bible-kjv, a document every 8 verses) is continued on corpus B (Debian fortunes + computers,
# --doc-sep %) for the same number of steps without replay and with 25 % (of bytes) of A replayed
# through gen data's mixing stage (--enable mixing,continual). Held-out documents of each corpus
# (the last 10 %) are never trained on. Measures and checks:
#   - the continued run starts from the pretrained weights: its first loss (a B batch) is within
#     0.5 of the pretrained model's B validation loss and far below ln 256 (random weights);
#   - re-warmup: the LR of step 1 is peak / rewarm_steps and reaches the peak at rewarm_steps (the
#     schedule restarts at step 0), whatever step the checkpoint was at;
#   - the optimizer is fresh: after one constant-lr step, > 90 % of the parameters moved by lr
#     within 2 % (Adam's first step; the checkpoint's own moments give 0 %);
#   - replay forgets less: A's validation loss after the replay run is at least 0.05 below the run
#     without replay (measured here: 2.02 vs 2.16, pretrained 1.93); B's loss for both is printed;
#   - the mixing report gives the replayed corpus a byte share within 0.05 of 0.25;
#   - refusals (one line, exit 2, nothing written): no mixing, no replay_data, a missing file;
#     augmentation too (both take mixing's last share); --init-from a checkpoint of another model
#     (tiny-llama trainer, tiny checkpoint).
source "$(dirname "$0")/lib.sh"
# one thread: on this shared 2-core machine OpenMP's spinning made 100 steps take 6.9 s on two
# threads and 0.5 s on one
export OMP_NUM_THREADS=1
T="$ROOT/specs/v2500.yaml"
command -v bible >/dev/null || { echo "FAIL: bible missing — run scripts/install-deps.sh (Debian package bible-kjv)"; exit 1; }
FORT=/usr/share/games/fortunes
[ -s "$FORT/fortunes" ] || { echo "FAIL: $FORT/fortunes missing — run scripts/install-deps.sh (Debian package fortunes)"; exit 1; }
bible -f 'Gen1:1-Lev27:34' | sed -E 's/^[0-9A-Za-z]+[0-9]+:[0-9]+ //' | awk 'NR > 1 && NR % 8 == 1 { print "%" } { print }' > "$TMP/A.txt"
cat "$FORT/fortunes" "$FORT/computers" > "$TMP/B.txt"
# the first 90 % of a %-separated file's documents to X_tr.txt, the rest to X_va.txt
split_docs() {
  local n; n=$(awk -v RS='\n%\n' 'END { print NR }' "$1.txt")
  awk -v RS='\n%\n' -v ORS='\n%\n' -v n="$n" -v tr="$1_tr.txt" -v va="$1_va.txt" '{ if (NR <= int(n * 0.9)) print > tr; else print > va }' "$1.txt"
}
(cd "$TMP" && split_docs A && split_docs B)
check "v2192_corpora_split" test -s "$TMP/A_tr.txt" -a -s "$TMP/A_va.txt" -a -s "$TMP/B_tr.txt" -a -s "$TMP/B_va.txt"
for x in A B; do
  "$GEN" data "$TMP/${x}_tr.txt" --doc-sep % --val-fraction 0 -o "$TMP/d$x" >/dev/null
  "$GEN" data "$TMP/${x}_va.txt" --doc-sep % --val-fraction 0.5 -o "$TMP/e$x" >/dev/null # val = held-out docs
done
expect "v2192_gen_data_replay" 0 "mixing +v2121" -- "$GEN" data "$TMP/B_tr.txt" --doc-sep % --val-fraction 0 --enable mixing,continual \
  --set mixing.unit=bytes --set continual.replay_data="$TMP/A_tr.txt" --set continual.replay_fraction=0.25 -o "$TMP/dR"
share=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["stages"][0]["sources"][1]["byte_share"])' "$TMP/dR/report.json")
check "v2192_replay_byte_share ($share, target 0.25)" awk -v s="$share" 'BEGIN { exit !(s > 0.20 && s < 0.30) }'

# refusals: one line, exit 2, no output directory
expect "v2192_refuses_without_mixing" 2 "needs the mixing stage" -- "$GEN" data "$TMP/B_tr.txt" --enable continual --set continual.replay_data="$TMP/A_tr.txt" -o "$TMP/x1"
expect "v2192_refuses_without_replay_data" 2 "replay_data is empty" -- "$GEN" data "$TMP/B_tr.txt" --enable mixing,continual -o "$TMP/x2"
expect "v2192_refuses_missing_replay_file" 2 "not a readable file" -- "$GEN" data "$TMP/B_tr.txt" --enable mixing,continual --set continual.replay_data="$TMP/nope.txt" -o "$TMP/x3"
check "v2192_refusals_write_nothing" test ! -e "$TMP/x1" -a ! -e "$TMP/x2" -a ! -e "$TMP/x3"

# pretrain on A, then continue on B with and without replay at equal steps
expect "v2192_gen_pretrain" 0 "wrote" -- "$GEN" "$T" --enable adamw,warmup,cosine,clip --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/tp"
expect "v2192_gen_continual" 0 "wrote" -- "$GEN" "$T" --enable adamw,cosine,clip,continual --set continual.rewarm_steps=20 --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/tc"
check "v2192_plan_rewarm_steps" grep -Eq '"warmup_steps":[[:space:]]*20,' "$TMP/tc/plan.json"
"$TMP/tp/train" --data "$TMP/dA" --steps 400 --lr 3e-3 --ckpt-dir "$TMP/ckA" --sample 0 --eval-every 0 > "$TMP/pre.log" 2>&1
PRE="$TMP/ckA/step_00000400"
check "v2192_pretrained" test -s "$PRE/model.safetensors"
expect "v2192_refuses_with_augmentation" 2 "already takes the last mixing share" -- "$GEN" data "$TMP/B_tr.txt" --enable mixing,augmentation,continual \
  --set augmentation.trainer="$TMP/tp" --set augmentation.ckpt="$TMP/ckA" --set continual.replay_data="$TMP/A_tr.txt" -o "$TMP/x4"
check "v2192_refusal_with_augmentation_writes_nothing" test ! -e "$TMP/x4"
ev() { # ev DATA CKPT: validation loss of those weights on DATA's val split (one step at lr 0)
  "$TMP/tc/train" --data "$1" --init-from "$2" --steps 1 --lr 0 --eval-every 1 --eval-batches 16 --sample 0 2>&1 | sed -n 's/.*| val \([0-9.]*\).*/\1/p'
}
preA=$(ev "$TMP/eA" "$PRE"); preB=$(ev "$TMP/eB" "$PRE")
for d in B R; do
  expect "v2192_continue_on_d$d" 0 "initial weights: .*optimizer and schedule fresh" -- "$TMP/tc/train" --data "$TMP/d$d" --init-from "$PRE" \
    --steps 200 --lr 3e-3 --ckpt-dir "$TMP/ck$d" --sample 0 --eval-every 0 --metrics "$TMP/c$d.jsonl"
done
aB=$(ev "$TMP/eA" "$TMP/ckB/step_00000200"); bB=$(ev "$TMP/eB" "$TMP/ckB/step_00000200")
aR=$(ev "$TMP/eA" "$TMP/ckR/step_00000200"); bR=$(ev "$TMP/eB" "$TMP/ckR/step_00000200")
echo "    v2192: val loss        A (old)   B (new)"
echo "    pretrained on A        $preA    $preB"
echo "    continued, no replay   $aB    $bB"
echo "    continued, replay 0.25 $aR    $bR"
first=$(first_metric "$TMP/cB.jsonl" loss)
check "v2192_starts_from_pretrained_weights (first loss $first, pretrained on B $preB, ln 256 = 5.545)" \
  awk -v f="$first" -v p="$preB" 'BEGIN { d = f - p; if (d < 0) d = -d; exit !(p != "" && d < 0.5 && f < 4.5) }'
lr1=$(first_metric "$TMP/cB.jsonl" lr); lr20=$(metric "$TMP/cB.jsonl" lr | sed -n 20p)
check "v2192_rewarms_from_step_0 (lr step 1 $lr1, step 20 $lr20)" \
  awk -v a="$lr1" -v b="$lr20" 'BEGIN { exit !(a > 0.99 * 1.5e-4 && a < 1.01 * 1.5e-4 && b > 0.99 * 3e-3 && b < 1.01 * 3e-3) }'
check "v2192_replay_forgets_less (A: replay $aR vs no replay $aB, margin 0.05)" \
  awk -v r="$aR" -v n="$aB" 'BEGIN { exit !(r != "" && n != "" && r < n - 0.05) }'
# optimizer fresh: one step at a constant lr from the checkpoint; with fresh Adam moments every
# parameter with a gradient moves by lr * |m^/sqrt(v^)| = lr (bias-corrected step 1), while the
# checkpoint's moments (a --resume of the same checkpoint) move none of them by exactly lr (measured: 0.942 vs 0)
expect "v2192_gen_constant_lr" 0 "wrote" -- "$GEN" "$T" --enable adamw,continual --set continual.rewarm_steps=0 --model tiny --target cpu --batch 8 --seq 64 -o "$TMP/t0"
"$TMP/t0/train" --data "$TMP/dB" --init-from "$PRE" --steps 1 --lr 1e-3 --ckpt-dir "$TMP/ck1" --sample 0 --eval-every 0 >/dev/null 2>&1
unit=$(python3 - "$PRE/model.safetensors" "$TMP/ck1/step_00000001/model.safetensors" 1e-3 <<'PY'
# share of parameters whose update |dw| / lr is within 2 % of 1
import json, struct, sys
from array import array
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k != '__metadata__' and v['dtype'] == 'F32':
            s, e = v['data_offsets']; a = array('f'); a.frombytes(b[8 + n + s:8 + n + e]); out[k] = a
    return out
a, b, lr = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
tot = hit = 0
for k in a:
    for x, y in zip(a[k], b[k]):
        tot += 1; hit += abs(abs(y - x) / lr - 1) < 0.02
print('%.4f' % (hit / tot))
PY
)
check "v2192_optimizer_fresh (share of parameters moved by exactly lr: $unit)" awk -v u="$unit" 'BEGIN { exit !(u > 0.9) }'
# the weights of another model are refused before training: one line, exit 2
"$GEN" "$T" --enable adamw,continual --model tiny-llama --target cpu --batch 8 --seq 64 -o "$TMP/tl" >/dev/null 2>&1
expect "v2192_refuses_checkpoint_of_another_model" 2 "tensor .* is missing .*different model" -- "$TMP/tl/train" --data "$TMP/dB" --init-from "$PRE" --steps 1 --sample 0
check "v2192_both_learn_B (B: pretrained $preB, no replay $bB, replay $bR)" \
  awk -v p="$preB" -v n="$bB" -v r="$bR" 'BEGIN { exit !(n < p - 0.3 && r < p - 0.3) }'
finish
