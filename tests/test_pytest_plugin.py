"""The pytest plugin, used the way a team would: a sample suite run by a real pytest
subprocess (`pytest -p farm.pytest_plugin`) against `local` and the lab's emulated pixel7."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

SAMPLE = '''
import pytest

def test_tiny_is_fast(farm_bench):
    result = farm_bench(model="tiny", route="ort")
    assert result.median_ms < 1000
    assert result.p90_ms >= result.median_ms and result.n >= 10 * result.rounds
    print("ROUNDS", result.rounds)

def test_no_slower_than_main(farm_bench):
    result = farm_bench(model="tiny", route="ort")
    check = result.no_slower_than("main", "10%")
    assert check, check
    print("GATE", check.verdict, "EMULATED", result.emulated,
          "EMULATOR", result.record["cpu_info"].get("emulator"))

def test_that_fails_keeps_no_lease(farm_device):
    assert farm_device.name == "never"
'''


def _pytest(tmp_path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("FARM_INVENTORY", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "farm.pytest_plugin", "-p", "no:cacheprovider",
         "-rA", "-s", "--farm-store", str(tmp_path / "r.sqlite"), *args, "sample"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def _suite(tmp_path: Path) -> None:
    (tmp_path / "sample").mkdir(exist_ok=True)
    (tmp_path / "sample" / "test_sample.py").write_text(SAMPLE)


def _leases(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "home").glob("locks/*.lease"))


def test_entry_point_loads_the_plugin_alone_and_next_to_dash_p(tmp_path):
    """pyproject's pytest11 entry point, installed as pip would (a dist-info on the path):
    pytest loads the plugin by itself, and `-p farm.pytest_plugin` does not load it twice."""
    text = (REPO / "pyproject.toml").read_text()
    section = text.split("[project.entry-points.pytest11]\n", 1)[1].split("\n", 1)[0]
    name, value = (part.strip().strip('"') for part in section.split("="))
    assert value == "farm.pytest_plugin"
    info = tmp_path / "site" / "farm-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: farm\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\n{name} = {value}\n")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_a.py").write_text(
        "def test_a(farm_session):\n    assert farm_session.device_name == 'local'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path / "site")])}
    for extra in ([], ["-p", "farm.pytest_plugin"]):
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *extra, "t"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr


def test_sample_suite_on_local(tmp_path):
    _suite(tmp_path)
    first = _pytest(tmp_path, "-k", "fast", "--farm-tag", "main")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "farm benchmarks" in first.stdout and "local ort tiny-fp32" in first.stdout
    assert "median " in first.stdout and "tagged 1 run(s) as 'main'" in first.stdout
    assert "ROUNDS 6" in first.stdout  # the default: the fewest a gate can judge
    # the device's noise floor, into the suite's store: two A/A pairs of tiny on ort
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cal = subprocess.run([sys.executable, "-m", "farm.cli.main", "devices", "calibrate", "local",
                          "--pairs", "2", "--rounds", "4", "--store", str(tmp_path / "r.sqlite")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert cal.returncode == 0 and "local: noise floor ±" in cal.stdout, cal.stdout + cal.stderr
    junit = tmp_path / "junit.xml"
    second = _pytest(tmp_path, f"--junitxml={junit}")
    out = second.stdout
    # the deliberate failure fails alone; the gate against main passes on an unchanged model
    assert second.returncode == 1, out + second.stderr
    assert "2 passed" in out and "1 failed" in out, out
    assert any(f"GATE {v}" in out for v in ("not slower", "within limit", "within noise",
                                             "slower, not significant")), out
    assert "gate vs main (p10, limit +10.0%)" in out and "over 6/6 rounds, floor ±" in out
    assert "n " in out and " in 6 rounds (run " in out
    assert not _leases(tmp_path), "a lease outlived its test"
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).iter("property")}
    assert float(props["farm.local.ort.median_ms"]) > 0
    assert props["farm.local.ort.emulated"] == "False"
    assert "vs main" in props["farm.local.ort.gate.main"]


def test_a_device_that_is_down_is_skipped_with_the_reason(tmp_path):
    _suite(tmp_path)
    inv = tmp_path / "devices.yaml"
    inv.write_text("version: 1\ndevices:\n  - name: ghost\n    transport: ssh\n"
                   "    host: 127.0.0.1\n    port: 9\n    arch: x86_64\n")
    proc = _pytest(tmp_path, "--farm-inventory", str(inv), "--farm-device", "ghost")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 skipped" in proc.stdout
    assert "farm device ghost is down" in proc.stdout
    assert "farm benchmarks" not in proc.stdout


@pytest.mark.lab
@pytest.mark.aarch64
def test_sample_suite_on_the_lab_pixel7_is_emulated_and_not_gated(lab, tmp_path):
    lab.require("pixel7")
    from farm.inventory import load_inventory

    inventory = load_inventory(str(lab.inventory_path))  # `farm lab` writes the flag
    assert inventory.get("pixel7").emulated and not inventory.get("lab1").emulated
    _suite(tmp_path)
    # an emulated device is never gated: 2 rounds (--farm-rounds), as a team would run it
    opts = ["--farm-inventory", str(lab.inventory_path), "--farm-device", "pixel7",
            "--farm-rounds", "2"]
    first = _pytest(tmp_path, *opts, "-k", "fast", "--farm-tag", "main", timeout=1200)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "pixel7 (emulated) ort tiny-fp32" in first.stdout
    assert "[emulated: not gated]" in first.stdout and "ROUNDS 2" in first.stdout
    print(first.stdout.split("farm benchmarks")[-1])  # the figures, for the record (-s)
    second = _pytest(tmp_path, *opts, "-k", "main", timeout=1200)
    out = second.stdout
    assert second.returncode == 0, out + second.stderr
    # detected by the agent itself (qemu-user), not only the lab inventory's flag
    assert "GATE not compared: emulated EMULATED True EMULATOR /usr/bin/qemu-aarch64" in out
    assert not _leases(tmp_path)
