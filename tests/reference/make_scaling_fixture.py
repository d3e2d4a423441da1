#!/usr/bin/env python3
"""make_scaling_fixture.py — reference values for tests/gen/test_scaling_fit.sh (v2146/v2147).

Writes tests/reference/scaling/fixture.json and tests/reference/scaling/isoflop_synthetic.csv:
  1. approach 3 on the Chinchilla runs Epoch AI extracted (chinchilla_epoch.csv, the 5 highest losses
     left out as in their replication): scipy's L-BFGS-B from the same 4500-start grid, with the
     analytic gradient, the lowest objective kept (Epoch's data_analysis.ipynb, cell "grid"), plus the
     eigenvalues of the objective's Hessian at that optimum (finite differences of the gradient), so
     the test can turn "same objective to 1e-10" into a bound on the parameters;
  2. a synthetic IsoFLOP data set from Chinchilla's published law (E 1.69, A 406.4, B 410.7, alpha 0.34,
     beta 0.28): 5 budgets, 9 sizes each spread +-1 decade around the law's optimum, exact losses to
     12 significant digits; its approach-2 result computed with numpy.polyfit (parabola in ln N per
     budget, then ln N_opt against ln C), which the test compares with gen's own implementation.
Needs numpy and scipy (PyPI); CI never runs this, it reads the committed outputs.
Usage: python3 tests/reference/make_scaling_fixture.py
"""
import itertools
import json
import math
import os

import numpy as np
from scipy.optimize import minimize

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scaling")
DELTA = 1e-3


def read_epoch():
    N, C, L = [], [], []
    with open(os.path.join(HERE, "chinchilla_epoch.csv")) as f:
        rows = [l for l in f if not l.startswith("#")]
    for line in rows[1:]:
        n, c, l = map(float, line.strip().split(","))
        N.append(n), C.append(c), L.append(l)
    N, C, L = map(np.array, (N, C, L))
    keep = L < sorted(L)[-5]  # Epoch: losses[i] < sorted_losses[-5]
    return N[keep], C[keep] / (6 * N[keep]), L[keep]


def objective_and_grad(x, lN, lD, lL):
    a, b, e, al, be = x
    t = np.stack([a - al * lN, b - be * lD, np.full_like(lN, e)])
    m = t.max(axis=0)
    ex = np.exp(t - m)
    s = ex.sum(axis=0)
    pred = m + np.log(s)
    r = lL - pred
    small = np.abs(r) <= DELTA
    f = np.where(small, 0.5 * r * r, DELTA * (np.abs(r) - 0.5 * DELTA)).sum()
    dr = np.where(small, r, DELTA * np.sign(r))
    w = ex / s
    g = np.array([-(dr * w[0]).sum(), -(dr * w[1]).sum(), -(dr * w[2]).sum(),
                  (dr * w[0] * lN).sum(), (dr * w[1] * lD).sum()])
    return f, g


def fit_grid(lN, lD, lL):
    best = (math.inf, None)
    grid = itertools.product(np.arange(0, 30, 5), np.arange(0, 30, 5), np.arange(-1, 1.5, 0.5),
                             np.arange(0, 2.5, 0.5), np.arange(0, 2.5, 0.5))
    for a, b, e, al, be in grid:
        res = minimize(objective_and_grad, [a, b, e, al, be], args=(lN, lD, lL), jac=True, method="L-BFGS-B",
                       options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 5000})
        if np.isfinite(res.fun) and res.fun < best[0]:
            best = (float(res.fun), res.x)
    return best


def hessian_eigs(x, lN, lD, lL, h=1e-6):
    H = np.zeros((5, 5))
    for j in range(5):
        xp, xm = x.copy(), x.copy()
        xp[j] += h
        xm[j] -= h
        H[:, j] = (objective_and_grad(xp, lN, lD, lL)[1] - objective_and_grad(xm, lN, lD, lL)[1]) / (2 * h)
    return np.linalg.eigvalsh(0.5 * (H + H.T))


def synthetic():
    E, A, B, al, be = 1.69, 406.4, 410.7, 0.34, 0.28
    G = (al * A / (be * B)) ** (1 / (al + be))
    rows, profiles = [], []
    for C in [1e18, 1e19, 1e20, 1e21, 1e22]:
        nopt = G * (C / 6) ** (be / (al + be))
        ns = nopt * 10 ** np.linspace(-1, 1, 9)
        ls = [E + A / n ** al + B / (C / (6 * n)) ** be for n in ns]
        ls = [float("%.12g" % l) for l in ls]
        for n, l in zip(ns, ls):
            rows.append((float("%.12g" % n), float("%.12g" % C), l))
        c2, c1, c0 = np.polyfit(np.log([float("%.12g" % n) for n in ns]), ls, 2)
        xv = -c1 / (2 * c2)
        profiles.append((C, math.exp(xv)))
    lc = np.log([p[0] for p in profiles])
    ln = np.log([p[1] for p in profiles])
    a, k = np.polyfit(lc, ln, 1)
    law = {"E": E, "A": A, "B": B, "alpha": al, "beta": be}
    return rows, {"law": law, "profiles_N_opt": [p[1] for p in profiles], "a": float(a), "log_k": float(k),
                  "a_law": be / (al + be)}


def main():
    lN, lD, lL = (np.log(v) for v in read_epoch())
    f, x = fit_grid(lN, lD, lL)
    eig = hessian_eigs(x, lN, lD, lL)
    rows, iso = synthetic()
    with open(os.path.join(HERE, "isoflop_synthetic.csv"), "w") as out:
        out.write("# Synthetic IsoFLOP runs from Chinchilla's published law (make_scaling_fixture.py): exact losses\n")
        out.write("N,C,loss\n")
        for n, c, l in rows:
            out.write("%.12g,%.12g,%.12g\n" % (n, c, l))
    fixture = {
        "epoch": {"runs": int(len(lN)), "objective": f, "a": x[0], "b": x[1], "e": x[2], "alpha": x[3], "beta": x[4],
                  "hessian_eigenvalues": [float(v) for v in eig], "scipy": "L-BFGS-B, 4500-start grid"},
        "isoflop": iso,
    }
    with open(os.path.join(HERE, "fixture.json"), "w") as out:
        json.dump(fixture, out, indent=1, default=float)
        out.write("\n")
    print(json.dumps(fixture, indent=1, default=float))


if __name__ == "__main__":
    main()
