#!/usr/bin/env python3
"""ablation_report.py — tables and SVG plots of bench/bench_optim_ablation.sh's runs (stdlib only).

    python3 bench/ablation_report.py OUT_DIR MODEL...

Reads OUT_DIR/runs.csv and OUT_DIR/curves/*.jsonl; writes OUT_DIR/table.md and
OUT_DIR/ablation_<model>.svg (val loss vs step and vs time, mean over seeds, one line per
optimizer). Never invents a point: a curve is drawn only from the metrics the trainer wrote.
"""
import csv
import json
import math
import os
import statistics
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def load(out):
    runs = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
    for r in runs:
        r["final_val_loss"] = float(r["final_val_loss"])
    return runs


def curve(out, key, opt, lr, seed):
    p = os.path.join(out, "curves", f"{key}-{opt}-lr{lr}-s{seed}.jsonl")
    rows = [json.loads(l) for l in open(p)]
    val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    train = [(r["step"], r["loss"]) for r in rows]
    step_s = statistics.median(r["step_s"] for r in rows[1:])
    return val, train, step_s


def best(runs, key, opt):
    sweep = [r for r in runs if r["model"] == key and r["optimizer"] == opt and r["seed"] == "1"
             and not math.isnan(r["final_val_loss"])]
    return min(sweep, key=lambda r: r["final_val_loss"])["lr"] if sweep else None


def interp(points, x):
    """Linear interpolation of [(x, y)] at x (clamped to the ends)."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def svg(path, title, panels):
    """panels: [(xlabel, {name: [(x, y)]})] side by side."""
    W, H, L, R, T, B = 460, 330, 60, 10, 30, 45
    allys = [y for _, ser in panels for pts in ser.values() for _, y in pts]
    ylo, yhi = min(allys), max(allys)
    yhi = min(yhi, ylo + 2.5)  # the first steps' losses would flatten the interesting part
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * len(panels)}" height="{H + 20}" font-family="sans-serif" font-size="11">',
           f'<text x="10" y="16" font-size="13">{title}</text>']
    for k, (xl, ser) in enumerate(panels):
        ox = k * W
        xhi = max(x for pts in ser.values() for x, _ in pts)
        sx = lambda x: ox + L + (W - L - R) * x / xhi
        sy = lambda y: T + (H - T - B) * (yhi - min(max(y, ylo), yhi)) / (yhi - ylo)
        out.append(f'<rect x="{ox + L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#999"/>')
        for i in range(6):
            y = ylo + (yhi - ylo) * i / 5
            out.append(f'<text x="{ox + L - 4}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
            x = xhi * i / 5
            out.append(f'<text x="{sx(x):.1f}" y="{H - B + 14}" text-anchor="middle">{x:.3g}</text>')
        out.append(f'<text x="{ox + L + (W - L - R) / 2}" y="{H - 12}" text-anchor="middle">{xl}</text>')
        out.append(f'<text x="{ox + 14}" y="{T + (H - T - B) / 2}" transform="rotate(-90 {ox + 14} {T + (H - T - B) / 2})" text-anchor="middle">val loss (nats/byte)</text>')
        for j, (name, pts) in enumerate(ser.items()):
            c = COLORS[j % len(COLORS)]
            d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{d}" fill="none" stroke="{c}" stroke-width="1.6"/>')
            if k == 0:
                out.append(f'<text x="{ox + W - R - 6}" y="{T + 14 + 13 * j}" text-anchor="end" fill="{c}">{name}</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def timing(out):
    """{(model, optimizer): median CPU s per step} from timing.csv, or {} without it."""
    p = os.path.join(out, "timing.csv")
    if not os.path.exists(p):
        return {}
    t = {}
    for r in csv.DictReader(open(p)):
        t.setdefault((r["model"], r["optimizer"]), []).append(float(r["cpu_s_per_step"]))
    return {k: statistics.median(v) for k, v in t.items()}


def main():
    out, models = sys.argv[1], sys.argv[2:]
    runs = load(out)
    cpu = timing(out)
    md = ["| model | optimizer | best LR (sweep) | final val loss, mean ± sd (seeds) | vs AdamW | val loss at AdamW's time | step cost / AdamW's |",
          "|---|---|---|---|---|---|---|"]
    for model in models:
        key = os.path.basename(model)[:-5] if model.endswith(".yaml") else model
        opts = list(dict.fromkeys(r["optimizer"] for r in runs if r["model"] == key))
        per = {}
        for opt in opts:
            lr = best(runs, key, opt)
            if lr is None:
                continue
            seeds = sorted({r["seed"] for r in runs if r["model"] == key and r["optimizer"] == opt and r["lr"] == lr})
            curves = [curve(out, key, opt, lr, s) for s in seeds]
            finals = [c[0][-1][1] for c in curves]
            steps = [x for x, _ in curves[0][0]]
            mean_val = [(x, statistics.mean(interp(c[0], x) for c in curves)) for x in steps]
            st = cpu.get((key, opt)) or statistics.median(c[2] for c in curves)
            per[opt] = dict(lr=lr, finals=finals, mean_val=mean_val, step_s=st, n=len(seeds))
        if "adamw" not in per:
            continue
        a = per["adamw"]
        t_budget = a["mean_val"][-1][0] * a["step_s"]
        for opt, d in per.items():
            m = statistics.mean(d["finals"])
            sd = statistics.stdev(d["finals"]) if len(d["finals"]) > 1 else 0.0
            # the val loss this optimizer reaches in AdamW's time (its curve in time, clamped at its last point)
            in_time = interp([(x * d["step_s"], y) for x, y in d["mean_val"]], t_budget)
            ran_out = d["mean_val"][-1][0] * d["step_s"] < t_budget * 0.999
            md.append(f"| {key} | {opt} | {float(d['lr']):g} | {m:.4f} ± {sd:.4f} ({d['n']}) | {m - statistics.mean(a['finals']):+.4f} | "
                      f"{in_time:.4f}{' (its last step)' if ran_out else ''} | {d['step_s'] / a['step_s']:.2f} |")
        svg(os.path.join(out, f"ablation_{key}.svg"), f"optimizer ablation: {key}, best LR per optimizer, mean of seeds",
            [("step", {f"{o} (lr {float(d['lr']):g})": d["mean_val"] for o, d in per.items()}),
             ("time (s: steps x CPU s/step measured by the bench)" if cpu else "time (s, median wall step time)", {o: [(x * d["step_s"], y) for x, y in d["mean_val"]] for o, d in per.items()})])
    open(os.path.join(out, "table.md"), "w").write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
