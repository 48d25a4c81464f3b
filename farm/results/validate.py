"""Check one record against the schema before it is stored, and re-check stored ones.

Contract:
* `normalize_record(record)` -> a complete record dict (every field of `schema.FIELDS`,
  in order) with defaults filled in: record_id (uuid4 hex), created_utc, farm_version and
  farm_commit (host provenance) and, when absent, the statistics computed from
  `samples_ms`. Raises StoreError naming the record, the field and what to do when a
  field is unknown, of the wrong type, missing, or when given statistics disagree with
  `samples_ms`.
* `stats_mismatches(record)` -> list of "field: stored X, samples give Y" for the
  statistics that do not match a recomputation (used by the integrity check).

Statistics are recomputed with `farm.results.stats.record_stats`, seed and n_boot taken
from the record's `policy` ("seed", "n_boot"; defaults 0 and 2000), the rounds from
`rounds.sizes` and the method from `ci_method`: a record that carries statistics but no
`ci_method` was stored before rounds were the unit (schema 2) and is recomputed the way
it was, a bootstrap of the pooled samples (`rounds.METHOD_LEGACY`).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

from farm.errors import StoreError
from farm.results import provenance
from farm.results.rounds import (
    METHOD_HIERARCHICAL,
    METHOD_LEGACY,
    METHOD_ONE_ROUND,
    record_sizes,
)
from farm.results.schema import FAILED, FIELD_NAMES, FIELDS, INVALID, OK, PARTIAL, UNAVAILABLE
from farm.results.stats import DEFAULT_N_BOOT, DEFAULT_SEED, STAT_FIELDS, record_stats

RECORD_STATUSES = (OK, INVALID, PARTIAL, FAILED, UNAVAILABLE)
RUN_STATUSES = ("running", "ok", "partial", "failed", "interrupted")
REQUIRED = ("record_id", "run_id", "created_utc", "device", "route", "status")
FIELD_TYPES = {f.name: f.type for f in FIELDS}
_REL_TOL = 1e-9


def _where(record: Mapping[str, Any]) -> str:
    parts = [f"{k}={record.get(k)!r}" for k in ("device", "route", "variant", "threads")
             if record.get(k) is not None]
    return "record (" + ", ".join(parts) + ")" if parts else "record"


def check_type(name: str, value: Any) -> str | None:
    """None when `value` fits field `name`, else what is wrong."""
    kind = FIELD_TYPES[name]
    if value is None:
        return None
    if kind == "text" and not isinstance(value, str):
        return f"expected text, got {type(value).__name__}"
    if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        return f"expected an integer, got {type(value).__name__}"
    if kind == "real":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected a number, got {type(value).__name__}"
        if not math.isfinite(value):
            return f"expected a finite number, got {value!r}"
    if kind == "json":
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return f"not JSON-serializable ({exc})"
    return None


def stats_params(record: Mapping[str, Any]) -> tuple[int, int]:
    """(seed, n_boot) of the record's bootstrap, from its policy or the defaults."""
    policy = record.get("policy")
    if not isinstance(policy, Mapping):
        policy = {}
    seed, n_boot = policy.get("seed"), policy.get("n_boot")
    return (
        int(seed) if isinstance(seed, int) else DEFAULT_SEED,
        int(n_boot) if isinstance(n_boot, int) and n_boot > 0 else DEFAULT_N_BOOT,
    )


def _samples_problem(samples: Any) -> str | None:
    if samples is None:
        return None
    if not isinstance(samples, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in samples
    ):
        return "not a list of numbers"
    if not all(math.isfinite(v) and v >= 0 for v in samples):
        return "samples must be finite, non-negative milliseconds"
    return None


METHODS = (METHOD_HIERARCHICAL, METHOD_ONE_ROUND)


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, list) or isinstance(b, list):
        return (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(a, b, strict=True)))
    return math.isclose(float(a), float(b), rel_tol=_REL_TOL, abs_tol=1e-12)


def _expected(record: Mapping[str, Any]) -> dict[str, Any]:
    """The statistics `samples_ms` give with the record's seed, n_boot, rounds and method
    (no `ci_method` beside given statistics: a legacy record, see module docstring)."""
    seed, n_boot = stats_params(record)
    method = record.get("ci_method")
    if method is None and record.get("median_ms") is not None:
        method = METHOD_LEGACY
    return record_stats(record.get("samples_ms"), seed=seed, n_boot=n_boot,
                        sizes=record_sizes(record), method=method)


def stats_mismatches(record: Mapping[str, Any]) -> list[str]:
    """Statistics fields whose stored value is not what `samples_ms` gives."""
    problem = _samples_problem(record.get("samples_ms"))
    if problem:
        return [f"samples_ms: {problem}"]
    expected = _expected(record)
    return [
        f"{name}: stored {record.get(name)!r}, samples_ms give {expected[name]!r}"
        for name in STAT_FIELDS
        if not _same(record.get(name), expected[name])
    ]


def normalize_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A complete, checked record ready to store (see module docstring)."""
    if not isinstance(record, Mapping):
        raise StoreError(f"a record must be a dict of fields, got {type(record).__name__}")
    unknown = sorted(set(record) - set(FIELD_NAMES))
    if unknown:
        raise StoreError(
            f"{_where(record)}: unknown field(s) {unknown}",
            hint="fields are listed in farm/results/schema.py; add new ones there",
        )
    out = {name: record.get(name) for name in FIELD_NAMES}
    out["record_id"] = out["record_id"] or uuid.uuid4().hex
    out["created_utc"] = out["created_utc"] or provenance.utc_now()
    out["farm_version"] = out["farm_version"] or provenance.farm_version()
    out["farm_commit"] = out["farm_commit"] or provenance.farm_commit()
    for name in FIELD_NAMES:
        problem = check_type(name, out[name])
        if problem:
            raise StoreError(f"{_where(out)}: field {name!r}: {problem}")
    missing = [name for name in REQUIRED if out[name] in (None, "")]
    if missing:
        raise StoreError(f"{_where(out)}: required field(s) missing: {missing}")
    if out["status"] not in RECORD_STATUSES:
        raise StoreError(
            f"{_where(out)}: status {out['status']!r} is not one of {list(RECORD_STATUSES)}"
        )
    problem = _samples_problem(out["samples_ms"])
    if problem:
        raise StoreError(f"{_where(out)}: samples_ms: {problem}")
    if out["ci_method"] is not None and out["ci_method"] not in METHODS:
        raise StoreError(f"{_where(out)}: ci_method {out['ci_method']!r} is not one of "
                         f"{list(METHODS)}")
    expected = _expected(out)
    # a statistic left empty is filled in; one that is given must match the samples
    wrong = [
        f"{name}: given {out[name]!r}, samples_ms give {expected[name]!r}"
        for name in STAT_FIELDS
        if out[name] is not None and not _same(out[name], expected[name])
    ]
    if wrong:
        raise StoreError(
            f"{_where(out)}: statistics do not match samples_ms: {'; '.join(wrong)}",
            hint="leave the statistics fields empty and the store computes them, or "
                 "compute them with farm.results.stats.record_stats(samples, seed, n_boot, "
                 "sizes, method)",
        )
    out.update(expected)
    return out
