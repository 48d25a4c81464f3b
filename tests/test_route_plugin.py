"""A fourth route from a package outside farm/, registered in one place (an entry point in
the `farm.routes` group), goes through `farm bench` on `local`, the report, deploy's
selection, `farm models check` and completion, with no file of farm/ naming it.

The route, `ortnospin`, is ONNX Runtime with one session option changed (intra-op thread
spinning off) behind a trivial runner of its own that runs ORT's runner. The package and its
dist-info (where importlib.metadata finds the entry point) live in a temporary directory put
on PYTHONPATH of the `farm` processes the test starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NAME = "ortnospin"

ROUTE_MODULE = '''"""A fourth route: ONNX Runtime with intra-op thread spinning off."""
from pathlib import Path

from farm.routes.ort.route import ORT_OPTIONS, build, check
from farm.routes.spec import Route, RoutePlan, source_file

HERE = Path(__file__).resolve().parent
REPO = Path({repo!r})
SPIN = {{"session.intra_op.allow_spinning": "0"}}


def plan(device, given, fused):
    options = {{**ORT_OPTIONS, "opt_level": "all" if fused else "disable",
               "session_config": SPIN}}
    return RoutePlan("{name}", given.model_artifact.remote, options=options,
                     build_flags={{"provider": options["provider"], "spinning": "off",
                                  "build_s": 0.0}},
                     sizes={{"code": 0, "weights": given.model_artifact.size}})


ROUTE = Route("{name}", label="ORT, no spinning", plan=plan, build=build, check=check,
              model_input=source_file, fusion_flag="opt_level",
              fusion_values=("all", "disable"), serial_build=False,
              agent={{"runners": ["runners/{name}_runner.py"], "modules": ["onnxruntime"]}},
              runner_files=(str(HERE / "{name}_runner.py"),
                            str(REPO / "agents/runners/ort_runner.py"),
                            str(REPO / "agents/ftns.py"), str(REPO / "farm/categories.py")),
              artifact_kinds=("model",),
              record_keys=("provider", "opt_level", "ort_version", "session_config"))
'''

RUNNER = '''"""The ortnospin route's runner: ORT's runner (shipped beside it) as it is."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ort_runner  # noqa: E402

if __name__ == "__main__":
    sys.exit(ort_runner.main())
'''


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plugin")
    pkg = root / "farm_ortnospin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "route.py").write_text(ROUTE_MODULE.format(repo=str(REPO), name=NAME))
    (pkg / f"{NAME}_runner.py").write_text(RUNNER)
    info = root / "farm_ortnospin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: farm-ortnospin\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(f"[farm.routes]\n{NAME} = farm_ortnospin.route:ROUTE\n")
    return root


def farm(plugin: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FARM_HOME": str(home),
           "PYTHONPATH": os.pathsep.join(p for p in (str(plugin), str(REPO),
                                                     os.environ.get("PYTHONPATH")) if p)}
    env.pop("FARM_INVENTORY", None)
    return subprocess.run([sys.executable, "-m", "farm.cli.main", *args], env=env,
                          capture_output=True, text=True, timeout=600, cwd=home)


def test_a_fourth_route_from_a_package_runs_everywhere(plugin: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    quick = ["--runs", "5", "--min-time", "0.2", "--warmup", "1", "--warmup-time", "0",
             "--pause", "0", "--profile-runs", "1", "--rounds", "1"]
    bench = farm(plugin, home, "bench", "--device", "local", "--model", "tiny",
                 "--routes", f"ort,{NAME},{NAME}-unfused", *quick, "--output", "json")
    assert bench.returncode == 0, bench.stderr[-3000:]
    records = json.loads(bench.stdout)["records"]
    mine = {r["build_flags"]["opt_level"]: r for r in records if r["route"] == NAME}
    assert set(mine) == {"all", "disable"}, [r["route"] for r in records]
    for record in mine.values():
        assert record["status"] == "ok", record["status_detail"]
        assert record["n"] >= 5 and record["accuracy"]["ok"]
        # the runner's facts the route names are kept; its own plan flag too
        assert record["build_flags"]["session_config"]["session.intra_op.allow_spinning"] == "0"
        assert record["build_flags"]["spinning"] == "off"

    report = farm(plugin, home, "report", "latest", "--output", "json")
    assert report.returncode == 0, report.stderr[-2000:]
    assert NAME in report.stdout
    fusion = farm(plugin, home, "report", "latest")
    assert "ORT, no spinning" in fusion.stdout or NAME in fusion.stdout

    deploy = farm(plugin, home, "deploy", "--device", "local", "--routes", NAME,
                  "--dry-run", "--output", "json")
    assert deploy.returncode == 0, deploy.stderr[-2000:]
    assert f"{NAME}_runner.py" in deploy.stdout and "ort_runner.py" in deploy.stdout
    assert "tvm_runner" not in deploy.stdout and "fk_exec" not in deploy.stdout

    tiny = next(home.joinpath(".farm", "models").glob("tiny-fp32-*.onnx"), None) or next(
        Path(home).rglob("tiny-fp32-*.onnx"))
    check = farm(plugin, home, "models", "check", str(tiny), "--output", "json")
    assert check.returncode == 0, check.stderr[-2000:]
    verdicts = json.loads(check.stdout)["routes"]
    assert list(verdicts) == ["ort", "tvm", "custom", NAME]
    assert verdicts[NAME]["ok"], verdicts[NAME]

    completion = farm(plugin, home, "completion", "bash")
    assert completion.returncode == 0 and f"{NAME}-unfused" in completion.stdout

    # registered in one place: nothing in farm/ names the route
    assert not [p for p in (REPO / "farm").rglob("*.py") if NAME in p.read_text()]


def test_a_broken_route_plugin_is_one_clear_error(plugin: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    info = broken / "farm_broken-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: farm-broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[farm.routes]\nbroken = no_such_module:ROUTE\n")
    result = farm(broken, tmp_path, "devices")
    assert result.returncode != 0
    assert "route plugin 'broken'" in result.stderr and "Traceback" not in result.stderr
