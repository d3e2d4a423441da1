#!/usr/bin/env bash
# v2173 local SGD / DiLoCo under mpirun -np 2 (tiny, the KJV): what it communicates and that it
# trains.
# - Bytes, exact (the coll layer's ring-model count per communicator, coll.h): a synchronous dp
#   step sends 2(p-1)/p x 4 B x N (the gradient arena of N floats, shard x world) plus two 8-byte
#   scalar all-reduces (the token count, the loss): 4N + 16 B at p=2, in 3 collectives. With
#   sync_every=H a step sends only the 16 B of scalars in 2 collectives, and every H-th step also
#   the 4N B parameter delta (3 collectives): the bulk traffic is 1/H of the synchronous one.
# - DiLoCo (outer nesterov, lr 0.7, momentum 0.9, sync_every 8, AdamW inner) trains: over 40 steps
#   the median of the last 10 losses and the final validation loss fall below 0.65 x the first
#   loss (ln 256 = 5.55 at the start; the synchronous run ends near 3.0, an untrained model stays
#   at 5.5; the median because tiny at a constant LR has single-step spikes in every mode).
# - The outer Nesterov step with lr 1 and momentum 0 is plain averaging bit for bit (g = -(sum/W)
#   is exact, a - 1*g rounds once like a + sum/W), so the nesterov path's sign and scale are checked
#   exactly against the average path.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
mpi2
kjv_corpus "$TMP/corpus.txt" 400000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target cpu --batch 4 --seq 64)
RUN=(--data "$TMP/data" --seq 32 --batch 2)
gen() { local out=$1; shift; "$GEN" specs/v2500.yaml "$@" "${SHAPE[@]}" -o "$TMP/$out" > "$TMP/$out.gen" 2>&1; }
gen sync --enable dp
gen diloco --enable dp,v2173 --set v2173.sync_every=8 --set v2173.outer=nesterov
gen avg2 --enable dp,v2173 --set v2173.sync_every=2
gen nes2 --enable dp,v2173 --set v2173.sync_every=2 --set v2173.outer=nesterov --set v2173.outer_lr=1 --set v2173.outer_momentum=0

# N: the gradient arena (floats) of 2 ranks: the parameters padded to 2 shards of a multiple of 16
pf=$(( $(tr -d ' \n\t' < "$TMP/sync/plan.json" | grep -oE '"param_bytes":[0-9]+' | cut -d: -f2) / 4 ))
N=$(( 2 * ( ( (pf + 1) / 2 + 15 ) / 16 * 16 ) ))
G=$(( 4 * N ))
echo "    parameters $pf floats, arena $N floats: a gradient or delta all-reduce sends $G B per rank"
$MPI "$TMP/sync/train" "${RUN[@]}" --steps 2 --eval-every 0 --metrics "$TMP/sync.jsonl" > "$TMP/sync.log" 2>&1
check test_v2173_sync_dp_sends_4N_plus_16_bytes_per_step [ "$(metric "$TMP/sync.jsonl" comm_bytes | sort -u)" = "$((G + 16))" ]
check test_v2173_sync_dp_3_collectives_per_step [ "$(metric "$TMP/sync.jsonl" comm_calls | sort -u)" = 3 ]

expect test_v2173_diloco_np2_40_steps 0 "outer Nesterov \(DiLoCo\) lr 0.7 momentum 0.9" -- \
  $MPI "$TMP/diloco/train" "${RUN[@]}" --steps 40 --eval-every 40 --eval-batches 8 --metrics "$TMP/diloco.jsonl"
pattern() { # every step: 16 B / 2 collectives, every 8th also the delta: G + 16 B / 3
  paste <(metric "$1" step) <(metric "$1" comm_bytes) <(metric "$1" comm_calls) |
    awk -v G="$G" -v H=8 '{ n++; sync = $1 % H == 0; if ($2 != (sync ? G + 16 : 16) || $3 != (sync ? 3 : 2)) bad = 1; tot += $2 - 16 }
      END { printf "    DiLoCo H=8: bulk bytes per step %.1f = G/8 = %.1f\n", tot / n, G / H; exit bad || n != 40 || tot * H != G * n }'
}
check test_v2173_diloco_bytes_per_step_are_1_over_H_of_sync pattern "$TMP/diloco.jsonl"
first=$(first_metric "$TMP/diloco.jsonl" loss)
med=$(losses "$TMP/diloco.jsonl" | tail -10 | sort -g | awk '{ a[NR] = $1 } END { print (a[5] + a[6]) / 2 }')
val=$(metric "$TMP/diloco.jsonl" val_loss | grep -v null | tail -1)
echo "    DiLoCo: first loss $first, median of the last 10 $med, validation at step 40 $val"
check test_v2173_diloco_loss_falls awk -v a="$first" -v m="$med" -v v="$val" 'BEGIN { exit !(m < 0.65 * a && v > 0 && v < 0.65 * a) }'

# nesterov with lr 1, momentum 0 == average, bit for bit (losses and weights after 2 synchronizations)
for v in avg2 nes2; do
  $MPI "$TMP/$v/train" "${RUN[@]}" --steps 4 --eval-every 0 --metrics "$TMP/$v.jsonl" --ckpt-dir "$TMP/$v.ck" > "$TMP/$v.log" 2>&1
done
check test_v2173_nesterov_lr1_mom0_losses_equal_average same_losses "$TMP/avg2.jsonl" "$TMP/nes2.jsonl" 4
expect test_v2173_nesterov_lr1_mom0_weights_equal_average 0 "max \|a-b\| = 0 " -- "$DIFF" "$TMP/avg2.ck/step_00000004/model.safetensors" "$TMP/nes2.ck/step_00000004/model.safetensors" 0
finish
