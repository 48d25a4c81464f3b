"""The HTML report: self-contained, its plots show the measured values, and it renders in
headless Chromium without JS errors (the page writes <div id="status">ok</div> only then)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest
from test_report_data import constructed_records, write_store

from farm.report.analysis import load_report
from farm.report.html import render_html, write_html

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "wbr", "source"}


class Dom(HTMLParser):
    """Every element with its attributes and the merged data-* attributes of its ancestors."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict[str, str]]] = []
        self.elements: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self.text: dict[str, str] = {}
        self._capture: tuple[str, int] | None = None

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        inherited: dict[str, str] = {}
        for _, parent in self.stack:
            inherited.update({k: v for k, v in parent.items() if k.startswith("data-")})
        self.elements.append((tag, a, inherited))
        if tag not in VOID:
            self.stack.append((tag, a))
        if a.get("id"):
            self._capture = (a["id"], len(self.stack))
            self.text[a["id"]] = ""

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if self._capture and len(self.stack) <= self._capture[1]:
            self._capture = None
        while self.stack:
            open_tag, _ = self.stack.pop()
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self._capture:
            self.text[self._capture[0]] += data

    def find(self, tag=None, cls=None):
        return [(a, inh) for t, a, inh in self.elements
                if (tag is None or t == tag) and (cls is None or cls in a.get("class", "").split())]


def parse(html: str) -> Dom:
    dom = Dom()
    dom.feed(html)
    return dom


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    store, run_id = write_store(tmp_path_factory.mktemp("store") / "r.sqlite",
                                constructed_records())
    rep = load_report(store, [run_id])
    store.close()
    return rep


def check_plots_show_measured_values(dom: Dom, report) -> int:
    """Compare every plotted value in the DOM with the measured one; returns how many."""
    configs = {(c.device, c.route, c.label): c for c in report.configs}
    checked = 0
    medians = dom.find("line", "median")
    assert len(medians) == sum(1 for c in report.configs if c.measured)
    for attrs, inh in medians:
        c = configs[(inh["data-device"], inh["data-route"], inh["data-config"])]
        assert float(attrs["data-value"]) == pytest.approx(np.median(c.samples_ms), rel=1e-12)
        assert int(inh["data-n"]) == len(c.samples_ms)
        checked += 1
    for attrs, inh in dom.find("line", "p90"):
        c = configs[(inh["data-device"], inh["data-route"], inh["data-config"])]
        assert float(attrs["data-value"]) == pytest.approx(np.percentile(c.samples_ms, 90))
        checked += 1
    samples = dom.find("circle", "sample")
    for attrs, inh in samples:
        c = configs[(inh["data-device"], inh["data-route"], inh["data-config"])]
        assert float(attrs["data-value"]) in c.samples_ms  # a real sample, exactly
    assert len(samples) == sum(len(c.samples_ms) for c in report.configs)  # all < 400/row
    checked += len(samples)
    for attrs, inh in dom.find("rect", "segment"):
        c = configs[(inh["data-device"], inh["data-route"], inh["data-config"])]
        part = attrs["data-part"]
        if part in ("runtime", "code", "weights"):
            expected = c.first_json("sizes")[part] / 1024
        else:
            # a category a runner does not emit (`fallback` outside the custom route) is 0,
            # as Config.categories_ms reads it
            expected = np.mean([r["ops"]["categories"].get(part) or 0.0 for r in c.records])
        assert float(attrs["data-value"]) == pytest.approx(expected, rel=1e-12)
        checked += 1
    fusion = {(e.device, e.route, e.block): e for e in report.fusion}
    mem_bars = fusion_bars = 0
    for attrs, inh in dom.find("rect", "bar"):
        series, value = attrs["data-series"], float(attrs["data-value"])
        if series in ("off", "on"):
            e = fusion[(inh["data-device"], inh["data-route"], inh["data-block"])]
            assert value == (e.off_ms if series == "off" else e.on_ms)
            assert float(inh["data-reduction"]) == e.reduction_pct
            fusion_bars += 1
        else:
            c = configs[(inh["data-device"], inh["data-route"], inh["data-config"])]
            key = "peak_vmhwm_kb" if series == "VmHWM" else "peak_pss_kb"
            assert value == max(r[key] for r in c.records)
            mem_bars += 1
    assert fusion_bars == 2 * len(report.fusion)
    assert mem_bars == 2 * sum(1 for c in report.configs if c.measured)
    return checked + mem_bars + fusion_bars


def test_page_is_self_contained(report):
    html = render_html(report)
    lowered = html.lower()
    for needle in ("http://", "https://", "<link", " src=", "@import", "url("):
        assert needle not in lowered, needle
    assert "default-src 'none'" in html


def test_plots_and_tables_carry_the_measured_values(report):
    dom = parse(render_html(report))
    assert check_plots_show_measured_values(dom, report) > 100
    plots = {a["data-plot"] for a, _ in dom.find("svg") if "data-plot" in a}
    assert plots == {"latency", "ops", "fusion", "memory", "size"}
    cells = [(a, inh) for a, inh in dom.find("td") if a.get("data-key") == "median_ms"
             and "data-value" in a]
    medians = [r["median_ms"] for r in report.tables["latency"].rows
               if r["median_ms"] is not None]
    assert [float(a["data-value"]) for a, _ in cells][:len(medians)] == medians


def _png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def _dump(flags, url):
    """(DOM after the page's script ran, browser console lines that signal a problem)."""
    done = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True,
                          timeout=120, check=True)
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line
               or "Uncaught" in line or "Refused to" in line]
    return parse(done.stdout), console


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")
def test_renders_in_headless_chromium(report, tmp_path):
    page = write_html(report, tmp_path / "report.html")
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--enable-logging=stderr",
             "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    url = page.resolve().as_uri()
    dom, console = _dump(flags, url)
    assert console == [], console
    assert dom.text.get("status") == "ok", dom.text.get("status")
    status = next(a for a, _ in dom.find("div") if a.get("id") == "status")
    assert int(status["data-plots"]) == len(dom.find("svg", "plot")) >= 5
    assert check_plots_show_measured_values(dom, report) > 100

    shot = tmp_path / "shot.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1400,3000", url],
                   capture_output=True, text=True, timeout=120, check=True)
    assert _png_size(shot) == (1400, 3000)
    # a blank or error page compresses to a few KB; plots and tables do not
    assert shot.stat().st_size > 50_000

    # the check can fail: the same page with a script error is caught both ways
    broken = tmp_path / "broken.html"
    broken.write_text(page.read_text().replace(
        "</body>", "<script>window.noSuchFunction();</script></body>"))
    dom, console = _dump(flags, broken.resolve().as_uri())
    assert dom.text.get("status", "").startswith("error:")
    assert any("noSuchFunction" in line for line in console)


LONG_KERNELS = [f"fused_matmul{i}_cast2_multiply_subtract3_cast3_multiply{i}_multiply2_add1_"
                f"add2_add2_multiply3_add3_relu_prepacked" for i in range(6)]


@pytest.fixture(scope="module")
def wide_report(tmp_path_factory):
    """What overflowed a 1400 px window: ORT's ~100-character configuration on every ORT
    row, TVM's fused kernels (90-character names) in the categories table."""
    recs = constructed_records()
    for r in recs:
        if r["route"] == "ort":
            level = r["build_flags"]["graph_optimization"]
            r["build_flags"] = {"opt_level": level, "provider": "CPUExecutionProvider",
                                "session_config": {"session.intra_op.allow_spinning": "1"}}
        if r["route"] == "tvm" and r.get("ops"):
            r["ops"]["nodes"] += [{"name": k, "op": k, "category": "fc", "ms": 0.1}
                                  for k in LONG_KERNELS]
    store, run_id = write_store(tmp_path_factory.mktemp("wide") / "r.sqlite", recs)
    rep = load_report(store, [run_id])
    store.close()
    return rep


def test_long_configurations_are_numbered_once(wide_report):
    html = render_html(wide_report)
    label = ('opt=all, provider=CPUExecutionProvider, '
             'session_config={"session.intra_op.allow_spinning":"1"}')
    dom = parse(html)
    legend = [a for a, _ in dom.find("li") if a.get("data-config") == label]
    assert len(legend) == 1 and legend[0]["id"].startswith("cfg-")
    cells = [a for a, _ in dom.find("td") if a.get("data-key") == "config"
             and a.get("data-config") == label]
    assert cells and all(a["title"] == label for a in cells)
    # shown whole once (the legend), never in a row
    assert html.count(f">{label.replace(chr(34), '&quot;')}<") == 1


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium is not installed")
def test_tables_fit_a_1400_px_window(wide_report, tmp_path):
    """In headless Chromium at 1400 px no table is wider than the page (the per-op table's
    'flagged' and the fusion table's 'uncertainty' columns were cut) and no table row is a
    tall, mostly blank block (the categories table's TVM rows were ~500 px)."""
    page = write_html(wide_report, tmp_path / "wide.html")
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--window-size=1400,3000", f"--user-data-dir={tmp_path / 'profile'}"]
    dom, _ = _dump(flags, page.resolve().as_uri())
    status = next(a for a, _ in dom.find("div") if a.get("id") == "status")
    assert dom.text.get("status") == "ok"
    assert status["data-wide-tables"] == "0", status
    assert int(status["data-tallest-row"]) < 200, status
    heads = {a.get("data-key") for a, _ in dom.find("th")}
    assert {"op_flagged", "method"} <= heads  # "flagged", "uncertainty"
