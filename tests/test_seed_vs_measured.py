"""scripts/seed_vs_measured.py writes its document from the store, never from typed numbers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from test_report_data import constructed_records, write_store

from farm.paths import REPO_ROOT
from farm.report.analysis import load_report
from farm.report.tables import cell


def _script():
    spec = importlib.util.spec_from_file_location(
        "seed_vs_measured", REPO_ROOT / "scripts" / "seed_vs_measured.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_document_is_written_from_the_stored_run(tmp_path: Path) -> None:
    recs = constructed_records(devices=("local", "pixel7"))
    for r in recs:
        r["model"], r["variant"] = "mobilebert-int8-dynamic", "int8-dynamic"
        if r["device"] == "pixel7":
            r["arch"] = "aarch64"
            r["accuracy"] = {"ok": True, "cosine": 0.9987, "detail": "within tolerance"}
    store, run_id = write_store(tmp_path / "r.sqlite", recs)
    out = tmp_path / "seed.md"
    mod = _script()
    assert mod.main(["--store", str(store.path), "--out", str(out)]) == 0
    text = out.read_text()
    # the seed column: the seed article's own figures, cited, next to the store's
    assert "Seed column: the seed article, iPhone 14 Pro (Apple A16" in text
    assert "| end-to-end ort (ms) | 24.7 ms |" in text
    assert "| custom binary size (KiB) | 1.8 MB |" in text
    assert "| tvm fusion effect (attention) | +34.4 % (320 → 210 µs) |" in text
    assert "| ort fusion effect (attention) | not stated |" in text
    assert "The seed article: custom 13.8% faster than ort end to end; measured:" in text
    assert "not in repo" not in text
    report = load_report(store, [run_id])
    lat = report.tables["latency"]
    ort = next(r for r in lat.rows if r["device"] == "local" and r["route"] == "ort"
               and "disable" not in str(r["config"]))  # the optimised (fused) ORT config
    assert cell(lat.column("median_ms"), ort["median_ms"]) in text  # the store's own figure
    assert f"runs {run_id}" in text and "scripts/seed_vs_measured.py" in text
    assert "## The emulated aarch64 device (pixel7)" in text
    assert "aarch64 under qemu" in text and "0.9987" in text
    assert "What each op category holds" in text and "## Reading" in text
