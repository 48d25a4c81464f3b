"""Run tags: a name (e.g. `main`) for a run, so a CI job can compare against "the baseline".

Contract: `tag_run(store, run, name)` resolves `run` (id, unique prefix, `latest` or another
tag) and stores `tag:<name>` -> run id in the store's meta table (re-tagging moves the
name); `resolve(store, ref)` turns a tag, a run id, a unique prefix or `latest` into a run
id — a tag wins over a run-id prefix of the same text; `tags(store)` lists them.
"""

from __future__ import annotations

import re

from farm.errors import StoreError, UsageError
from farm.results.store import ResultStore

PREFIX = "tag:"
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")


def tags(store: ResultStore) -> dict[str, str]:
    return store.meta_items(PREFIX)


def resolve(store: ResultStore, ref: str) -> str:
    """A run id for `ref`: tag name, run id, unique prefix or "latest"."""
    run_id = tags(store).get(ref)
    if run_id is not None:
        if run_id not in {r.run_id for r in store.runs()}:
            raise StoreError(f"tag {ref!r} names run {run_id}, which is not in {store.path}",
                             hint=f"re-tag it: farm results tag RUN {ref}")
        return run_id
    return store.resolve_run(ref)


def tag_run(store: ResultStore, run: str, name: str) -> str:
    """Tag the run `run` resolves to as `name`; returns its id."""
    if not _NAME_RE.fullmatch(name) or name == "latest":
        raise UsageError(f"tag name {name!r} is not valid",
                         hint="start with a letter; letters, digits, '.', '_', '-'; "
                              "not 'latest'")
    run_id = resolve(store, run)
    store.set_meta(PREFIX + name, run_id)
    return run_id
