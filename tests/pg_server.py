"""A real PostgreSQL server for tests and benchmarks: Debian's postgresql, started here.

`PgServer(root).start()` runs `initdb` in `root/data` and `pg_ctl start` on a free
loopback port, as an unprivileged user when run as root (the `postgres` account the
Debian package creates, else `nobody`: the server refuses to run as root), with the
socket directory inside `root` (nothing in /run). Logins over TCP need a password
(scram-sha-256), so a wrong password is refused as on a real server. `url(db)` is the
superuser's URL of a database, `create_db()` a fresh one (tests each take their own),
`restart()` / `stop()` are the server going away under a bench, `stop()` with
`mode="immediate"` as a crash. The fixture in tests/pg_fixture.py stops it at the end.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import socket
import subprocess
import time
from pathlib import Path

USER, PASSWORD = "farm", "farm-test-pw"


def pg_bin() -> Path | None:
    """Debian's newest installed postgresql bin directory (None: not installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """See module docstring. Life cycle: `start()` -> `url()`/`create_db()`* ->
    [`restart()`/`stop()`+`start()`]* -> `stop()`."""

    _dbs = itertools.count()

    def __init__(self, root: Path, *, fsync: bool = False) -> None:
        binary = pg_bin()
        if binary is None:
            raise RuntimeError("PostgreSQL is not installed (scripts/setup.sh installs it)")
        self.bin = binary
        self.root = root
        self.data = root / "data"
        self.sock = root / "sock"
        self.log = root / "server.log"
        self.port = _free_port()
        self.fsync = fsync
        self.user = None
        if os.geteuid() == 0:
            try:
                self.user = pwd.getpwnam("postgres")
            except KeyError:
                self.user = pwd.getpwnam("nobody")

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = list(argv)
        if self.user is not None:
            cmd = ["runuser", "-u", self.user.pw_name, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "LC_ALL": "C"}, cwd="/")
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:1])} failed ({done.returncode}): "
                               f"{done.stdout}{done.stderr}")
        return done

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.sock.mkdir(exist_ok=True)
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self.user is not None:
            # the server's user must reach its own directory: `root`'s parents must let it
            # through (a mkdtemp dir is 0700: opened to others, nothing in it readable)
            os.chmod(self.root.parent, 0o711)
            for path in (self.root, self.sock, pwfile):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER,
                  "--pwfile", str(pwfile), "--auth-local=trust",
                  "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync")
        pwfile.unlink()

    def start(self) -> PgServer:
        if not self.data.exists():
            self.init()
        options = (f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 "
                   f"-c fsync={'on' if self.fsync else 'off'} -c max_connections=100")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                  "-o", options, "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w",
                  "stop", check=False)

    def restart(self, down_s: float = 0.0) -> None:
        """The server goes away (connections cut) and comes back after `down_s`."""
        self.stop("fast")
        time.sleep(down_s)
        self.start()

    def url(self, db: str = "postgres", *, password: str = PASSWORD, user: str = USER) -> str:
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{db}"

    def sql(self, statement: str, db: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement as the superuser (autocommit); its rows, if any."""
        import psycopg

        with psycopg.connect(self.url(db), autocommit=True) as conn:
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []

    def create_db(self, prefix: str = "t") -> str:
        """A new empty database; its URL."""
        name = f"{prefix}_{os.getpid()}_{next(self._dbs)}"
        self.sql(f"CREATE DATABASE {name}")
        return self.url(name)
