#!/usr/bin/env python3
# q8cmp.py — checks the layout of the packed 8-bit AdamW states in two optimizer.safetensors (v2132
# q8: per tensor ceil(n/256) fp32 absmax, then n uint8 codes, padded to whole floats;
# test_v2132_q8_dev.sh): exit 0 when both files hold the same packed tensors, each of
# 4 * (ceil(n/256) + ceil(n/4)) bytes (4 * n for a tensor of a group of rule f32: fp32 m, v), every
# absmax finite and >= 0. The values are not compared
# (the kernel's bit-equality with the cpu step is test_adamw8_sim_v2132's).
# Never: writes anything. usage: q8cmp.py A B PLAN
import array, json, struct, sys


def load(f):
    b = open(f, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    return h, b[8 + n:]


(ha, da), (hb, db) = load(sys.argv[1]), load(sys.argv[2])
plan = json.load(open(sys.argv[3]))
numel = {p['name']: p['numel'] for p in plan['params']}
rule = {g['name']: g.get('rule', '') for g in plan['optimizer']['groups']}
f32 = {p['name'] for p in plan['params'] if rule[p['group']] == 'f32'}  # plain fp32 m, v
bad = []
if set(ha) != set(hb):
    bad.append("tensor sets differ: %s" % sorted(set(ha) ^ set(hb)))
for k in sorted(set(ha) & set(hb) - {'__metadata__'}):
    n = numel[k.rsplit('.', 1)[0]]
    nb = 0 if k.rsplit('.', 1)[0] in f32 else (n + 255) // 256
    want = 4 * n if nb == 0 else 4 * (nb + (n + 3) // 4)
    for h, d, w in ((ha, da, 'A'), (hb, db, 'B')):
        s, e = h[k]['data_offsets']
        if e - s != want:
            bad.append("%s %s: %d bytes, want %d" % (w, k, e - s, want))
            continue
        a = array.array('f')
        a.frombytes(d[s:s + 4 * nb])
        if not all(x == x and 0.0 <= x < float('inf') for x in a):
            bad.append("%s %s: an absmax is negative or not finite" % (w, k))
print("packed q8 states: %d tensors, %s" % (len(set(ha) - {'__metadata__'}), "; ".join(bad) if bad else "layout ok"))
sys.exit(1 if bad else 0)
