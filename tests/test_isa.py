"""ISA levels (farm/isa.py) and caps: which level a device has, what a cap takes away from
TVM's target, where a cap is an error (naming the device's level), how FARM_ISA and --isa
reach a bench, the `isa` record field (schema v4) and the report's caption when capped
routes meet ORT, which cannot be capped. Pure functions and the CLI's usage errors: no
build, no bench (the capped bench of the suite is tests/test_bench_local.py's)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from farm import isa
from farm.bench.config import BenchConfig
from farm.bench.records import make_record
from farm.cli.main import main
from farm.errors import UsageError
from farm.inventory.builtin import local_device
from farm.inventory.capped import cap_all, capped, require_arch
from farm.inventory.device import Device
from farm.results.schema import SCHEMA_VERSION
from farm.results.store import ResultStore
from farm.routes.tvm.target import target_spec

ZEN3 = Device(name="zen3", transport="ssh", arch="x86_64", triple="x86_64-linux-gnu",
              features=("avx2", "f16c", "fma"), cores=2, host="127.0.0.1")
SPR = Device(name="spr", transport="ssh", arch="x86_64", triple="x86_64-linux-gnu",
             features=("amx-int8", "amx-tile", "avx2", "avx512bw", "avx512f", "avx512vnni",
                       "avxvnni", "fma"), cores=2, host="127.0.0.1")
PIXEL7 = Device(name="pixel7", transport="ssh", arch="aarch64", triple="aarch64-linux-gnu",
                features=("dotprod", "neon"), cores=8, host="127.0.0.1")


def test_a_device_level_is_the_widest_it_runs() -> None:
    assert (ZEN3.level, SPR.level, PIXEL7.level) == ("avx2", "amx", "dotprod")
    assert isa.runnable("x86_64", SPR.features) == ["avx2", "avx2-vnni", "avx512",
                                                    "avx512-vnni", "amx"]
    assert isa.native_level("x86_64", ("sse4.2",)) == "x86-64"
    assert isa.native_level("aarch64", ("neon", "dotprod", "i8mm")) == "i8mm"


def test_a_cap_takes_the_wider_features_out_of_the_tvm_target() -> None:
    spec = target_spec(capped(SPR, "avx2"))
    assert [a for a in spec["mattr"] if a.startswith("+")] == ["+avx2", "+fma"]
    assert {"-avx512f", "-avx512vnni", "-amx-tile", "-avxvnni"} <= set(spec["mattr"])
    assert spec["vector-width"] == 256
    no_vnni = target_spec(capped(SPR, "avx512"))
    assert "+avx512f" in no_vnni["mattr"] and "-avx512vnni" in no_vnni["mattr"]
    assert "vector-width" not in no_vnni  # TVM's own x86 answer is already 512
    # an uncapped AVX2 device says 256 itself: TVM would assume 512 for any x86 target
    assert target_spec(ZEN3)["vector-width"] == 256 and "-avx512f" not in target_spec(ZEN3)[
        "mattr"]
    assert target_spec(capped(PIXEL7, "baseline"))["mattr"] == ["+neon", "-dotprod",
                                                                "-i8mm", "-sve"]


def test_a_cap_above_the_device_names_its_level() -> None:
    with pytest.raises(UsageError, match="lacks avx512bw, avx512f; its level is avx2"):
        capped(ZEN3, "avx512")
    with pytest.raises(UsageError, match="aarch64 level; device 'zen3' is x86_64"):
        capped(ZEN3, "dotprod")
    with pytest.raises(UsageError, match="unknown ISA level 'avx1024'"):
        isa.requested("avx1024")
    # a mixed fleet: the cap is for the devices of its arch, the others run at their own
    fleet = cap_all([SPR, PIXEL7], "avx2")
    assert [(d.isa, d.isa_level) for d in fleet] == [("avx2", "avx2"), (None, "dotprod")]
    assert [d.isa for d in cap_all(fleet, None)] == [None, None]
    with pytest.raises(UsageError, match="no selected device is x86_64"):
        require_arch([PIXEL7], "avx2")


def test_farm_isa_caps_local_and_is_the_bench_default(monkeypatch: pytest.MonkeyPatch) -> None:
    host = local_device()
    below = isa.runnable(host.arch, host.features)
    if not below:
        pytest.skip(f"this host runs no {host.arch} level")
    monkeypatch.setenv(isa.ENV, below[0])
    assert local_device().isa == below[0] and BenchConfig().isa == below[0]
    assert BenchConfig(isa="native").isa is None and BenchConfig(isa=None).isa is None
    monkeypatch.setenv(isa.ENV, "native")
    assert local_device().isa is None and BenchConfig().isa is None
    # a run stored before caps existed resumes uncapped, whatever the environment says
    monkeypatch.setenv(isa.ENV, below[0])
    meta = BenchConfig(isa=None).to_meta()
    del meta["isa"]
    assert BenchConfig.from_meta(meta).isa is None


def test_records_carry_the_level_their_route_ran_at() -> None:
    config = BenchConfig(isa=None)
    cut = capped(SPR, "avx2")
    kw = {"run_id": "r", "hello": None, "config": config, "model_label": "m",
          "model_hash": None, "status": "ok"}
    assert make_record(device=cut, route="custom", **kw)["isa"] == "avx2"
    assert make_record(device=cut, route="tvm", **kw)["isa"] == "avx2"
    assert make_record(device=cut, route="ort", **kw)["isa"] == "amx"  # ORT is not capped
    assert make_record(device=SPR, route="custom", **kw)["isa"] == "amx"


def test_a_version3_store_gains_isa_and_old_records_read_none(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with ResultStore(path) as store:
        run = store.start_run("farm bench")
        store.add({"run_id": run, "device": "local", "route": "ort", "status": "ok",
                   "samples_ms": [1.0], "isa": "avx2"})
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE records DROP COLUMN isa")
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with ResultStore(path) as store:
        assert store.migrated == ["isa"] and store.records()[0]["isa"] is None
    db = sqlite3.connect(path)
    version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    db.close()
    assert version == str(SCHEMA_VERSION)


def test_report_says_when_capped_routes_meet_uncapped_ort() -> None:
    from farm.report.analysis import analyze

    def rec(route: str, level: str, flags: dict[str, object]) -> dict[str, object]:
        return {"record_id": route, "run_id": "r", "device": "local", "route": route,
                "model": "tiny", "variant": "fp32", "threads": 1, "status": "ok",
                "samples_ms": [1.0, 1.1, 1.2], "isa": level,
                "build_flags": {"route": route, **flags}}

    records = [rec("ort", "avx512-vnni", {"opt_level": "all"}),
               rec("custom", "avx2", {"fusion": True, "isa": "avx2"})]
    report = analyze(records)
    latency = report.tables["latency"]
    assert {r["route"]: r["isa"] for r in latency.rows} == {"ort": "avx512-vnni",
                                                            "custom": "avx2"}
    for name in ("latency", "decision"):
        caption = report.tables[name].caption
        assert "Not like for like on local" in caption and "cannot be capped" in caption
    uncapped = analyze([rec("ort", "avx2", {"opt_level": "all"}),
                        rec("custom", "avx2", {"fusion": True})])
    assert "Not like for like" not in uncapped.tables["latency"].caption


def test_a_benchmark_header_names_each_side_level() -> None:
    from farm.report.isa_note import cap_line

    line = cap_line(SPR, "avx2", "Xeon")
    assert line.startswith("CPU Xeon (level amx)") and "capped at avx2" in line
    assert "ort uncapped at amx" in line and "not like for like" in line
    assert "not like" not in cap_line(SPR, None) and "no cap" in cap_line(ZEN3, "avx2")


def test_cli_refuses_a_level_above_the_host_or_of_another_arch(
        capsys: pytest.CaptureFixture[str]) -> None:
    host = local_device()
    above = [lv.name for lv in isa.LEVELS.get(host.arch, ())
             if lv.name not in isa.runnable(host.arch, host.features)]
    if above:
        assert main(["build", "--routes", "custom", "--isa", above[0]]) == 2
        assert f"its level is {host.level}" in capsys.readouterr().err
    other = next(lv.name for arch, levels in isa.LEVELS.items() if arch != host.arch
                 for lv in levels)
    assert main(["bench", "--isa", other, "--routes", "ort"]) == 2
    assert "no selected device is" in capsys.readouterr().err
