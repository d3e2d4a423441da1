#!/usr/bin/env bash
# v2154 pruning masks and v2156 gradual magnitude pruning on the cpu trainer (runtime/train/prune.c):
# - the sparsity at every mask update is exactly the cubic schedule's, per matrix floor(s * numel)
#   weights (computed here from plan.json's matrices and the formula);
# - masked weights stay exactly zero: the zero sets of checkpoints at steps 18, 20 (no update
#   between) are equal and grow monotonically across updates (18 ⊆ 25 ⊆ 60); at the end every
#   prunable matrix holds exactly floor(0.5 * numel) zeros;
# - a run stopped at step 30 and resumed (masks from the checkpoint's zeros) equals the straight run
#   bit for bit; `gen export` writes the zeros (the exported model is what was measured);
# - pattern 2:4: every group of 4 consecutive weights of every prunable row has exactly 2 zeros;
# - refused at generation: a device target, ZeRO, an end before the start.
source "$(dirname "$0")/lib.sh" "$1"
export OMP_NUM_THREADS=1
T=specs/v2500.yaml
kjv_corpus "$TMP/corpus.txt"
expect data 0 "" -- "$GEN" data "$TMP/corpus.txt" -o "$TMP/data"
RUN=(--data "$TMP/data" --steps 60 --sample 0 --eval-every 0)
COMMON=(--model tiny --target cpu --batch 4 --seq 32)
expect gen_dense 0 "wrote" -- "$GEN" "$T" --enable adamw "${COMMON[@]}" -o "$TMP/dense"
expect gen_gradual 0 "wrote" -- "$GEN" "$T" --enable adamw,gradual-pruning --set v2156.update_every=5 "${COMMON[@]}" -o "$TMP/g"
expect audit_says 0 "pruning schedule: sparsity grows" -- "$GEN" audit "$TMP/g"
expect train_dense 0 "done: 60 steps" -- "$TMP/dense/train" "${RUN[@]}" --metrics "$TMP/dense.jsonl"
expect train_gradual 0 "pruning at step 48: sparsity 0.5000" -- "$TMP/g/train" "${RUN[@]}" --metrics "$TMP/g.jsonl" --ckpt-dir "$TMP/ck" --ckpt-every 1 --keep 100

# the schedule, exactly
check test_v2156_sparsity_follows_cubic_schedule python3 - "$TMP/g/plan.json" "$TMP/g.jsonl" <<'EOF'
import json, math, sys
plan = json.load(open(sys.argv[1]))
mats = [p for p in plan["params"] if len(p["shape"]) == 2 and (".h." in p["name"] or "model.layers." in p["name"])]
sizes = [p["shape"][0] * p["shape"][1] for p in mats]
total = sum(sizes)
S, start, end = 60, math.floor(0.1 * 60), math.ceil(0.8 * 60)
def target(t):
    if t <= start: return 0.0
    p = min(1.0, (t - start) / (end - start))
    return 0.5 * (1 - (1 - p) ** 3)
updates = [t for t in range(1, S + 1) if start < t < end and (t - start) % 5 == 0] + [end]
rows = {r["step"]: r for r in (json.loads(l) for l in open(sys.argv[2]))}
bad = 0
for t in range(1, S + 1):
    last = max([u for u in updates if u <= t], default=None)
    want = sum(math.floor(target(last) * n) for n in sizes) / total if last else 0.0
    if abs(rows[t]["sparsity"] - want) > 5e-10:   # %.9g in the metrics file
        bad += 1; print(f"    step {t}: sparsity {rows[t]['sparsity']} want {want}")
print(f"    {len(updates)} updates, {len(mats)} matrices, {total} weights; final sparsity {rows[S]['sparsity']}")
sys.exit(1 if bad else 0)
EOF

# zero sets of checkpoints (model.safetensors read with the standard library)
cat > "$TMP/zeros.py" <<'EOF'
import json, struct, sys
def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__" or v["dtype"] != "F32": continue
        s, e = v["data_offsets"]
        out[k] = (v["shape"], struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e]))
    return out
def prunable(name, shape):
    return len(shape) == 2 and (".h." in name or "model.layers." in name)
def zeros(path):
    return {k: frozenset(i for i, x in enumerate(v) if x == 0.0) for k, (s, v) in tensors(path).items() if prunable(k, s)}
EOF
check test_v2154_masked_weights_held_at_zero python3 - "$TMP/zeros.py" "$TMP/ck" <<'EOF'
import sys
exec(open(sys.argv[1]).read())
ck = sys.argv[2]
z = {s: zeros(f"{ck}/step_{s:08d}/model.safetensors") for s in (18, 20, 25, 60)}
held = all(z[18][k] == z[20][k] for k in z[18])                              # no update in 19-20
mono = all(z[18][k] <= z[25][k] <= z[60][k] for k in z[18])                  # pruned stays pruned
shapes = {k: s for k, (s, v) in tensors(f"{ck}/step_00000060/model.safetensors").items() if prunable(k, s)}
final = all(len(z[60][k]) == (shapes[k][0] * shapes[k][1]) // 2 for k in z[60])
print(f"    matrices {len(z[60])}; zeros at 18/20/25/60: {sum(map(len, z[18].values()))}/{sum(map(len, z[20].values()))}/{sum(map(len, z[25].values()))}/{sum(map(len, z[60].values()))}")
sys.exit(0 if held and mono and final and len(z[60]) > 0 else 1)
EOF

# resume: masks from the checkpoint's zeros
expect train_half 0 "done: 30 steps" -- "$TMP/g/train" "${RUN[@]}" --stop-after 30 --ckpt-dir "$TMP/ckr" --metrics "$TMP/r.jsonl"
expect train_resume 0 "resumed from" -- "$TMP/g/train" "${RUN[@]}" --ckpt-dir "$TMP/ckr" --resume --metrics "$TMP/r.jsonl"
check test_v2154_resume_equals_straight same_losses "$TMP/r.jsonl" "$TMP/g.jsonl" 60
check test_v2154_resume_same_weights cmp -s "$TMP/ckr/step_00000060/model.safetensors" "$TMP/ck/step_00000060/model.safetensors"

# export: the zeros reach the Hugging Face file
expect export 0 "exported" -- "$GEN" export "$TMP/ck/step_00000060" -o "$TMP/hf"
check test_v2154_export_has_the_zeros python3 - "$TMP/zeros.py" "$TMP/hf/model.safetensors" "$TMP/ck/step_00000060/model.safetensors" <<'EOF'
import sys
exec(open(sys.argv[1]).read())
a, b = zeros(sys.argv[2]), zeros(sys.argv[3])
na, nb = sum(map(len, a.values())), sum(map(len, b.values()))
print(f"    exported zeros {na}, checkpoint zeros {nb}")
sys.exit(0 if na == nb and nb > 0 else 1)
EOF

# 2:4
expect gen_24 0 "wrote" -- "$GEN" "$T" --enable adamw,prune --set v2154.pattern=structured_2_4 "${COMMON[@]}" -o "$TMP/s24"
expect train_24 0 "pruning at step 1: sparsity 0.5000" -- "$TMP/s24/train" --data "$TMP/data" --steps 20 --sample 0 --eval-every 0 --ckpt-dir "$TMP/ck24" --metrics "$TMP/s24.jsonl"
check test_v2154_2_4_pattern python3 - "$TMP/ck24/step_00000020/model.safetensors" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]; hdr = json.loads(b[8:8 + n])
groups = bad = 0
for k, v in hdr.items():
    if k == "__metadata__" or len(v["shape"]) != 2 or not (".h." in k or "model.layers." in k): continue
    s, e = v["data_offsets"]; w = struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
    for g in range(0, len(w), 4):
        groups += 1; bad += sum(x == 0.0 for x in w[g:g + 4]) != 2
print(f"    {groups} groups of 4, {bad} without exactly 2 zeros")
sys.exit(0 if groups > 0 and bad == 0 else 1)
EOF
check test_v2154_losses_finite sh -c "! grep -q '\"loss\":null' '$TMP/s24.jsonl' '$TMP/g.jsonl'"
echo "    final loss: dense $(last_metric "$TMP/dense.jsonl" loss), gradual 50% $(last_metric "$TMP/g.jsonl" loss), 2:4 (20 steps) $(last_metric "$TMP/s24.jsonl" loss)"

# refusals
expect refuse_device 2 "v2154" -- "$GEN" "$T" --enable adamw,prune --model tiny --target sim -o "$TMP/x1"
expect refuse_zero 2 "conflicts" -- "$GEN" "$T" --enable adamw,prune,zero2 "${COMMON[@]}" -o "$TMP/x2"
expect refuse_window 2 "end \(0.1\) is not after start \(0.5\)" -- "$GEN" "$T" --enable adamw,gradual-pruning --set v2156.start=0.5 --set v2156.end=0.1 "${COMMON[@]}" -o "$TMP/x3"
check no_partial_output test ! -e "$TMP/x1" -a ! -e "$TMP/x2" -a ! -e "$TMP/x3"

echo "pruning: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
