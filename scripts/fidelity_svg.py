#!/usr/bin/python3
"""Draws docs/performance.md's "Fidelity against float64" table (bench/fidelity.py's
figures) as an SVG chart: the largest |output - float64| by position, log-log, each
float32 way of computing dashed and posenc's solid. Usage:
  scripts/fidelity_svg.py docs/performance.md > docs/images/fidelity.svg"""
import math
import re
import sys

W, H, LEFT, RIGHT, TOP, BOTTOM = 720, 360, 70, 210, 20, 50
COLORS = ["#1f77b4", "#d62728", "#2ca02c"]


def read_table(path):
    text = open(path, encoding="utf-8").read()
    section = text.split("\n## Fidelity against float64\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("|")]
    head = [c.strip() for c in rows[0]]
    data = [[c.strip() for c in r] for r in rows[2:]]
    points = [(float(r[0].replace(",", "")), [float(v) for v in r[1:]]) for r in data]
    return head[1:], [p for p in points if p[0] > 0]


def scale(lo, hi, a, b):
    return lambda v: a + (math.log10(v) - lo) / (hi - lo) * (b - a)


def chart(names, points):
    xs = scale(3, 6, LEFT, W - RIGHT)
    ys = scale(-8, -1, H - BOTTOM, TOP)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>']
    for e in range(-8, 0):
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>'
                   % (LEFT, W - RIGHT, ys(10.0 ** e), ys(10.0 ** e)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">1e%d</text>'
                   % (LEFT - 6, ys(10.0 ** e) + 4, e))
    for e in range(3, 7):
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                   % (xs(10.0 ** e), H - BOTTOM + 18, format(10 ** e, ",")))
    out.append('<text x="%d" y="%d" text-anchor="middle">position</text>'
               % ((LEFT + W - RIGHT) // 2, H - 10))
    out.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">'
               'max |output - float64|</text>' % (H // 2, H // 2))
    for i, name in enumerate(names):
        color, dashed = COLORS[(i // 2) % 3], i % 2 == 0
        path = " ".join("%.1f,%.1f" % (xs(p), ys(max(v[i], 1e-8))) for p, v in points)
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>'
                   % (path, color, ' stroke-dasharray="6 4"' if dashed else ""))
        y = TOP + 16 + 18 * i
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>'
                   % (W - RIGHT + 12, W - RIGHT + 36, y - 4, y - 4, color,
                      ' stroke-dasharray="6 4"' if dashed else ""))
        out.append('<text x="%d" y="%d">%s</text>' % (W - RIGHT + 42, y, name))
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(chart(*read_table(sys.argv[1])))
