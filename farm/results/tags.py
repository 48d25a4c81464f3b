"""Run tags: a name (e.g. `main`) for a baseline, so a CI job can compare against it.

Contract: a tag names one run (`farm results tag RUN NAME`) or several (the pytest plugin's
`--farm-tag NAME` tags every run of a test session: each test benches in its own run).
It is stored as `tag:<name>` -> comma-separated run ids in the store's meta table;
re-tagging moves the name. `resolve_runs(store, ref)` turns a tag, a run id, a unique
prefix or `latest` into run ids (a tag wins over a run-id prefix of the same text);
`resolve(store, ref)` is the same for a ref that must name exactly one run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from farm.errors import StoreError, UsageError
from farm.results.backend import Store

PREFIX = "tag:"
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")


def tags(store: Store) -> dict[str, list[str]]:
    return {name: value.split(",") for name, value in store.meta_items(PREFIX).items()}


def resolve_runs(store: Store, ref: str) -> list[str]:
    """Run ids for `ref`: tag name, run id, unique prefix or "latest"."""
    run_ids = tags(store).get(ref)
    if run_ids is None:
        return [store.resolve_run(ref)]
    known = {r.run_id for r in store.runs()}
    gone = [r for r in run_ids if r not in known]
    if gone:
        raise StoreError(f"tag {ref!r} names run(s) {', '.join(gone)}, not in {store.where}",
                         hint=f"re-tag it: farm results tag RUN {ref}")
    return run_ids


def resolve(store: Store, ref: str) -> str:
    run_ids = resolve_runs(store, ref)
    if len(run_ids) != 1:
        raise StoreError(f"tag {ref!r} names {len(run_ids)} runs; this needs one",
                         hint="use `farm compare --max-slowdown`, which reads them all")
    return run_ids[0]


def tag_runs(store: Store, runs: Sequence[str], name: str) -> list[str]:
    """Tag the runs the refs in `runs` resolve to as `name`; returns their ids."""
    if not _NAME_RE.fullmatch(name) or name == "latest":
        raise UsageError(f"tag name {name!r} is not valid",
                         hint="start with a letter; letters, digits, '.', '_', '-'; "
                              "not 'latest'")
    if not runs:
        raise UsageError(f"tag {name!r}: no run to tag")
    run_ids = list(dict.fromkeys(r for ref in runs for r in resolve_runs(store, ref)))
    store.set_meta(PREFIX + name, ",".join(run_ids))
    return run_ids


def tag_run(store: Store, run: str, name: str) -> str:
    """Tag the one run `run` resolves to as `name`; returns its id."""
    return tag_runs(store, [resolve(store, run)], name)[0]
