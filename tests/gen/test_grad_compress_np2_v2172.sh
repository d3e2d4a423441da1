#!/usr/bin/env bash
# v2172 gradient compression under mpirun -np 2 (tiny, the KJV): the bytes it sends and that it
# trains.
# - Bytes, exact (the coll layer's ring-model count per communicator, coll.h): a synchronous dp
#   step sends 2(p-1)/p x 4 B x N (the gradient arena of N floats) plus two 8-byte scalar
#   all-reduces (token count, loss): 4N + 16 B at p=2 in 3 collectives. top-k sends one all-gather
#   of k (index, value) pairs: (p-1) x k x (4 + 4) B = 8k + 16 B at p=2; random-k one all-reduce of
#   k values: 2(p-1)/p x 4k = 4k + 16 B; k = round(ratio x N); still 3 collectives. PowerSGD
#   rank r: one all-reduce of the P factors with the 1-D gradients, one of the Q factors:
#   4 (sum over matrices of r (rows + cols) + the 1-D floats) + 16 B at p=2, in 4 collectives
#   (the sum computed here from plan.json's parameter shapes).
# - top-k at ratio 1 (k = N, every entry sent, residual 0) is synchronous dp bit for bit: at p=2
#   each entry's sum is one fp32 addition of the two ranks' values, which is commutative, so the
#   all-gather's rank-order sum and the all-reduce give the same float (tolerance 0: the losses
#   and the weights after 4 steps compared exactly).
# - top-k at ratio 0.01 with error feedback trains: over 40 steps the median of the last 10 losses
#   falls below 0.8 x the first loss (ln 256 = 5.55 at the start; an untrained model stays there).
# - refusals: exit 2, one line, nothing written.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/optim_env.sh"
mpi2
kjv_corpus "$TMP/corpus.txt" 400000
"$GEN" data "$TMP/corpus.txt" -o "$TMP/data" >/dev/null
SHAPE=(--model tiny --target cpu --batch 4 --seq 64)
RUN=(--data "$TMP/data" --seq 32 --batch 2)
gen() { local out=$1; shift; "$GEN" specs/v2500.yaml "$@" "${SHAPE[@]}" -o "$TMP/$out" > "$TMP/$out.gen" 2>&1; }
gen sync --enable dp
gen topk1 --enable dp,v2172 --set v2172.ratio=1
gen topk --enable dp,v2172 --set v2172.ratio=0.01
gen randk --enable dp,v2172 --set v2172.method=randk --set v2172.ratio=0.01
gen power --enable dp,v2172 --set v2172.method=powersgd --set v2172.rank=4

pf=$(( $(tr -d ' \n\t' < "$TMP/sync/plan.json" | grep -oE '"param_bytes":[0-9]+' | cut -d: -f2) / 4 ))
N=$(( 2 * ( ( (pf + 1) / 2 + 15 ) / 16 * 16 ) ))
K=$(( (N + 50) / 100 )) # round(0.01 N)
echo "    parameters $pf floats, arena N = $N floats, k = round(0.01 N) = $K"
bytes_are() { [ "$(metric "$1" comm_bytes | sort -u)" = "$2" ] && [ "$(metric "$1" comm_calls | sort -u)" = "${3:-3}" ]; }

for v in sync topk1; do
  $MPI "$TMP/$v/train" "${RUN[@]}" --steps 4 --eval-every 0 --metrics "$TMP/$v.jsonl" --ckpt-dir "$TMP/$v.ck" > "$TMP/$v.log" 2>&1
done
check test_v2172_sync_dp_sends_4N_plus_16_bytes bytes_are "$TMP/sync.jsonl" $((4 * N + 16))
check test_v2172_topk_ratio1_sends_8N_plus_16_bytes bytes_are "$TMP/topk1.jsonl" $((8 * N + 16))
check test_v2172_topk_ratio1_losses_equal_sync_dp same_losses "$TMP/sync.jsonl" "$TMP/topk1.jsonl" 4
expect test_v2172_topk_ratio1_weights_equal_sync_dp 0 "max \|a-b\| = 0 " -- "$DIFF" "$TMP/sync.ck/step_00000004/model.safetensors" "$TMP/topk1.ck/step_00000004/model.safetensors" 0

expect test_v2172_topk_np2_40_steps 0 "top-k, $K of $N gradient entries \(ratio 0.01\).*error feedback" -- \
  $MPI "$TMP/topk/train" "${RUN[@]}" --steps 40 --eval-every 0 --metrics "$TMP/topk.jsonl"
check test_v2172_topk_sends_8k_plus_16_bytes bytes_are "$TMP/topk.jsonl" $((8 * K + 16))
first=$(first_metric "$TMP/topk.jsonl" loss)
med=$(losses "$TMP/topk.jsonl" | tail -10 | sort -g | awk '{ a[NR] = $1 } END { print (a[5] + a[6]) / 2 }')
echo "    top-k 0.01: first loss $first, median of the last 10 $med"
check test_v2172_topk_ratio001_loss_falls awk -v a="$first" -v m="$med" 'BEGIN { exit !(m < 0.8 * a) }'

expect test_v2172_randk_np2 0 "random-k, $K of $N gradient entries" -- \
  $MPI "$TMP/randk/train" "${RUN[@]}" --steps 3 --eval-every 0 --metrics "$TMP/randk.jsonl"
check test_v2172_randk_sends_4k_plus_16_bytes bytes_are "$TMP/randk.jsonl" $((4 * K + 16))

PF=$(python3 -c '
import json, sys
r = 4
n = 0
for q in json.load(open(sys.argv[1]))["params"]:
    s = q["shape"]; rows = s[0] if len(s) >= 2 else 0; cols = q["numel"] // rows if rows else 0
    n += r * (rows + cols) if rows >= r and cols >= r and rows * cols == q["numel"] else q["numel"]
print(n)' "$TMP/power/plan.json")
echo "    PowerSGD rank 4: $PF floats per step (of $N)"
expect test_v2172_powersgd_np2 0 "PowerSGD rank 4, .* matrices" -- \
  $MPI "$TMP/power/train" "${RUN[@]}" --steps 3 --eval-every 0 --metrics "$TMP/power.jsonl"
check test_v2172_powersgd_sends_4_factor_floats_plus_16_bytes bytes_are "$TMP/power.jsonl" $((4 * PF + 16)) 4

refuse test_v2172_refuses_fsdp "v2172.*(conflicts|reduce-scatter)" --enable dp,v2172,fsdp "${SHAPE[@]}"
refuse test_v2172_refuses_zero2 "v2172 gradient_compression: ZeRO stage 2-3 .* — use plain dp or zero1" --enable dp,v2172,zero2 "${SHAPE[@]}"
refuse test_v2172_refuses_tp "v2172 gradient_compression: .*tp.* — drop tp" --enable dp,v2172,tp "${SHAPE[@]}"
refuse test_v2172_refuses_local_sgd "v2172.*v2173|v2173.*v2172" --enable dp,v2172,v2173 "${SHAPE[@]}"
refuse test_v2172_refuses_sim "v2172 gradient_compression: the compressed exchange runs in the cpu trainer only" --enable dp,v2172 --model tiny --target sim
refuse test_v2172_refuses_bad_method "v2172.*method" --enable dp,v2172 --set v2172.method=signsgd "${SHAPE[@]}"
finish
