#!/usr/bin/env bash
# v2155 `gen lottery`: iterative magnitude pruning with rewinding over runs of a tiny cpu trainer
# (2 rounds after the dense one, rate 0.5, rewind to step 3 of 30):
# - each round's starting model is the rewind point's weights under the mask, exactly: the
#   surviving weights equal the step-3 export bit for bit, every prunable matrix loses
#   floor(0.5 * remaining) more weights (sparsity 0.5, then 0.75), and the pruned ones are the
#   smallest |w| of the previous round's final weights;
# - the mask is held through each round (its final zeros are its initial zeros) and only grows;
# - --control: the last round's mask on a fresh initialization (seed + 1), held through its run;
# - lottery.json and the table; bad input refused with exit 2.
source "$(dirname "$0")/lib.sh" "$1"
export OMP_NUM_THREADS=1
T=specs/v2500.yaml
kjv_corpus "$TMP/corpus.txt"
expect data 0 "" -- "$GEN" data "$TMP/corpus.txt" -o "$TMP/data"
COMMON=(--model tiny --target cpu --batch 4 --seq 32)
expect gen_lottery_trainer 0 "wrote" -- "$GEN" "$T" --enable adamw,lottery-ticket "${COMMON[@]}" -o "$TMP/t"
ARGS=(--data "$TMP/data" --steps 30 --sample 0 --eval-every 10)
expect lottery 0 "     2     0.7500" -- "$GEN" lottery "$TMP/t" -o "$TMP/L" --rounds 2 --rate 0.5 --rewind 3 --control -- "${ARGS[@]}"
"$GEN" export "$TMP/L/round_2/ckpt/step_00000030" -o "$TMP/L/round_2/final_hf" >/dev/null 2>&1
"$GEN" export "$TMP/L/round_control/ckpt/step_00000030" -o "$TMP/L/round_control/final_hf" >/dev/null 2>&1
check test_v2155_rounds_rewound_masked_held python3 - "$TMP/L" <<'PY'
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; hdr = json.loads(b[8:8 + n]); out = {}
    for k, v in hdr.items():
        if k == "__metadata__" or v["dtype"] != "F32" or len(v["shape"]) != 2 or not (".h." in k or "model.layers." in k): continue
        s, e = v["data_offsets"]; out[k] = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
    return out
L = sys.argv[1]
rew = tensors(f"{L}/rewind_hf/model.safetensors")
ok = len(rew) > 0
prev_zero = {k: set() for k in rew}
for r in (1, 2):
    init = tensors(f"{L}/init_{r}/model.safetensors")
    prev_final = tensors(f"{L}/round_{r - 1}/final_hf/model.safetensors")
    final = tensors(f"{L}/round_{r}/final_hf/model.safetensors")
    for k, w in init.items():
        z = {i for i, x in enumerate(w) if x == 0.0}
        n = len(w); want = len(prev_zero[k]) + int((n - len(prev_zero[k])) * 0.5)
        surv_equal = all(w[i] == rew[k][i] for i in range(n) if i not in z)
        kept = [abs(prev_final[k][i]) for i in range(n) if i not in z]
        pruned = [abs(prev_final[k][i]) for i in z]
        smallest = not kept or not pruned or max(pruned) <= min(kept)
        fz = {i for i, x in enumerate(final[k]) if x == 0.0}
        if not (len(z) == want and surv_equal and smallest and prev_zero[k] <= z and fz == z):
            ok = False; print(f"    round {r} {k}: zeros {len(z)} want {want} survivors equal {surv_equal} smallest {smallest} held {fz == z}")
        prev_zero[k] = z
    tot = sum(len(v) for v in init.values()); zs = sum(len(v) for v in prev_zero.values())
    print(f"    round {r}: {zs} of {tot} prunable weights zero ({zs / tot:.4f})")
res = json.load(open(f"{L}/lottery.json"))
ok = ok and [round(x["sparsity"], 4) for x in res["rounds"]] == [0.0, 0.5, 0.75]
# the control (--control): round 2's mask exactly, on another draw of the initialization (no
# surviving weight equals its rewind value), the mask held through its run
ctl = tensors(f"{L}/init_control/model.safetensors")
fin = tensors(f"{L}/round_control/final_hf/model.safetensors")
i2 = tensors(f"{L}/init_2/model.safetensors")
for k, w in ctl.items():
    z = {i for i, x in enumerate(w) if x == 0.0}
    z2 = {i for i, x in enumerate(i2[k]) if x == 0.0}
    same = sum(1 for i in range(len(w)) if i not in z and w[i] == rew[k][i])
    fz = {i for i, x in enumerate(fin[k]) if x == 0.0}
    if not (z == z2 and same == 0 and fz == z):
        ok = False; print(f"    control {k}: mask equal {z == z2}, survivors equal to rewind {same}, held {fz == z}")
ok = ok and round(res["control"]["sparsity"], 4) == 0.75 and res["control"]["val_loss"] > 0
print(f"    val loss: round 2 (ticket) {res['rounds'][2]['val_loss']:.4f}, control {res['control']['val_loss']:.4f}")
sys.exit(0 if ok else 1)
PY

# bad input
expect gen_plain 0 "wrote" -- "$GEN" "$T" --enable adamw "${COMMON[@]}" -o "$TMP/plain"
expect refuse_plain_trainer 2 "not generated for the lottery ticket" -- "$GEN" lottery "$TMP/plain" -o "$TMP/x1" -- "${ARGS[@]}"
expect refuse_no_steps 2 "must give --steps" -- "$GEN" lottery "$TMP/t" -o "$TMP/x2" -- --data "$TMP/data"
expect refuse_rewind 2 "--rewind '30' is not an integer in \[1, 29\]" -- "$GEN" lottery "$TMP/t" -o "$TMP/x3" --rewind 30 -- "${ARGS[@]}"
expect refuse_existing 2 "already exists" -- "$GEN" lottery "$TMP/t" -o "$TMP/L" -- "${ARGS[@]}"
expect refuse_ckpt_dir 2 "gen lottery sets --ckpt-dir itself" -- "$GEN" lottery "$TMP/t" -o "$TMP/x4" -- "${ARGS[@]}" --ckpt-dir x
expect refuse_with_gradual 2 "conflicts" -- "$GEN" "$T" --enable adamw,lottery-ticket,gradual-pruning "${COMMON[@]}" -o "$TMP/x5"
check no_partial_output test ! -e "$TMP/x1" -a ! -e "$TMP/x2" -a ! -e "$TMP/x3" -a ! -e "$TMP/x4" -a ! -e "$TMP/x5"
echo "lottery: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
