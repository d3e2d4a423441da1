#!/usr/bin/env python3
"""make_adamw8bit_fixture.py — reference of v2132 state_dtype q8: AdamW with 8-bit block-wise
quantized states (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization";
bitsandbytes' AdamW8bit), written out in plain Python float32 arithmetic (every operation rounded
to float32 with struct, which equals IEEE float32 for + - * / and sqrt: a double holds the exact
result of one float32 op closely enough to round it once). CI never runs this script; the fixture
it writes, tests/fixtures/ref_adamw8bit.safetensors, is committed and read by
tests/unit/test_adamw8_v2132.c. Re-run from the repo root (stdlib only, no numpy/torch):

    python3 tests/reference/make_adamw8bit_fixture.py

The algorithm, as bitsandbytes (functional.create_dynamic_map; csrc kernels.cu
kOptimizerStatic8bit2StateBlockwise with BLOCKSIZE_2STATE 256):
  * maps: create_dynamic_map(signed=True) for m, (signed=False) for v (max_exponent_bits 7,
    total_bits 8): for exponent i < 7, the midpoints of torch.linspace(0.1, 1, k) (k = 2^i + 1
    signed, both signs; 2^(i+1) + 1 unsigned) times 10^(i-6), plus 0 and 1, sorted: 256 codes.
    torch.linspace in float32 as ATen's cpu kernel: start + step*i below steps//2, end -
    step*(steps-1-i) from there; the scalar 10^(i-6) is cast to float32 before the product.
  * per block of 256 elements (the tensor's last block shorter): m = map_s[c_m]*absmax_m,
    v = map_u[c_v]*absmax_v; m = b1*m + (1-b1)*g, v = b2*v + ((1-b2)*g)*g; the parameter moves
    with these unquantized m, v; new absmax = max |m| (|v|) over the block; codes = nearest code of
    m/absmax (v/absmax), ties to the lower code; a code of m whose sign differs from m's moves one
    step toward m's sign (bitsandbytes' signbit fix); an all-zero block keeps the zero code.
  * the parameter update is op_adamw's (runtime/optim/optim_kernels_cpu.c, torch.optim.AdamW):
    ibc = 1/f32(1 - b^t) (pow in double), p = p - lr*((m*ibc1)/(sqrt(v*ibc2) + eps) + wd*p).
    bitsandbytes itself decays after the update and scales eps by sqrt(1-b2^t): deliberately not
    copied, so q8 differs from the f32-state AdamW only by the state quantization.
Tensors: three sizes that are not multiples of 256 (77, 300, 1000), gradients spanning five
decades per block, 5 steps, grad_scale 0.8 (a clip factor); stored: both maps, p0, the gradient of
each step, and after each step p, both codes (U8) and both absmax vectors.
"""
import json
import math
import os
import random
import struct

B1, B2, EPS, LR, WD, GS, STEPS, BLOCK = 0.9, 0.95, 1e-8, 1e-3, 0.1, 0.8, 5, 256
SIZES = {"a": 77, "b": 300, "c": 1000}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def linspace(start, end, steps):
    start, end = f32(start), f32(end)
    step = f32(f32(end - start) / f32(steps - 1))
    half = steps // 2
    return [f32(start + f32(step * i)) if i < half else f32(end - f32(step * (steps - i - 1))) for i in range(steps)]


def dynamic_map(signed):
    data = []
    for i in range(7):
        k = 2 ** i + 1 if signed else 2 ** (i + 1) + 1
        b = linspace(0.1, 1.0, k)
        scale = f32(10.0 ** (i - 6))
        for j in range(k - 1):
            mean = f32(f32(b[j] + b[j + 1]) / 2.0)
            data.append(f32(scale * mean))
            if signed:
                data.append(f32(-scale * mean))
    data += [0.0, 1.0]
    assert len(data) == 256
    return sorted(data)


def nearest(mp, x):
    if not x > mp[0]:
        return 0
    if x >= mp[255]:
        return 255
    lo, hi = 0, 255
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mp[mid] <= x:
            lo = mid
        else:
            hi = mid
    return hi if f32(mp[hi] - x) < f32(x - mp[lo]) else lo


def step(p, g, cm, cv, am, av, t, ms, mu):
    b1, b2, eps, lr, wd, gs = f32(B1), f32(B2), f32(EPS), f32(LR), f32(WD), f32(GS)
    ibc1 = f32(1.0 / f32(1.0 - math.pow(b1, t)))
    ibc2 = f32(1.0 / f32(1.0 - math.pow(b2, t)))
    zs, zu = nearest(ms, 0.0), nearest(mu, 0.0)
    for b in range(len(am)):
        lo, hi = b * BLOCK, min(len(p), (b + 1) * BLOCK)
        mv, vv, nm, nv = [], [], 0.0, 0.0
        for i in range(lo, hi):
            gi = f32(g[i] * gs)
            mi = f32(f32(b1 * f32(ms[cm[i]] * am[b])) + f32(f32(1.0 - b1) * gi))
            vi = f32(f32(b2 * f32(mu[cv[i]] * av[b])) + f32(f32(f32(1.0 - b2) * gi) * gi))
            mv.append(mi)
            vv.append(vi)
            nm, nv = max(nm, abs(mi)), max(nv, abs(vi))
            mhat, vhat = f32(mi * ibc1), f32(vi * ibc2)
            upd = f32(f32(mhat / f32(f32(math.sqrt(vhat)) + eps)) + f32(wd * p[i]))
            p[i] = f32(p[i] - f32(lr * upd))
        am[b], av[b] = nm, nv
        for j, i in enumerate(range(lo, hi)):
            c = zs
            if nm > 0.0:
                c = nearest(ms, f32(mv[j] / nm))
                if math.copysign(1.0, ms[c]) != math.copysign(1.0, mv[j]):
                    c += 1 if mv[j] > 0.0 else -1
            cm[i] = c
            cv[i] = nearest(mu, f32(vv[j] / nv)) if nv > 0.0 else zu


def write_safetensors(path, tensors, meta):
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, dtype, vals in tensors:
        raw = struct.pack("<%d%s" % (len(vals), "f" if dtype == "F32" else "B"), *vals)
        header[name] = {"dtype": dtype, "shape": [len(vals)], "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    rng = random.Random(20220608)
    ms, mu = dynamic_map(True), dynamic_map(False)
    out = [("map_signed", "F32", ms), ("map_unsigned", "F32", mu)]
    for name, n in SIZES.items():
        nb = (n + BLOCK - 1) // BLOCK
        p = [f32(rng.gauss(0.0, 0.02)) for _ in range(n)]
        cm, cv, am, av = [0] * n, [0] * n, [0.0] * nb, [0.0] * nb
        out.append((name + ".p0", "F32", list(p)))
        for t in range(1, STEPS + 1):
            # five decades of gradient magnitude inside each block (the dynamic map's point)
            g = [f32(rng.gauss(0.0, 1.0) * 10.0 ** rng.uniform(-5.0, 0.0)) for _ in range(n)]
            step(p, g, cm, cv, am, av, t, ms, mu)
            out += [("%s.g%d" % (name, t), "F32", g), ("%s.p%d" % (name, t), "F32", list(p)),
                    ("%s.m_codes%d" % (name, t), "U8", list(cm)), ("%s.v_codes%d" % (name, t), "U8", list(cv)),
                    ("%s.m_absmax%d" % (name, t), "F32", list(am)), ("%s.v_absmax%d" % (name, t), "F32", list(av))]
    meta = {"beta1": repr(B1), "beta2": repr(B2), "eps": repr(EPS), "lr": repr(LR), "weight_decay": repr(WD),
            "grad_scale": repr(GS), "steps": str(STEPS), "block": str(BLOCK),
            "sizes": ",".join("%s=%d" % kv for kv in SIZES.items()),
            "generator": "tests/reference/make_adamw8bit_fixture.py"}
    path = os.path.join("tests", "fixtures", "ref_adamw8bit.safetensors")
    write_safetensors(path, out, meta)
    print("wrote", path)


if __name__ == "__main__":
    main()
