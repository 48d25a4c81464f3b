"""The history page: one self-contained HTML file, built like the triangle report's
(`farm.report.html`: inline CSS and SVG, the same Content-Security-Policy, no network, the
same status script a headless browser reads back).

Contract: `render_history(history) -> str`, `write_history(history, path) -> Path`.
* First, per model and device: one line plot per series (route x variant x threads):
  the median of each point joined in time order, the bootstrap 95 % CI of the median as a shaded
  band, every point a circle labelled under the axis with its run id and farm commit
  (and a tooltip with date, median, CI and n). Plots and points carry `data-*`
  attributes (`data-series`, `data-run`, `data-commit`, `data-value`) that tests read back.
* "Largest changes": consecutive points of a series, largest relative change first
  (`farm.report.history.Change`), with whether the CIs are apart.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from farm.report.history import History, Series
from farm.report.html import PAGE_CSP, PAGE_CSS, PAGE_SCRIPT
from farm.report.html_tables import CSS as TABLE_CSS
from farm.report.svg import nice_ticks

W, LEFT, RIGHT, TOP, PLOT_H, LABELS_H = 1100, 70, 190, 30, 170, 135
MAX_CHANGES = 25
_CSS = """
svg .band { fill: #4e79a7; fill-opacity: .18; stroke: none; }
svg .line { fill: none; stroke: #4e79a7; stroke-width: 2; }
svg .point { fill: #4e79a7; stroke: #fff; stroke-width: 1; }
svg .point-label { font-size: 10px; fill: #444; }
td.change-up { color: #c62828; font-weight: 600; } td.change-down { color: #1a7f37;
font-weight: 600; }
"""


def _a(value: object) -> str:
    return escape(str(value), quote=True)


def _plot(series: Series) -> str:
    pts = series.points
    lo = min(p.ci_low_ms for p in pts)
    hi = max(p.ci_high_ms for p in pts)
    pad = (hi - lo) * 0.1 or max(hi * 0.05, 0.01)
    y0, y1 = max(0.0, lo - pad), hi + pad
    plot_w = W - LEFT - RIGHT
    step = plot_w / max(1, len(pts) - 1) if len(pts) > 1 else 0.0

    def x(i: int) -> float:
        return LEFT + (i * step if len(pts) > 1 else plot_w / 2)

    def y(v: float) -> float:
        return TOP + (y1 - v) / (y1 - y0) * PLOT_H

    height = TOP + PLOT_H + LABELS_H
    out = [f'<svg class="plot history" role="img" viewBox="0 0 {W} {height}" width="{W}" '
           f'height="{height}" data-series="{_a(series.name)}" data-points="{len(pts)}">',
           f"<title>{escape(series.name)}</title>",
           f'<text class="plot-title" x="{LEFT}" y="16">{escape(series.name)}: median '
           "per run, band = 95% CI of the median</text>"]
    for t in nice_ticks(y0, y1, 5):
        out.append(f'<line class="grid" x1="{LEFT}" y1="{y(t):.1f}" x2="{W - RIGHT}" '
                   f'y2="{y(t):.1f}"/><text class="tick" x="{LEFT - 6}" y="{y(t) + 4:.1f}" '
                   f'text-anchor="end">{t:g}</text>')
    out.append(f'<text class="unit" x="{LEFT - 6}" y="{TOP - 6}" text-anchor="end">ms</text>')
    out.append(f'<line class="axis" x1="{LEFT}" y1="{TOP + PLOT_H}" x2="{W - RIGHT}" '
               f'y2="{TOP + PLOT_H}"/>')
    upper = [f"{x(i):.1f},{y(p.ci_high_ms):.1f}" for i, p in enumerate(pts)]
    lower = [f"{x(i):.1f},{y(p.ci_low_ms):.1f}" for i, p in reversed(list(enumerate(pts)))]
    if len(pts) > 1:
        out.append(f'<polygon class="band" points="{" ".join(upper + lower)}"/>')
        line = " ".join(f"{x(i):.1f},{y(p.median_ms):.1f}" for i, p in enumerate(pts))
        out.append(f'<polyline class="line" points="{line}"/>')
    else:
        p = pts[0]
        out.append(f'<rect class="band" x="{x(0) - 6:.1f}" y="{y(p.ci_high_ms):.1f}" '
                   f'width="12" height="{max(1.0, y(p.ci_low_ms) - y(p.ci_high_ms)):.1f}"/>')
    for i, p in enumerate(pts):
        tip = (f"run {p.run_id}, farm {p.commit}, {p.when}: median {p.median_ms:.3f} ms, "
               f"95% CI [{p.ci_low_ms:.3f}, {p.ci_high_ms:.3f}], n={p.n}")
        out.append(f'<circle class="point" cx="{x(i):.1f}" cy="{y(p.median_ms):.1f}" r="4" '
                   f'data-value="{p.median_ms!r}" data-low="{p.ci_low_ms!r}" '
                   f'data-high="{p.ci_high_ms!r}" data-run="{_a(p.run_id)}" '
                   f'data-commit="{_a(p.commit)}"><title>{escape(tip)}</title></circle>')
        lx, ly = x(i), TOP + PLOT_H + 8
        out.append(f'<text class="point-label" transform="translate({lx:.1f},{ly}) '
                   f'rotate(35)">{escape(p.run_id)} · {escape(p.commit[:8])}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _changes_table(history: History) -> str:
    rows = []
    for c in history.changes[:MAX_CHANGES]:
        cls = "change-up" if c.pct > 0 else "change-down"
        rows.append(
            f'<tr data-series="{_a(c.series.name)}" data-pct="{c.pct!r}">'
            f"<td>{escape(c.series.name)}</td>"
            f"<td>{escape(c.before.run_id)}<br><code>{escape(c.before.commit[:12])}</code></td>"
            f"<td>{escape(c.after.run_id)}<br><code>{escape(c.after.commit[:12])}</code></td>"
            f'<td class="num">{c.before.median_ms:.3f}</td>'
            f'<td class="num">{c.after.median_ms:.3f}</td>'
            f'<td class="num {cls}">{c.pct:+.1f} %</td>'
            f"<td>{'yes' if c.clear else 'no (overlap)'}</td></tr>")
    if not rows:
        return "<p>Every series has one point: nothing changed yet.</p>"
    return ('<table class="data" data-table="changes"><thead><tr><th>series</th>'
            "<th>from run · commit</th><th>to run · commit</th><th>median before (ms)</th>"
            "<th>median after (ms)</th><th>change</th><th>CIs apart</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def render_history(history: History) -> str:
    title = "farm history — " + ", ".join(sorted({s.model for s in history.series}))
    shown = {k: v for k, v in history.filters.items() if v}
    body = [f"<h1>{escape(title)}</h1>",
            f'<p class="caption">From {escape(history.where)}'
            + (f", filtered by {escape(str(shown))}" if shown else "")
            + f": {len(history.series)} series, "
            f"{sum(len(s.points) for s in history.series)} measured records. Each point is "
            "one stored record: its median and the bootstrap 95% CI of the median, computed "
            "from its raw samples; labels are run id · farm commit. The largest changes "
            'are <a href="#largest-changes">tabled below</a>.</p>']
    model = device = None
    for s in history.series:
        if s.model != model:
            if model is not None:
                body.append("</section>")
            model, device = s.model, None
            body.append(f'<section data-model="{_a(s.model)}"><h2>{escape(s.model)}</h2>')
        if s.device != device:
            device = s.device
            body.append(f"<h3>{escape(s.device)}{' (emulated)' if s.emulated else ''}</h3>")
        body.append(_plot(s))
    if model is not None:
        body.append("</section>")
    body += ['<section id="largest-changes"><h2>Largest changes</h2>'
             '<p class="caption">Between consecutive points of a series, largest relative '
             "change of the median first. “CIs apart” is a hint; `farm compare "
             "--max-slowdown` tests the raw samples.</p>", _changes_table(history),
             "</section>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{PAGE_CSP}">\n'
            f"<title>{escape(title)}</title>\n<style>{PAGE_CSS}{TABLE_CSS}{_CSS}</style>\n"
            f"<script>{PAGE_SCRIPT}</script>\n</head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


def write_history(history: History, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_history(history), encoding="utf-8")
    return out
