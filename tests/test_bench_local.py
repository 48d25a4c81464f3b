"""Real benches on `local` (the real agent, the real ORT runner, a real store), including a
second `local`-transport device in another work dir to show devices run side by side and
one failing alone."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from farm.bench.config import BenchConfig, Policy
from farm.bench.runner import Bench, resume_plan, run_bench
from farm.inventory.builtin import local_device
from farm.inventory.device import Device
from farm.results.run_checks import partial_run_problems
from farm.results.store import ResultStore
from farm.routes import ROUTES

REPO = Path(__file__).resolve().parent.parent

FAST = Policy(warmup_runs=2, warmup_min_s=0.05, min_runs=20, min_time_s=0.2, max_time_s=2.0)


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def device(tmp_path: Path, name: str = "local") -> Device:
    return dataclasses.replace(local_device(), name=name, workdir=str(tmp_path / f"wd-{name}"))


def agents_running(workdir: str) -> list[int]:
    """Agent or runner processes whose command line mentions this work dir."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().split(") ")[1][0]
        except (OSError, IndexError):
            continue
        if workdir in cmd and state != "Z" and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def test_bench_ort_on_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = device(tmp_path)
    events: list[dict[str, Any]] = []
    host_tmp = tmp_path / "host-tmp"  # where the bench's host-side copies of outputs go
    host_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(host_tmp))
    config = BenchConfig(routes=("ort", "custom"), policy=FAST, pause_s=0.0, profile_runs=1)
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench([dev], config, store, "test", emit=events.append)
        assert result.status == "ok" and result.exit_code == 0
        by_route = {r["route"]: r for r in store.records(result.run_id)}
        assert store.integrity_check().ok
    ort = by_route["ort"]
    assert ort["status"] == "ok", ort["status_detail"]
    assert ort["n"] >= 20 and len(ort["samples_ms"]) == ort["n"]
    assert 0 < ort["median_ms"] <= ort["p90_ms"] <= ort["max_ms"]
    assert ort["load_ms"] > 0 and ort["first_run_ms"] > 0 and ort["warmup_runs"] >= 2
    assert ort["peak_vmhwm_kb"] > 10_000
    assert ort["accuracy"]["ok"] is True and ort["accuracy"]["max_abs_diff"] < 1e-3
    assert set(ort["ops"]["categories"]) >= {"attention", "fc", "layernorm", "gelu", "other"}
    assert ort["state_before"] and ort["state_after"] and isinstance(ort["drift"], list)
    assert len(ort["agent_hash"]) == 64 and ort["cpu_info"]["cores"] >= 1
    assert ort["policy"]["min_runs"] == 20 and ort["policy"]["seed"] == 0
    custom = by_route["custom"]  # built, deployed and run by the bench itself
    assert custom["status"] == "ok", custom["status_detail"]
    assert custom["accuracy"]["cross_routes"] or ort["accuracy"]["cross_routes"]
    assert set(custom["sizes"]) == {"runtime", "code", "weights"}
    kinds = [e["event"] for e in events if e["device"] == dev.name]
    assert kinds[0] == "phase" and kinds[-1] == "device_done"
    assert "samples" in kinds and "route_done" in kinds
    assert not agents_running(dev.workdir)
    # outputs were fetched into the host's temp dir to be checked; nothing of it stays
    assert not list(host_tmp.glob(f"farm-{dev.name}-*"))


def test_device_failing_mid_run_fails_alone(tmp_path: Path) -> None:
    good, bad = device(tmp_path, "good"), device(tmp_path, "bad")
    slow = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=10, min_time_s=1.5, max_time_s=6.0)
    config = BenchConfig(routes=("ort", "custom"), policy=slow, pause_s=0.0, profile_runs=1)
    killed = threading.Event()
    with ResultStore(tmp_path / "r.sqlite") as store:
        bench = Bench([good, bad], config, store, "test")

        def emit(event: dict[str, Any]) -> None:
            # the fault, injected from outside: the bad device's agent is killed mid-route,
            # during its second route
            if event["device"] == "bad" and event["event"] == "stage" and \
                    event["stage"] == "first" and not killed.is_set() and \
                    any(r["device"] == "bad" for r in store.records(bench.run_id)):
                run = next(r for r in bench.runs if r.device.name == "bad")
                assert run.hello is not None
                os.kill(run.hello["pid"], signal.SIGKILL)
                killed.set()

        bench.start(emit)
        assert bench.wait(60)
        result = bench.finish()
        assert killed.is_set()
        assert result.exit_code == 3 and result.status == "partial"
        assert result.devices["good"][0] == "ok"
        status, detail = result.devices["bad"]
        assert status == "failed" and "agent channel closed" in detail
        recs = {(r["device"], r["route"]): r for r in store.records(result.run_id)}
        for route in ("ort", "custom"):
            assert recs[("good", route)]["status"] == "ok" and recs[("good", route)]["n"] >= 10
        # the good device compared its two routes with each other, not only the reference
        cross = [recs[("good", r)]["accuracy"]["cross_routes"] for r in ("ort", "custom")]
        assert sorted(len(c) for c in cross) == [0, 1] and all(c["ok"] for cs in cross for c in cs)
        statuses = sorted(recs[("bad", r)]["status"] for r in ("ort", "custom"))
        assert statuses == ["failed", "partial"]
        lost = next(r for r in recs.values() if r["device"] == "bad" and r["status"] == "failed")
        assert "device lost during this route" in lost["status_detail"]
        kept = next(r for r in recs.values() if r["device"] == "bad" and r["status"] == "partial")
        assert kept["n"] >= 10 and "finished before the device failed" in kept["status_detail"]
        assert store.integrity_check().ok
        assert [r.status for r in store.runs()] == ["partial"]
        assert not partial_run_problems(store, result.run_id, {"bad"})

        # --resume: only the lost route runs again; the run becomes whole
        run_id, resumed_config, names = resume_plan(store, "latest")
        assert run_id == result.run_id and names == ["good", "bad"]
        assert resumed_config == config
        seen: list[dict[str, Any]] = []
        again = run_bench([good, bad], resumed_config, store, "resume", emit=seen.append,
                          resume_run=run_id)
        assert again.status == "ok" and again.exit_code == 0
        assert {e["device"] for e in seen if e["event"] == "route_start"} == {"bad"}
        recs = store.records(run_id)
        assert [r.status for r in store.runs()] == ["ok"]
        live = [r for r in recs if not (r["status_detail"] or "").startswith("superseded")]
        assert sorted((r["device"], r["route"], r["status"]) for r in live) == [
            ("bad", "custom", "ok"), ("bad", "ort", "ok"), ("good", "custom", "ok"),
            ("good", "ort", "ok")]
        superseded = [r for r in recs if r not in live]
        assert len(superseded) == 1 and superseded[0]["device"] == "bad"
        assert store.integrity_check().ok
    assert not agents_running(bad.workdir) and not agents_running(good.workdir)


def test_interrupt_keeps_results_and_leaves_no_agent(tmp_path: Path) -> None:
    devs = [device(tmp_path, "a"), device(tmp_path, "b")]
    config = BenchConfig(policy=Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=5,
                                       min_time_s=0.1, max_time_s=30.0),
                         pause_s=0.0, profile_runs=1, routes=("ort",))
    slow_b = Policy(warmup_runs=1, warmup_min_s=0.0, min_runs=5, min_time_s=20.0,
                    max_time_s=30.0)
    with ResultStore(tmp_path / "r.sqlite") as store:
        bench = Bench(devs, config, store, "test")
        done_a = threading.Event()

        def emit(event: dict[str, Any]) -> None:
            if event["device"] == "b" and event["event"] == "phase" and \
                    event["phase"] == "lease":
                # runs in b's thread before its first request: b measures for 20 s
                run_b = next(r for r in bench.runs if r.device.name == "b")
                run_b.backend.config = run_b.recorder.config = dataclasses.replace(
                    config, policy=slow_b)
            if event["device"] == "a" and event["event"] == "device_done":
                done_a.set()

        bench.start(emit)
        assert done_a.wait(60)
        time.sleep(1.0)
        started = time.monotonic()
        bench.interrupt()  # what Ctrl-C does in `farm bench`
        assert bench.wait(20)
        assert time.monotonic() - started < 15
        result = bench.finish()
        assert result.status == "interrupted" and result.exit_code == 130
        kept = store.records(result.run_id)
        assert [(r["device"], r["status"]) for r in kept] == [("a", "ok")]
        assert store.integrity_check().ok
    for dev in devs:
        assert not agents_running(dev.workdir)


def test_step_lines_when_not_a_tty_and_events_on_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
        ) -> None:
    from farm.cli.main import main
    monkeypatch.setenv("FARM_LOCAL_WORKDIR", str(tmp_path / "wd-cli"))
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./devices.yaml: the fleet is the built-in `local`
    fast = ["--routes", "ort", "--runs", "10", "--min-time", "0.1", "--max-time", "2",
            "--warmup", "1", "--warmup-time", "0", "--profile-runs", "1", "--pause", "0",
            "--store", str(tmp_path / "c.sqlite")]
    # default off a terminal: one human line per step, then the table; no JSON
    assert main(["bench", *fast]) == 0
    out = capsys.readouterr().out
    assert not any(line.startswith("{") for line in out.splitlines())
    # the default: 6 rounds, one line as each starts, one when the key is done
    assert "local: ort (1/6) started" in out and "local: ort (6/6) started" in out
    assert "local: ort ok: median " in out and ", 6 rounds" in out
    assert out.index("local: finished: ok") < out.index("median ms")  # the table is last
    assert len(out.splitlines()) < 30
    # --events -: the JSON event stream on stdout, the human lines on stderr, then the table
    assert main(["bench", "--events", "-", *fast]) == 0
    captured = capsys.readouterr()
    events = [json.loads(line) for line in captured.out.splitlines() if line.startswith("{")]
    assert {"run", "route_start", "samples", "route_done", "device_done"} <= {
        e["event"] for e in events}
    assert "median ms" in captured.out  # the final table follows the event stream
    assert "local: ort ok: median " in captured.err


def test_ctrl_c_on_the_cli_exits_130_and_leaves_no_agent(tmp_path: Path) -> None:
    import subprocess
    import sys
    wd = tmp_path / "wd-sigint"
    env = {**os.environ, "FARM_HOME": str(tmp_path / "home"), "FARM_LOCAL_WORKDIR": str(wd),
           "PYTHONPATH": str(REPO)}
    env.pop("FARM_INVENTORY", None)
    store_path = tmp_path / "s.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-m", "farm.cli.main", "bench", "--routes", "ort", "--runs", "10",
         "--min-time", "30",
         "--max-time", "40", "--warmup", "1", "--warmup-time", "0", "--profile-runs", "1",
         "--store", str(store_path), "--events", "-"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True, cwd=tmp_path)  # no ./devices.yaml there
    assert proc.stdout is not None
    for line in proc.stdout:  # the jsonl events asked for with --events -
        if '"event": "samples"' in line:
            break
    assert agents_running(str(wd))
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does to the group
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not agents_running(str(wd))
    with ResultStore(store_path) as store:
        assert [r.status for r in store.runs()] == ["interrupted"]
        assert store.integrity_check().ok


# A route that computes wrong numbers (the fault injected: the real custom executor whose
# outputs file is shifted by 0.5 after it is written) must be `invalid`, whatever its speed.
# The wrapper runs the executor deploy ships; it is offered first in the route table.
WRONG_RUNNER = "runners/wrong_outputs.py"
WRONG_ROUTE = '''
import json, os, platform, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import ftns
exe = os.path.join(here, "custom-" + platform.machine(), "fk_exec")
proc = subprocess.Popen([exe] + sys.argv[1:], stdout=subprocess.PIPE, text=True)
for line in proc.stdout:
    event = json.loads(line)
    if event.get("ev") == "outputs":
        tensors = dict(ftns.read(event["file"]))
        ftns.write(event["file"], dict((k, v + 0.5) for k, v in tensors.items()))
    sys.stdout.write(line)
    sys.stdout.flush()
sys.exit(proc.wait())
'''


def test_wrong_outputs_make_the_route_invalid(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    dev = device(tmp_path)
    wrapper = Path(dev.workdir) / WRONG_RUNNER
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(WRONG_ROUTE)
    # the table deploy ships (runners/routes.json) names the wrapper first: first present wins
    custom = ROUTES["custom"].agent
    monkeypatch.setitem(custom, "runners", [WRONG_RUNNER, *custom["runners"]])
    config = BenchConfig(routes=("ort", "custom"), policy=FAST, pause_s=0.0, profile_runs=1,
                         variant="int8-dynamic")
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench([dev], config, store, "test")
        recs = {r["route"]: r for r in store.records(result.run_id)}
    ort, wrong = recs["ort"], recs["custom"]
    assert ort["status"] == "ok", ort["status_detail"]
    assert ort["accuracy"]["rule"] == "quantized-vs-fp32" and ort["accuracy"]["ok"]
    assert wrong["status"] == "invalid" and wrong["n"] >= 20  # timings kept, not trusted
    assert "outputs differ from onnxruntime fp32 on the host" in wrong["status_detail"]
    assert "max abs diff" in wrong["status_detail"]
    cross = wrong["accuracy"]["cross_routes"] or ort["accuracy"]["cross_routes"]
    assert len(cross) == 1 and not cross[0]["ok"] and cross[0]["max_abs_diff"] >= 0.5 - 1e-6
    assert result.exit_code == 0  # measured fine; the record says it is wrong


@pytest.mark.tvm
@pytest.mark.slow
def test_bench_ort_and_tvm_on_local_agree(tmp_path: Path) -> None:
    dev = device(tmp_path)
    config = BenchConfig(routes=("ort", "tvm"), policy=FAST, pause_s=0.0, profile_runs=1)
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench([dev], config, store, "test")
        by_route = {r["route"]: r for r in store.records(result.run_id)}
    assert result.exit_code == 0, result.failures()
    tvm = by_route["tvm"]
    assert tvm["status"] == "ok", tvm["status_detail"]
    assert tvm["n"] >= 20 and tvm["accuracy"]["ok"]
    assert tvm["build_flags"]["tvm_key"] and tvm["build_flags"]["schedule_counts"]
    # whichever ran second was compared with the first, element-wise
    cross = by_route["ort"]["accuracy"]["cross_routes"] + tvm["accuracy"]["cross_routes"]
    assert len(cross) == 1 and cross[0]["ok"] and cross[0]["max_abs_diff"] < 1e-3


def _sigmoid_model(path: Path) -> Path:
    """MatMul + Sigmoid on float inputs: ORT and TVM take it; the custom executor (token ids
    in, encoder ops) cannot build it."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Sigmoid", ["h"], ["y"])],
        "sig", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.tvm
def test_bench_without_routes_measures_every_route_it_can_and_names_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """`farm bench` with no --routes measures every route the device offers for the model
    (fused keys) — it measured ORT only, so `farm report` then judged one route — and says
    which it skipped and why; `--help` states the default."""
    from farm.cli.main import build_parser, main

    monkeypatch.setenv("FARM_LOCAL_WORKDIR", str(tmp_path / "wd-default"))
    monkeypatch.delenv("FARM_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "d.sqlite"
    model = _sigmoid_model(tmp_path / "sig.onnx")
    assert main(["bench", "--model", str(model), "--runs", "5", "--min-time", "0",
                 "--warmup", "1", "--warmup-time", "0", "--profile-runs", "1", "--pause", "0",
                 "--store", str(store)]) == 0
    out = capsys.readouterr()
    assert "routes ort,tvm,custom (the default: every route" in out.out
    assert "local: skipped custom: cannot build the custom route" in out.out
    assert "local/custom: skipped (not named by --routes)" in out.err
    with ResultStore(store) as s:
        recs = s.records(s.resolve_run("latest"))
        meta = s.runs()[-1].meta
    statuses = {r["route"]: r["status"] for r in recs}
    assert statuses == {"ort": "ok", "tvm": "ok", "custom": "unavailable"}
    (why,) = [r["status_detail"] for r in recs if r["route"] == "custom"]
    assert "graph input 'x' is float, not int64/int32 token ids" in why
    assert "token-id text encoders" in why, why
    assert meta["routes"] == list(ROUTES) and meta["config"]["routes_default"] is True
    bench_help = build_parser()._subparsers._group_actions[0].choices["bench"].format_help()
    assert "default: every route the device offers" in " ".join(bench_help.split())


@pytest.mark.tvm
@pytest.mark.slow
def test_bench_capped_at_avx2_runs_avx2_and_says_ort_is_not(tmp_path: Path) -> None:
    """The suite's one capped end-to-end bench (tiny, every route, --isa avx2): custom's
    executor dispatched its avx2 table, TVM built for a 256-bit target without AVX-512,
    every record says its level (ORT the host's: it cannot be capped), the capped configs
    are their own, and the report says the comparison is not like for like."""
    from farm import isa
    from farm.report.analysis import analyze

    dev = device(tmp_path)
    if "avx2" not in isa.runnable(dev.arch, dev.features):
        pytest.skip(f"this host ({dev.arch}, level {dev.level}) cannot run avx2")
    config = BenchConfig(routes=("ort", "tvm", "custom"), policy=FAST, pause_s=0.0,
                         profile_runs=1, isa="avx2")
    with ResultStore(tmp_path / "r.sqlite") as store:
        result = run_bench([dev], config, store, "test")
        records = store.records(result.run_id)
    by_route = {r["route"]: r for r in records}
    assert result.exit_code == 0, result.failures()
    assert {r: x["status"] for r, x in by_route.items()} == dict.fromkeys(by_route, "ok")
    custom, tvm, ort = by_route["custom"], by_route["tvm"], by_route["ort"]
    assert custom["build_flags"]["kernels"] == "avx2"
    assert (custom["isa"], tvm["isa"], ort["isa"]) == ("avx2", "avx2", dev.level)
    assert custom["build_flags"]["isa"] == tvm["build_flags"]["isa"] == "avx2"
    assert "isa" not in ort["build_flags"]
    target = tvm["build_flags"]["target"]
    assert target["vector-width"] == 256 and "+avx512f" not in target["mattr"]
    caption = analyze(records).tables["latency"].caption
    assert ("Not like for like" in caption) == (dev.level != "avx2")
