#!/usr/bin/env python3
# q8cmp.py — compares the packed 8-bit AdamW states of two optimizer.safetensors (v2132 q8: per
# tensor ceil(n/256) fp32 absmax, then n uint8 codes; test_v2132_q8_dev.sh): prints the worst
# relative absmax difference, the codes that differ and the largest code distance; exit 0 when the
# absmax agree within ABS_TOL relative and at most FRAC of the codes differ.
# Never: writes anything. usage: q8cmp.py A B PLAN ABS_TOL FRAC
import array, json, struct, sys


def load(f):
    b = open(f, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    return h, b[8 + n:]


(ha, da), (hb, db) = load(sys.argv[1]), load(sys.argv[2])
numel = {p['name']: p['numel'] for p in json.load(open(sys.argv[3]))['params']}
tol, frac = float(sys.argv[4]), float(sys.argv[5])
worst_abs, diff, total, far = 0.0, 0, 0, 0
for k, v in ha.items():
    if k == '__metadata__':
        continue
    name = k.rsplit('.', 1)[0]
    n = numel[name]
    nb = (n + 255) // 256
    s, e = v['data_offsets']
    sb, eb = hb[k]['data_offsets']
    x, y = da[s:e], db[sb:eb]
    ax, ay = array.array('f'), array.array('f')
    ax.frombytes(x[:4 * nb]); ay.frombytes(y[:4 * nb])
    for p, q in zip(ax, ay):
        worst_abs = max(worst_abs, abs(p - q) / max(abs(p), abs(q), 1e-30))
    cx, cy = x[4 * nb:4 * nb + n], y[4 * nb:4 * nb + n]
    for p, q in zip(cx, cy):
        total += 1
        if p != q:
            diff += 1
            far = max(far, abs(p - q))
print("absmax worst relative difference %.3g; codes differing %d of %d (%.3g%%), largest distance %d" % (worst_abs, diff, total, 100.0 * diff / max(total, 1), far))
sys.exit(0 if worst_abs <= tol and diff <= frac * total else 1)
