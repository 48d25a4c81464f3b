"""`FarmResult.no_slower_than`: false on a regression, with the figures in its repr."""

from __future__ import annotations

import numpy as np

from farm.results import tags
from farm.results.store import ResultStore
from farm.testing.result import FarmResult


def _rec(run_id: str, samples, **over):  # type: ignore[no-untyped-def]
    """A record of 5 rounds (samples in round order)."""
    n = len(samples)
    return {"run_id": run_id, "device": "local", "route": "ort", "model": "enc",
            "variant": "fp32", "threads": 1, "status": "ok",
            "samples_ms": [float(v) for v in samples],
            "rounds": {"planned": 5, "done": 5, "sizes": [n // 5] * 5}, **over}


def test_no_slower_than_against_a_tag(tmp_path):
    rng = np.random.default_rng(3)
    path = tmp_path / "r.sqlite"
    with ResultStore(path) as store:
        base = store.start_run("base")
        store.add(_rec(base, rng.normal(10, 0.1, 50)))
        store.add(_rec(base, rng.normal(10, 0.1, 50), device="pixel7", emulated=1))
        tags.tag_run(store, base, "main")
        new = store.start_run("new")
        slow = store.add(_rec(new, rng.normal(13, 0.1, 50)))
        same = store.add(_rec(new, rng.normal(10, 0.1, 50)))
        emu = store.add(_rec(new, rng.normal(30, 0.1, 50), device="pixel7", emulated=1))
        other = store.add(_rec(new, rng.normal(10, 0.1, 50), model="other"))
    check = FarmResult(slow, path).no_slower_than("main", "5%")
    assert not check and check.verdict == "regression"
    assert "regression" in repr(check) and "+30" in repr(check) and "vs main" in repr(check)
    assert "over 5/5 rounds" in repr(check) and "no noise floor" in repr(check)
    assert FarmResult(same, path).no_slower_than("main", "5%")
    emulated = FarmResult(emu, path).no_slower_than("main", "5%")
    assert emulated and emulated.verdict == "not compared: emulated"
    first = FarmResult(other, path).no_slower_than("main")
    assert first and first.verdict == "no baseline"
