"""Inline SVG plots generated in Python: no library, no script, no external resource.

Contract: each function returns one `<svg>` element as a string. Every plotted value is an
element carrying `data-value` (the raw float, `repr`, so it round-trips exactly) and a
`<title>` tooltip with the formatted number and unit; groups carry `data-*` attributes
naming what they show (device, route, config, category, block...). Tests read these back
from the DOM and compare them with the measured values.

* `distribution(rows, unit)` – horizontal box + strip plot per row: box q1..q3, median line,
  p90 tick, whiskers to min/max, and the raw samples as points (at most `MAX_POINTS` per
  row, every k-th sample in order: each point shown is a real sample). The axis ends where
  the rows need it (`_axis_top`); slower outliers sit on the edge (class `clipped`, true
  value in `data-value`) and the row says how many and the max.
* `stacked_bars(rows, parts, unit)` – one horizontal bar per row, one segment per part.
* `grouped_bars(groups, series, unit)` – per group, one bar per series (e.g. off/on), with an
  optional note per group (e.g. the reduction and its CI).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

import numpy as np

MAX_POINTS = 400
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948",
           "#9c755f")
CATEGORY_COLORS = {"attention": "#4e79a7", "fc": "#f28e2b", "layernorm": "#59a14f",
                   "gelu": "#e15759", "other": "#bab0ac", "fallback": "#b07aa1",
                   "runtime": "#4e79a7",
                   "code": "#f28e2b", "weights": "#59a14f", "off": "#bab0ac", "on": "#4e79a7",
                   "VmHWM": "#4e79a7", "PSS": "#76b7b2"}
LABEL_W, PLOT_W, RIGHT_W, ROW_H, TOP, BOTTOM = 260, 760, 150, 34, 28, 40


def _attrs(attrs: Mapping[str, Any]) -> str:
    return "".join(f' {k}="{escape(str(v), quote=True)}"' for k, v in attrs.items()
                   if v is not None)


def _fmt(value: float, unit: str) -> str:
    digits = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3f}"
    return f"{digits} {unit}".strip()


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    return [round(start + i * step, 12) for i in range(int((hi - start) / step + 1e-9) + 1)]


@dataclass
class _Scale:
    lo: float
    hi: float

    def __call__(self, v: float) -> float:
        span = self.hi - self.lo or 1.0
        return LABEL_W + (v - self.lo) / span * PLOT_W


def _frame(height: float, scale: _Scale, unit: str, title: str, cls: str,
           attrs: Mapping[str, Any]) -> list[str]:
    width = LABEL_W + PLOT_W + RIGHT_W
    out = [f'<svg class="plot {cls}" role="img" viewBox="0 0 {width} {height:.0f}" '
           f'width="{width}" height="{height:.0f}"{_attrs(attrs)}>',
           f"<title>{escape(title)}</title>",
           f'<text class="plot-title" x="{LABEL_W}" y="16">{escape(title)}</text>']
    axis_y = height - BOTTOM + 6
    out.append(f'<line class="axis" x1="{LABEL_W}" y1="{axis_y}" x2="{LABEL_W + PLOT_W}" '
               f'y2="{axis_y}"/>')
    for t in nice_ticks(scale.lo, scale.hi):
        x = scale(t)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{axis_y}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle">'
                   f"{t:g}</text>")
    out.append(f'<text class="unit" x="{LABEL_W + PLOT_W}" y="{axis_y + 30}" '
               f'text-anchor="end">{escape(unit)}</text>')
    return out


def _label(y: float, text: str, limit: int = 40) -> str:
    shown = text if len(text) <= limit else text[:limit - 1] + "…"
    return (f'<text class="row-label" x="{LABEL_W - 8}" y="{y:.1f}" text-anchor="end" '
            f'dominant-baseline="middle"><title>{escape(text)}</title>{escape(shown)}</text>')


def _mark(tag: str, cls: str, value: float, tip: str, geometry: Mapping[str, Any],
          extra: Mapping[str, Any] | None = None) -> str:
    attrs = {"class": cls, **geometry, "data-value": repr(float(value)), **(extra or {})}
    return f"<{tag}{_attrs(attrs)}><title>{escape(tip)}</title></{tag}>"


def _axis_top(x: np.ndarray) -> float:
    """Where a row needs the axis to reach: its p90 with room, or q3 + 3 IQR; rare slow
    outliers (a scheduler hiccup of 30x the median) would otherwise squash every box."""
    q1, q3, p90 = np.percentile(x, [25, 75, 90])
    return float(max(p90 * 1.25, q3 + 3 * (q3 - q1)))


@dataclass
class DistRow:
    label: str
    samples: Sequence[float]
    attrs: dict[str, Any] = field(default_factory=dict)


def distribution(rows: Sequence[DistRow], unit: str, title: str,
                 attrs: Mapping[str, Any] | None = None) -> str:
    rows = [r for r in rows if len(r.samples)]
    allv = np.concatenate([np.asarray(r.samples, float) for r in rows]) if rows else np.zeros(1)
    top = min(float(allv.max()), max((_axis_top(np.asarray(r.samples, float)) for r in rows),
                                     default=float(allv.max())))
    pad = (top - float(allv.min())) * 0.05 or 0.5
    scale = _Scale(max(0.0, float(allv.min()) - pad), top + pad)
    edge = scale.hi
    height = TOP + ROW_H * len(rows) + BOTTOM
    out = _frame(height, scale, unit, title, "distribution", attrs or {})
    for i, row in enumerate(rows):
        x = np.asarray(row.samples, float)
        q1, med, q3, p90 = (float(v) for v in np.percentile(x, [25, 50, 75, 90]))
        lo, hi = float(x.min()), float(x.max())
        yc = TOP + ROW_H * i + ROW_H / 2
        out.append(f'<g class="dist"{_attrs({**row.attrs, "data-n": x.size})}>')
        out.append(_label(yc, row.label))
        out.append(_mark("line", "whisker", lo, f"min {_fmt(lo, unit)}, max {_fmt(hi, unit)}",
                         {"x1": f"{scale(lo):.1f}", "x2": f"{scale(min(hi, edge)):.1f}",
                          "y1": f"{yc:.1f}", "y2": f"{yc:.1f}"}, {"data-stat": "min",
                                                                "data-max": repr(hi)}))
        out.append(_mark("rect", "box", med, f"q1 {_fmt(q1, unit)}, median {_fmt(med, unit)}, "
                         f"q3 {_fmt(q3, unit)}",
                         {"x": f"{scale(q1):.1f}", "y": f"{yc - 9:.1f}",
                          "width": f"{max(1.0, scale(q3) - scale(q1)):.1f}", "height": 18},
                         {"data-stat": "iqr", "data-q1": repr(q1), "data-q3": repr(q3)}))
        out.append(_mark("line", "median", med, f"median {_fmt(med, unit)} (n={x.size})",
                         {"x1": f"{scale(med):.1f}", "x2": f"{scale(med):.1f}",
                          "y1": f"{yc - 11:.1f}", "y2": f"{yc + 11:.1f}"},
                         {"data-stat": "median"}))
        out.append(_mark("line", "p90", p90, f"p90 {_fmt(p90, unit)}",
                         {"x1": f"{scale(p90):.1f}", "x2": f"{scale(p90):.1f}",
                          "y1": f"{yc - 6:.1f}", "y2": f"{yc + 6:.1f}"}, {"data-stat": "p90"}))
        step = max(1, math.ceil(x.size / MAX_POINTS))
        for j, v in enumerate(x[::step]):
            jitter = ((j * 7919) % 13 - 6) * 0.9  # deterministic spread, no RNG in a view
            clipped = float(v) > edge  # drawn at the edge, its value still in data-value
            out.append(_mark("circle", "sample clipped" if clipped else "sample", float(v),
                             _fmt(float(v), unit) + (" (beyond the axis)" if clipped else ""),
                             {"cx": f"{scale(min(float(v), edge)):.1f}",
                              "cy": f"{yc + jitter:.1f}", "r": 2.2 if clipped else 1.6}))
        beyond = int(np.sum(x > edge))
        if beyond:
            out.append(f'<text class="note" x="{LABEL_W + PLOT_W - 4}" y="{yc - 11:.1f}" '
                       f'text-anchor="end">{beyond} beyond axis, max '
                       f"{escape(_fmt(hi, unit))}</text>")
        out.append(f'<text class="value" x="{LABEL_W + PLOT_W + 8}" y="{yc:.1f}" '
                   f'dominant-baseline="middle">{escape(_fmt(med, unit))}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


@dataclass
class BarRow:
    label: str
    values: dict[str, float | None]
    attrs: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def _color(part: str, i: int) -> str:
    return CATEGORY_COLORS.get(part, PALETTE[i % len(PALETTE)])


def _legend(parts: Sequence[str], y: float) -> list[str]:
    out, x = [], LABEL_W
    for i, p in enumerate(parts):
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{_color(p, i)}"/>')
        out.append(f'<text class="legend" x="{x + 14}" y="{y}">{escape(p)}</text>')
        x += 24 + 7 * len(p)
    return out


def stacked_bars(rows: Sequence[BarRow], parts: Sequence[str], unit: str, title: str,
                 attrs: Mapping[str, Any] | None = None) -> str:
    totals = [sum(v or 0.0 for v in r.values.values()) for r in rows] or [1.0]
    scale = _Scale(0.0, max(totals) * 1.05 or 1.0)
    height = TOP + 16 + ROW_H * len(rows) + BOTTOM
    out = _frame(height, scale, unit, title, "stacked", attrs or {})
    out += _legend(parts, TOP + 6)
    for i, row in enumerate(rows):
        yc = TOP + 16 + ROW_H * i + ROW_H / 2
        out.append(f'<g class="bar"{_attrs(row.attrs)}>')
        out.append(_label(yc, row.label))
        acc = 0.0
        for k, part in enumerate(parts):
            v = row.values.get(part)
            if v is None:
                continue
            out.append(_mark("rect", "segment", v, f"{part}: {_fmt(v, unit)}",
                             {"x": f"{scale(acc):.1f}", "y": f"{yc - 10:.1f}",
                              "width": f"{max(0.0, scale(acc + v) - scale(acc)):.2f}",
                              "height": 20, "fill": _color(part, k)}, {"data-part": part}))
            acc += v
        out.append(f'<text class="value" x="{scale(acc) + 6:.1f}" y="{yc:.1f}" '
                   f'dominant-baseline="middle">{escape(_fmt(acc, unit))}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def grouped_bars(rows: Sequence[BarRow], series: Sequence[str], unit: str, title: str,
                 attrs: Mapping[str, Any] | None = None) -> str:
    values = [v for r in rows for v in r.values.values() if v is not None] or [1.0]
    scale = _Scale(0.0, max(values) * 1.05 or 1.0)
    bar_h = 12
    group_h = bar_h * len(series) + 12
    height = TOP + 16 + group_h * len(rows) + BOTTOM
    out = _frame(height, scale, unit, title, "grouped", attrs or {})
    out += _legend(series, TOP + 6)
    for i, row in enumerate(rows):
        y0 = TOP + 16 + group_h * i + 6
        out.append(f'<g class="bar-group"{_attrs(row.attrs)}>')
        ymid = y0 + bar_h * len(series) / 2
        out.append(_label(ymid - (6 if row.note else 0), row.label))
        for k, name in enumerate(series):
            v = row.values.get(name)
            if v is None:
                continue
            y = y0 + bar_h * k
            out.append(_mark("rect", "bar", v, f"{name}: {_fmt(v, unit)}",
                             {"x": LABEL_W, "y": f"{y:.1f}",
                              "width": f"{max(0.0, scale(v) - LABEL_W):.2f}",
                              "height": bar_h - 2, "fill": _color(name, k)},
                             {"data-series": name}))
            out.append(f'<text class="value" x="{scale(v) + 4:.1f}" y="{y + bar_h / 2:.1f}" '
                       f'dominant-baseline="middle">{escape(_fmt(v, unit))}</text>')
        if row.note:
            out.append(f'<text class="note" x="{LABEL_W - 8}" y="{ymid + 8:.1f}" '
                       f'text-anchor="end" dominant-baseline="middle">'
                       f"{escape(row.note)}</text>")
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)
