#!/usr/bin/env python3
"""mup_plot.py — the SVG figures of bench_mup_coord.sh and bench_mup_transfer.sh (python3
standard library only: no plotting package). Never measures anything: it draws the TSV it is given.

    mup_plot.py coord  IN.tsv OUT.svg   # rows: scheme width step tensor rms
    mup_plot.py sweep  IN.tsv OUT.svg   # rows: scheme width lr loss
Both draw one panel per scheme (sp, mup), log-log (coord: RMS vs width, one line per tensor at
the last step) or log-x (sweep: final loss vs LR, one line per width, the best LR marked).
"""
import math
import sys

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                rows.append(line.split())
    return rows


def panel(out, x0, y0, w, h, title, series, xlog, ylog, xlabel, ylabel, marks=None):
    """series: [(label, [(x, y), ...])]; draws axes, ticks, lines and a legend."""
    xs = [p[0] for _, pts in series for p in pts]
    ys = [p[1] for _, pts in series for p in pts if p[1] > 0 or not ylog]
    fx = (lambda v: math.log10(v)) if xlog else (lambda v: v)
    fy = (lambda v: math.log10(max(v, 1e-12))) if ylog else (lambda v: v)
    lo_x, hi_x = fx(min(xs)), fx(max(xs))
    lo_y, hi_y = fy(min(ys)), fy(max(ys))
    if hi_y - lo_y < 1e-9:
        hi_y += 0.5
        lo_y -= 0.5
    pad = 0.05 * (hi_y - lo_y)
    lo_y, hi_y = lo_y - pad, hi_y + pad
    L, R, T, B = x0 + 60, x0 + w - 10, y0 + 30, y0 + h - 45
    X = lambda v: L + (fx(v) - lo_x) / (hi_x - lo_x or 1) * (R - L)
    Y = lambda v: B - (fy(v) - lo_y) / (hi_y - lo_y) * (B - T)
    out.append('<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>' % (L, y0 + 18, title))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>' % (L, T, R - L, B - T))
    for v in sorted(set(xs)):
        out.append('<text x="%.1f" y="%d" font-size="9" text-anchor="middle">%.2g</text>' % (X(v), B + 14, v))
    for k in range(5):
        fv = lo_y + (hi_y - lo_y) * k / 4
        v = 10 ** fv if ylog else fv
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, R, Y(v), Y(v)))
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%.3g</text>' % (L - 4, Y(v) + 3, v))
    out.append('<text x="%d" y="%d" font-size="11" text-anchor="middle">%s</text>' % ((L + R) // 2, B + 32, xlabel))
    out.append('<text x="%d" y="%d" font-size="11" transform="rotate(-90 %d %d)" text-anchor="middle">%s</text>'
               % (x0 + 14, (T + B) // 2, x0 + 14, (T + B) // 2, ylabel))
    for i, (label, pts) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        pts = sorted(pts)
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                   % (c, " ".join("%.1f,%.1f" % (X(a), Y(b)) for a, b in pts)))
        for a, b in pts:
            out.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (X(a), Y(b), c))
        if marks and label in marks:
            a, b = marks[label]
            out.append('<circle cx="%.1f" cy="%.1f" r="6" fill="none" stroke="%s" stroke-width="2"/>' % (X(a), Y(b), c))
        out.append('<text x="%d" y="%d" font-size="11" fill="%s">%s</text>' % (R - 150, T + 14 + 14 * i, c, label))


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("coord", "sweep"):
        sys.stderr.write("mup_plot.py: usage: mup_plot.py coord|sweep IN.tsv OUT.svg\n")
        return 2
    mode, src, dst = sys.argv[1:]
    rows = read(src)
    schemes = [s for s in ("sp", "mup") if any(r[0] == s for r in rows)]
    W, H = 460, 340
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W * len(schemes), H + 20),
           '<rect width="100%" height="100%" fill="white"/>']
    for i, s in enumerate(schemes):
        if mode == "coord":
            last = max(int(r[2]) for r in rows if r[0] == s)
            names = []
            for r in rows:
                if r[0] == s and r[3] not in names:
                    names.append(r[3])
            series = [(n, [(float(r[1]), float(r[4])) for r in rows if r[0] == s and r[3] == n and int(r[2]) == last])
                      for n in names]
            panel(out, i * W, 0, W, H, "%s: activation RMS after %d Adam steps" % (s.upper() if s == "sp" else "muP", last),
                  series, True, True, "width (d_model)", "RMS of coordinates")
        else:
            widths = sorted({int(r[1]) for r in rows if r[0] == s})
            series, marks = [], {}
            for w in widths:
                pts = [(float(r[2]), float(r[3])) for r in rows if r[0] == s and int(r[1]) == w and r[3] != "nan"]
                label = "width %d" % w
                series.append((label, pts))
                marks[label] = min(pts, key=lambda p: p[1])
            panel(out, i * W, 0, W, H, "%s: training loss vs LR (best circled)" % ("SP" if s == "sp" else "muP"),
                  series, True, False, "learning rate", "mean loss of the last steps", marks)
    out.append("</svg>")
    with open(dst, "w") as f:
        f.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
