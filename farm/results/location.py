"""Where a result store lives: a file path. A URL names a store this build cannot open.

`--store postgresql://u@host:1/db` once created a SQLite file at
`./postgresql:/u@host:1/db` (a path joins `//` into `/`) and reported success. Until a
server-backed store exists, any `scheme://` is refused with a message naming the scheme;
a password in the URL is never echoed.
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


def store_location(value: str | Path) -> Path:
    """The store file `value` names; StoreError for a URL (no server store in this build)."""
    text = str(value)
    match = _URL.match(text)
    if match:
        raise StoreError(
            f"result store {redacted(text)}: this farm keeps results in a SQLite file; "
            f"a {match['scheme'].lower()}:// store is not supported",
            hint="give a file path (e.g. --store results.sqlite; default "
                 "$FARM_HOME/results.sqlite, else ./.farm/results.sqlite)")
    if not text:
        raise StoreError("--store is empty", hint="give a file path or leave --store out")
    return Path(text)
