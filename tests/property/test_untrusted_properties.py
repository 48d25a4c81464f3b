"""Property tests of the host's reader of what a device sends (`wire.decode` +
`untrusted.EventGuard`): a device is untrusted.

Properties:
* a non-finite number (NaN, Infinity, -Infinity, 1e999) anywhere in any line is a
  ProtocolError — no such value ever reaches the host;
* any sequence of runner events, hostile or not, either passes the guard or raises
  ProtocolError — nothing else;
* what the guard lets through, the host can keep: the events absorbed into a route outcome
  make a record the result store accepts (finite, non-negative, bounded);
* an outputs path the guard accepts is always inside the run's output directory.
"""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm.bench.config import BenchConfig
from farm.bench.records import RouteOutcome, make_record
from farm.errors import ProtocolError
from farm.inventory.builtin import local_device
from farm.protocol import untrusted, wire
from farm.protocol.untrusted import EventGuard
from farm.results.store import ResultStore

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
OUT = "/w/out/run-1/ort.ftns"
REQUEST = {"outputs": OUT}

text = st.text(max_size=12)
# numbers a hostile device might send: huge, tiny, negative, non-integers for counts
number = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
                   st.sampled_from([0, -0.0, 1e-300, 1e308, untrusted.MAX_MS,
                                    untrusted.MAX_MS * 1.0001, 2**63]))
value = st.recursive(st.one_of(st.none(), st.booleans(), number, text),
                     lambda inner: st.one_of(st.lists(inner, max_size=4),
                                             st.dictionaries(text, inner, max_size=4)),
                     max_leaves=10)
path = st.one_of(st.just(OUT), st.just("/w/out/run-1/x.ftns"), st.just("/etc/passwd"),
                 st.just("/w/out/run-1/../../../etc/passwd"), st.just("relative.ftns"),
                 st.just("/w/out/run-1/sub/x.ftns"), st.just("/w/out/run-2/ort.ftns"),
                 st.builds(lambda s: "/w/out/run-1/" + s, text), text)
NAMES = ["loaded", "first", "warmup", "samples", "ops", "outputs", "memory", "info", "done",
         "error", "thermal_pause"]


def event() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda v: {"ev": "loaded", "load_ms": v}, number),
        st.builds(lambda v: {"ev": "first", "ms": v}, number),
        st.builds(lambda r, t: {"ev": "warmup", "runs": r, "ms_total": t}, number, number),
        st.builds(lambda ms: {"ev": "samples", "ms": ms}, st.lists(number, max_size=20)),
        st.builds(lambda c, n: {"ev": "ops", "categories": c, "nodes": n},
                  st.dictionaries(st.sampled_from(["fc", "attention", "other"]), number),
                  st.lists(st.fixed_dictionaries({"name": text, "ms": number}), max_size=3)),
        st.builds(lambda p: {"ev": "outputs", "file": p}, path),
        st.builds(lambda a, b: {"ev": "memory", "vmhwm_kb": a, "pss_kb": b, "method": "x"},
                  number, st.one_of(st.none(), number)),
        st.builds(lambda d: {"ev": "info", **d}, st.dictionaries(text, value, max_size=3)),
        st.builds(lambda n, d: {"ev": n, **d}, st.sampled_from(NAMES),
                  st.dictionaries(text, value, max_size=3)),
    )


@SETTINGS
@given(obj=value, bad=st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-1e400"]))
def test_non_finite_numbers_never_pass_the_reader(obj: Any, bad: str) -> None:
    line = json.dumps({"proto": 1, "kind": "event", "id": "r",
                       "ev": {"ev": "samples", "ms": [1.0], "junk": obj}})
    hostile = line.replace('"ms": [1.0]', f'"ms": [1.0, {bad}]')
    with pytest.raises(ProtocolError, match=r"non-finite|infinity"):
        wire.decode(hostile, 1)


@SETTINGS
@given(events=st.lists(event(), max_size=12))
def test_guard_accepts_or_refuses_and_what_it_accepts_can_be_stored(
        events: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> None:
    guard = EventGuard(REQUEST, "hostile")
    outcome = RouteOutcome("ort")
    accepted = []
    for ev in events:
        try:
            guard.check(ev)
        except ProtocolError as exc:
            assert "hostile" in str(exc) and "refused" in str(exc)
            break
        accepted.append(ev)
        outcome.absorb(ev)
    for ev in accepted:
        if ev["ev"] == "outputs":
            assert posixpath.dirname(posixpath.normpath(ev["file"])) == posixpath.dirname(OUT)
            assert ".." not in ev["file"].split("/")
    record = make_record(run_id="run-1", device=local_device(), hello=None, route="ort",
                         config=BenchConfig(), model_label="tiny", model_hash=None,
                         status="ok", outcome=outcome)
    with ResultStore(tmp_path_factory.mktemp("s") / "r.sqlite") as store:
        record["run_id"] = store.start_run("prop")
        stored = store.add(record)  # finite, non-negative, typed: the store takes it
    assert stored["n"] == (len(outcome.samples_ms) or None)


@SETTINGS
@given(n=st.integers(1, 5))
def test_sample_flood_is_refused(n: int) -> None:
    guard = EventGuard(REQUEST, "hostile")
    guard.check({"ev": "loaded", "load_ms": 1.0})
    chunk = [1.0] * (untrusted.MAX_SAMPLES // n + 1)
    with pytest.raises(ProtocolError, match="samples in one route run"):
        for _ in range(n + 1):
            guard.check({"ev": "samples", "ms": chunk})


def test_order_rules() -> None:
    guard = EventGuard(REQUEST, "d")
    with pytest.raises(ProtocolError, match="before the 'loaded' event"):
        guard.check({"ev": "samples", "ms": [1.0]})
    guard = EventGuard(REQUEST, "d")
    guard.check({"ev": "info", "plan": "ok"})  # info may precede loaded (the executor's)
    guard.check({"ev": "loaded", "load_ms": 1.0})
    guard.check({"ev": "thermal_pause"})  # unknown: ignored
    guard.check({"ev": "done"})
    with pytest.raises(ProtocolError, match="after the run's done"):
        guard.check({"ev": "samples", "ms": [1.0]})


def test_transport_download_is_capped(tmp_path: Path) -> None:
    """/dev/zero never ends: the host stops at the cap instead of filling its disk."""
    from farm.errors import TransportError
    from farm.transports import open_transport

    with open_transport(local_device()) as t, pytest.raises(TransportError, match="limit"):
        t.get("/dev/zero", tmp_path / "x", max_bytes=1 << 20)
    assert (tmp_path / "x").stat().st_size <= 1 << 20


@SETTINGS
@given(state=st.dictionaries(st.sampled_from(["governor", "freq_khz", "thermal_c", "load",
                                              "mem_total_kb", "uptime_s", "t_utc", "other"]),
                             value, max_size=6))
def test_state_reply_accepted_only_in_a_shape_drift_flags_can_read(state: dict) -> None:
    """Whatever a device answers to `state`, the host either refuses it (ProtocolError) or
    can compute drift flags and the live view's summary from it."""
    from farm.bench.device_run import state_summary
    from farm.protocol.untrusted import check_state
    from farm.results.stats import drift_flags

    try:
        check_state(state, "d")
    except ProtocolError as exc:
        assert "state reply refused" in str(exc)
        return
    drift_flags(state, state)
    drift_flags({"freq_khz": {"cpu0": 1000}}, state)
    state_summary(state)


def test_real_agent_state_passes() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "agents"))
    import farm_agent

    from farm.protocol.untrusted import check_state

    state = farm_agent.read_state("/")
    assert check_state(state, "local") is state
