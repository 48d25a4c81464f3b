"""Where a result store lives: a SQLite file path, or a PostgreSQL URL.

`--store postgresql://u@host:1/db` once created a SQLite file at
`./postgresql:/u@host:1/db` (a path joins `//` into `/`) and reported success. Now a
`postgresql://` (or `postgres://`) URL names a server store (`farm.results.pg_store`) and
any other `scheme://` is refused with a message naming the scheme; a password in the URL is
never echoed (`redacted`).
"""

from __future__ import annotations

import re
from pathlib import Path

from farm.errors import StoreError

_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)
_PASSWORD = re.compile(r"^(?P<user>[^/@:]*):[^/@]*@")


def redacted(url: str) -> str:
    """`url` with the password of its user part (scheme://user:PASSWORD@host) as ***."""
    match = _URL.match(url)
    if not match:
        return url
    rest = _PASSWORD.sub(lambda m: f"{m['user']}:***@", match["rest"])
    return f"{match['scheme']}://{rest}"


SERVER_SCHEMES = ("postgresql", "postgres")


def is_server_url(value: str | Path) -> bool:
    """Whether `value` names a PostgreSQL store."""
    match = _URL.match(str(value))
    return bool(match) and match["scheme"].lower() in SERVER_SCHEMES


def check_location(value: str | Path) -> str:
    """`value` when it names a store farm can open (a path or a postgresql:// URL);
    StoreError naming the scheme otherwise."""
    if is_server_url(value):
        return str(value)
    store_location(value)
    return str(value)


def store_location(value: str | Path) -> Path:
    """The store file `value` names; StoreError for a URL (a PostgreSQL one is opened by
    `farm.results.open_store`, never as a file)."""
    text = str(value)
    match = _URL.match(text)
    if match:
        scheme = match["scheme"].lower()
        what = ("is a server store, not a file: open it with farm.results.open_store"
                if scheme in SERVER_SCHEMES else
                f"a {scheme}:// store is not supported: farm keeps results in a SQLite "
                "file or a PostgreSQL database")
        raise StoreError(
            f"result store {redacted(text)}: {what}",
            hint="give a file path (e.g. --store results.sqlite; default "
                 "$FARM_HOME/results.sqlite, else ./.farm/results.sqlite) or a "
                 "postgresql://USER@HOST:PORT/DB URL")
    if not text:
        raise StoreError("--store is empty", hint="give a file path or leave --store out")
    return Path(text)
