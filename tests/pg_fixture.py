"""Session-scoped PostgreSQL server (tests/pg_server.py): started on first use, stopped at
the end of the session. Tests take a fresh database each with `pg_url`."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_server import PgServer, pg_bin


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    if pg_bin() is None:
        pytest.fail("PostgreSQL is not installed: run scripts/setup.sh (it installs it)")
    # not under pytest's tmp dirs: every pytest session (other suites on this machine too)
    # sets /tmp/pytest-of-USER back to 0700, which the server's own user cannot enter
    root = Path(tempfile.mkdtemp(prefix="farm-pg-"))
    # scripts/test.sh stops a server whose pytest is gone (killed before this teardown)
    (root / "owner.pid").write_text(str(os.getpid()))
    server = PgServer(root / "pg")
    try:
        yield server.start()
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """The URL of a new, empty database on the session's server."""
    return pg_server.create_db()
