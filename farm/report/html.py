"""The report as ONE self-contained HTML page: inline CSS, inline SVG plots, no network.

Contract: `render_html(report) -> str`, `write_html(report, path) -> Path`.

* Nothing is fetched: no external script, style, font or image; a Content-Security-Policy
  meta tag (`default-src 'none'`, inline style/script only) makes the browser refuse any
  that slipped in. It works from a file:// URL with the network off.
* Sections: runs, decision matrix, then per topic (latency, per-op, fusion, memory, size)
  one plot per device followed by the full table, then availability and build time.
* Plots come from `farm.report.svg`: every plotted value has `data-value` (exact float)
  and a `<title>` tooltip. Table cells carry `data-key` and, when numeric, `data-value`.
* The inline script records JS errors (window "error" events) and, once the DOM is
  loaded, appends `<div id="status">ok</div>` (or "error: ..."), with the number of plots
  in `data-plots`, of tables wider than the page in `data-wide-tables` and the tallest
  table row in px in `data-tallest-row`: a headless browser's `--dump-dom` shows whether
  the page ran cleanly and fits (tables: `farm.report.html_tables`).
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from farm.report import opcheck
from farm.report.analysis import Report
from farm.report.configs import CATEGORIES, SIZE_PARTS, Config
from farm.report.emulated import device_labels, emulated_devices
from farm.report.html_tables import CSS as TABLE_CSS
from farm.report.html_tables import HtmlTables
from farm.report.svg import BarRow, DistRow, distribution, grouped_bars, stacked_bars
from farm.report.tables import ReportTable
from farm.results.emulation import device_label

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1240px;
       color: #222; background: #fff; }
h1 { font-size: 24px; margin-bottom: 4px; } h2 { margin-top: 36px; border-bottom: 1px solid
#ddd; } h3 { font-size: 15px; margin: 18px 0 4px; }
p.caption { color: #555; margin: 4px 0 10px; max-width: 1100px; }
table.data { border-collapse: collapse; margin: 8px 0 16px; font-size: 12.5px; }
table.data th, table.data td { border: 1px solid #ddd; padding: 3px 7px; }
table.data th { background: #f4f4f4; text-align: left; }
table.data td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.data tr:hover td { background: #f5f9ff; }
td.status-ok, td.verdict-winner { color: #1a7f37; font-weight: 600; }
td.status-unavailable { color: #888; } td.status-failed, td.status-invalid { color: #c62828; }
.op-flagged { color: #c62828; font-weight: 600; }
td.verdict-no-significant-difference { color: #9a6700; }
svg.plot { display: block; max-width: 100%; height: auto; margin: 6px 0 12px; }
svg .plot-title { font-weight: 600; font-size: 13px; }
svg .row-label, svg .tick, svg .unit, svg .value, svg .legend, svg .note { font-size: 11px; }
svg .note { fill: #555; }
svg .axis { stroke: #444; } svg .grid { stroke: #eee; }
svg .box { fill: #dce7f3; stroke: #4e79a7; } svg .median { stroke: #c62828; stroke-width: 2; }
svg .whisker { stroke: #777; } svg .p90 { stroke: #222; stroke-width: 1.5; }
svg .sample { fill: #4e79a7; fill-opacity: .45; } svg .clipped { fill: #c62828; }
#status { color: #888; font-size: 11px; margin-top: 30px; }
"""

_SCRIPT = """
window.__farmErrors = [];
window.addEventListener('error', function (e) {
  window.__farmErrors.push(String(e.message || e));
});
document.addEventListener('DOMContentLoaded', function () {
  var status = document.createElement('div');
  status.id = 'status';
  status.setAttribute('data-plots', String(document.querySelectorAll('svg.plot').length));
  status.textContent = window.__farmErrors.length
    ? 'error: ' + window.__farmErrors.join('; ') : 'ok';
  // layout facts for a headless check: tables wider than the page, the tallest table row
  var right = document.body.getBoundingClientRect().right + 1, wide = 0, tallest = 0;
  document.querySelectorAll('table.data').forEach(function (t) {
    if (t.getBoundingClientRect().right > right) { wide += 1; }
    t.querySelectorAll('tbody tr').forEach(function (r) {
      tallest = Math.max(tallest, r.getBoundingClientRect().height);
    });
  });
  status.setAttribute('data-wide-tables', String(wide));
  status.setAttribute('data-tallest-row', String(Math.round(tallest)));
  document.body.appendChild(status);
});
"""

_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
        "img-src data:")


# the page frame other pages reuse (the history page, `farm.report.history_html`)
PAGE_CSS, PAGE_SCRIPT, PAGE_CSP = _CSS, _SCRIPT, _CSP


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")


def _table_section(table: ReportTable, tables: HtmlTables) -> str:
    return (f'<p class="caption">{escape(table.caption)}</p>\n' + tables.table(table))


def _cfg_attrs(c: Config) -> dict[str, Any]:
    return {"data-device": c.device, "data-route": c.route, "data-config": c.label,
            "data-variant": c.variant, "data-threads": c.threads}


def _row_label(c: Config, tables: HtmlTables) -> str:
    return f"{c.route} · {tables.short(c.label)}"


def _label(report: Report, device: str) -> str:
    return device_label(device, device in emulated_devices(report))


def _by_device(report: Report) -> dict[str, list[Config]]:
    out: dict[str, list[Config]] = {}
    for c in report.configs:
        out.setdefault(c.device, []).append(c)
    return out


def _latency_plots(report: Report, tables: HtmlTables) -> list[str]:
    plots = []
    for device, configs in _by_device(report).items():
        rows = [DistRow(_row_label(c, tables), c.samples_ms, _cfg_attrs(c)) for c in configs
                if c.measured]
        if rows:
            plots.append(distribution(rows, "ms", f"{_label(report, device)}: latency per "
                                      "inference "
                                      "(box q1–q3, red = median, black tick = p90, dots = "
                                      "samples)", {"data-device": device, "data-plot":
                                                   "latency"}))
    return plots


def _ops_plots(report: Report, tables: HtmlTables) -> list[str]:
    plots = []
    for device, configs in _by_device(report).items():
        rows = [BarRow(_row_label(c, tables), dict(cats), _cfg_attrs(c))
                for c in configs if (cats := c.categories_ms()) is not None]
        if rows:
            plots.append(stacked_bars(rows, CATEGORIES, "ms",
                                      f"{_label(report, device)}: per-op time by category",
                                      {"data-device": device, "data-plot": "ops"}))
    return plots


def _ops_warnings(table: ReportTable) -> list[str]:
    return [f'<p class="warning op-flagged">{escape(line)}</p>'
            for line in opcheck.warning_lines(table)]


def _fusion_plots(report: Report) -> list[str]:
    plots = []
    devices = list(dict.fromkeys(e.device for e in report.fusion))
    for device in devices:
        rows = []
        for e in report.fusion:
            if e.device != device:
                continue
            note = (f"{e.reduction_pct:+.1f} % [{e.ci_low_pct:+.1f}, {e.ci_high_pct:+.1f}]"
                    + ("" if e.significant else f" ({e.verdict})"))
            rows.append(BarRow(f"{e.route} · {e.block}", {"off": e.off_ms, "on": e.on_ms},
                               {"data-device": e.device, "data-route": e.route,
                                "data-block": e.block, "data-variant": e.variant,
                                "data-threads": e.threads,
                                "data-reduction": repr(e.reduction_pct)}, note))
        plots.append(grouped_bars(rows, ("off", "on"), "ms",
                                  f"{_label(report, device)}: fusion off vs on (reduction, 95% CI)",
                                  {"data-device": device, "data-plot": "fusion"}))
    return plots


def _memory_plots(report: Report, tables: HtmlTables) -> list[str]:
    plots = []
    for device, configs in _by_device(report).items():
        rows = [BarRow(_row_label(c, tables), {"VmHWM": c.peak("peak_vmhwm_kb"),
                                       "PSS": c.peak("peak_pss_kb")}, _cfg_attrs(c))
                for c in configs if c.measured and c.peak("peak_vmhwm_kb") is not None]
        if rows:
            plots.append(grouped_bars(rows, ("VmHWM", "PSS"), "KiB",
                                      f"{_label(report, device)}: peak memory",
                                      {"data-device": device, "data-plot": "memory"}))
    return plots


def _size_plots(report: Report, tables: HtmlTables) -> list[str]:
    plots = []
    for device, configs in _by_device(report).items():
        rows = []
        for c in configs:
            sizes = c.first_json("sizes")
            if sizes and c.measured:
                rows.append(BarRow(_row_label(c, tables), {
                    p: float(sizes[p]) / 1024.0 for p in SIZE_PARTS
                    if isinstance(sizes.get(p), (int, float))}, _cfg_attrs(c)))
        if rows:
            plots.append(stacked_bars(rows, SIZE_PARTS, "KiB",
                                      f"{_label(report, device)}: binary size",
                                      {"data-device": device, "data-plot": "size"}))
    return plots


def _runs_html(report: Report) -> str:
    if not report.runs:
        return "<p>Records given directly (no run metadata).</p>"
    rows = "".join(
        f"<tr><td>{escape(str(r.get('run_id')))}</td><td>{escape(str(r.get('started_utc')))}"
        f"</td><td>{escape(str(r.get('status')))}</td><td>{r.get('n_records')}</td>"
        f"<td><code>{escape(str(r.get('command')))}</code></td></tr>" for r in report.runs)
    return ('<table class="data" data-table="runs"><thead><tr><th>run</th><th>started UTC'
            "</th><th>status</th><th>records</th><th>command</th></tr></thead><tbody>"
            f"{rows}</tbody></table>")


def render_html(report: Report) -> str:
    t = report.tables
    tables = HtmlTables(c.label for c in report.configs)

    def sec(name: str) -> str:
        return _table_section(t[name], tables)

    sections = [
        ("Runs", [_runs_html(report)]),
        ("Configurations", []),  # the legend, filled once every table numbered its own
        (t["decision"].title, [sec("decision")]),
        (t["latency"].title, [*_latency_plots(report, tables), sec("latency")]),
        (t["ops"].title, [*_ops_warnings(t["ops"]), *_ops_plots(report, tables), sec("ops")]),
        (t["categories"].title, [sec("categories")]),
        (t["fusion"].title, [*_fusion_plots(report), sec("fusion")]),
        (t["memory"].title, [*_memory_plots(report, tables), sec("memory")]),
        (t["size"].title, [*_size_plots(report, tables), sec("size")]),
        (t["availability"].title, [sec("availability")]),
        (t["build"].title, [sec("build")]),
    ]
    legend = tables.legend()
    sections = [(h, [legend] if h == "Configurations" else parts) for h, parts in sections
                if h != "Configurations" or legend]
    title = (f"farm triangle report — {', '.join(report.models) or 'model ?'} on "
             f"{', '.join(device_labels(report)) or 'no device'}")
    body = [f"<h1>{escape(title)}</h1>",
            f'<p class="caption">Runs {escape(", ".join(report.run_ids) or "-")}. Every '
            "number below is computed from the stored raw records (samples, per-op profile, "
            "sizes, memory readings); hover a plot element for its value.</p>"]
    for heading, parts in sections:
        body.append(f'<section id="{_slug(heading)}"><h2>{escape(heading)}</h2>')
        body += parts
        body.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            f"<title>{escape(title)}</title>\n<style>{_CSS}{TABLE_CSS}</style>\n"
            f"<script>{_SCRIPT}</script>\n</head><body>\n" + "\n".join(body)
            + "\n</body></html>\n")


def write_html(report: Report, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(report), encoding="utf-8")
    return out
