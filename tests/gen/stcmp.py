#!/usr/bin/env python3
# stcmp.py — compares two safetensors files tensor by tensor (the device-optimizer tests:
# test_muon_dev.sh, test_optim_dev.sh): every tensor of A within tolerance of B's, the tensors of
# the named optimizer groups (GROUPS: comma-separated; and their states) by GROUP_TOL, the others by OTHER_TOL; prints the
# worst of each class. Never: writes anything. usage: stcmp.py A B GROUP_TOL OTHER_TOL PLAN GROUPS
import array, json, struct, sys


def load(f):
    b = open(f, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    d = b[8 + n:]
    out = {}
    for k, v in h.items():
        if k == '__metadata__':
            continue
        s, e = v['data_offsets']
        a = array.array('f')
        a.frombytes(d[s:e])
        out[k] = a
    return out


a, b = load(sys.argv[1]), load(sys.argv[2])
gt, ot = float(sys.argv[3]), float(sys.argv[4])
groups = json.load(open(sys.argv[5]))['optimizer']['groups']
members = set(p for g in groups if g['name'] in sys.argv[6].split(',') for p in g['params'])
worst = {True: (0.0, '-'), False: (0.0, '-')}
bad = sorted(set(a) ^ set(b))
for k in sorted(a):
    if k not in b or len(a[k]) != len(b[k]):
        continue
    m = max((abs(x - y) for x, y in zip(a[k], b[k])), default=0.0)
    base = k
    for suf in ('.exp_avg_sq', '.exp_avg', '.z', '.m', '.vmean'):  # a state: its parameter's name
        if k.endswith(suf):
            base = k[:-len(suf)]
            break
    g = base in members
    if m > worst[g][0]:
        worst[g] = (m, k)
    if not m <= (gt if g else ot):
        bad.append(k)
print("max |a-b|: group %s %.3g (%s), other tensors %.3g (%s)%s" % ((sys.argv[6],) + worst[True] + worst[False] + (
    (" — over tolerance: " + ", ".join(bad[:5])) if bad else "",)))
sys.exit(1 if bad else 0)
