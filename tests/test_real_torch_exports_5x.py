"""transformers 5.x exports through the routes (issue #11): the current major of Hugging Face
transformers builds its attention masks with `masking_utils` (vmap'd index functions: a
GatherND in dynamo files, Flatten + Gather in TorchScript ones, `Where(keep, 0, min)`, and
SDPA's `Where(IsNaN(p), 0, p)` guard after the softmax), and writes the head split as
`view(B, S, -1, D)`. Its BERT and RoBERTa no longer export under TorchScript at all
(transformers' own `forward() got multiple values for argument 'use_cache'`), so those two
are dynamo-only here, as for a user.

The files are made by tests/hf_export.py in a child process whose PYTHONPATH puts
.venv/transformers5 (scripts/setup.sh: transformers 5.25.0) before .venv's packages; torch
and onnx are .venv's. Each runs through ORT, custom and (on two files) TVM on `local`, with
farm's inputs (a padded attention_mask, so the mask is checked numerically), agreeing with
ORT on the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from route_agreement import bench_routes_agree

from farm.models.frontend import canonicalize, make_spec

pytestmark = [pytest.mark.slow, pytest.mark.tvm]

TRANSFORMERS5 = Path(sys.prefix) / "transformers5"
HELPER = Path(__file__).with_name("hf_export.py")
SEQ = 24  # bound at bench time; the export traced 16
CASES = [  # (family, exporter, with TVM)
    ("bert", "dynamo-opset18", True),                      # GatherND mask
    ("distilbert", "torchscript-opset14-dynamic", True),   # Flatten + Gather mask
    ("roberta", "dynamo-opset18", False),
    ("mobilebert", "torchscript-opset14-dynamic", False),
]

if not (TRANSFORMERS5 / "transformers").is_dir():
    pytest.skip(f"{TRANSFORMERS5} is missing: scripts/setup.sh installs transformers 5.x there",
                allow_module_level=True)


def export5(family: str, exporter: str, out: Path) -> Path:
    # only this dir on PYTHONPATH: not the suite's no-torch shim (conftest), the export
    # needs torch
    env = {**os.environ, "PYTHONPATH": str(TRANSFORMERS5)}
    done = subprocess.run([sys.executable, str(HELPER), family, exporter, str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    made = json.loads(done.stdout.strip().splitlines()[-1])
    assert made["transformers"].startswith("5."), made
    return Path(made["path"])


@pytest.fixture(autouse=True)
def farm_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize(("family", "exporter", "tvm"), CASES)
def test_transformers5_export_through_the_routes(family: str, exporter: str, tvm: bool,
                                                 tmp_path: Path) -> None:
    path = export5(family, exporter, tmp_path)
    canon = canonicalize(path, make_spec([], None, SEQ), tmp_path / "canon")
    assert canon.rewrites.get("keep_mask"), canon.rewrites  # the 5.x mask was recognised
    routes = ("ort", "tvm", "custom") if tvm else ("ort", "custom")
    bench_routes_agree(path, routes, tmp_path, SEQ, atol=1e-4)
