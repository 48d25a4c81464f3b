"""Which store a command uses, and opening it: the one place that picks the backend.

`open_store(location, create=...)`: `location` is `--store` when given, else
`$FARM_STORE`, else the default SQLite file (`$FARM_HOME/results.sqlite`). A
`postgresql://` URL opens `farm.results.pg_store.PgStore` (psycopg is imported only then),
anything else `farm.results.store.ResultStore`, which refuses other URLs. Everything past
this point talks to `farm.results.backend.Store`.
"""

from __future__ import annotations

import os
from pathlib import Path

from farm.results.backend import Store
from farm.results.location import is_server_url

ENV = "FARM_STORE"


def store_target(location: str | Path | None) -> str | Path | None:
    """What a command's store is: `location`, else $FARM_STORE, else None (the default)."""
    if location is not None and str(location) != "":
        return location
    return os.environ.get(ENV) or None


def open_store(location: str | Path | None = None, *, create: bool = True) -> Store:
    """The store `location` names (see the module docstring). `create=False` refuses a
    store that does not exist yet instead of making an empty one."""
    target = store_target(location)
    if target is not None and is_server_url(target):
        from farm.results.pg_store import PgStore

        return PgStore(str(target), create=create)
    from farm.results.store import ResultStore

    return ResultStore(target, create=create)
