"""Library output kept off the terminal: what TVM, onnxscript, numpy and friends print while
farm builds is captured per step into a log under `.farm/logs/`, and named in one line.

Every TVM build printed `Warning: Fast mode segfaults when there are out-of-bounds indices`;
a GPT-2 bench 25 `Detected pow(x, y) where y >= 3` lines and numpy's overflow warnings; a
DeBERTa bench dozens of the front-end's `... cannot be found in any scope`. They come at two
levels, and both are captured:

* native (C++ `LOG(WARNING)` of TVM, anything a library or a child process writes to file
  descriptors 1 and 2): while at least one capture is open, fds 1 and 2 point at one
  process-wide file; each capture copies what was appended during its step into its log.
  Native output cannot be told apart by thread, so steps that overlap (two devices building
  at once) each keep all of it;
* Python (`warnings`, the `logging` fallback handler, a library's `print`): `install()`
  puts routers in `sys.stdout` / `sys.stderr` that send what a capturing thread writes to
  its step's log and everything else to the terminal, through duplicates of the original
  descriptors. So farm's own lines (the live view, step lines, errors), written by other
  threads or outside any step, still reach the terminal while a step captures.

Life cycle: `install()` once per CLI process (`farm.cli.main`), `uninstall()` undoes it
(tests); `with capture("build", where="local") as cap:` around a step, then `cap.summary()`
is the one line to show, or None when the step printed nothing (no log file is kept then).
Without `install()`, `capture` captures nothing (library use keeps its output as it was).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from farm.paths import state_dir

_local = threading.local()      # .sink: where a capturing thread's Python text goes
_lock = threading.Lock()
_state: dict[str, Any] = {}     # installed: terminal fds, routers, the native file, users


def logs_dir() -> Path:
    return state_dir() / "logs"


class _Router(io.TextIOBase):
    """sys.stdout / sys.stderr after `install()`: a capturing thread's writes go to the
    captured output, every other write to `target` (the terminal, through a duplicated
    fd)."""

    def __init__(self, target: TextIO) -> None:
        self.target = target

    def write(self, text: str) -> int:
        sink = getattr(_local, "sink", None)
        return (sink or self.target).write(text)

    def flush(self) -> None:
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:  # errors, buffer, ...
        return getattr(self.target, name)


def _terminal(stream: TextIO, fd: int) -> tuple[TextIO, int | None]:
    """A text stream that keeps reaching where `stream` wrote when fd `fd` is redirected:
    on a duplicate of `fd` when `stream` writes to it, else `stream` itself (pytest's
    capture, a StringIO)."""
    try:
        if stream.fileno() != fd:
            return stream, None
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return stream, None
    stream.flush()
    dup = os.dup(fd)
    os.set_inheritable(dup, False)
    out = io.TextIOWrapper(io.FileIO(dup, "w", closefd=False),
                           encoding=getattr(stream, "encoding", None) or "utf-8",
                           errors="backslashreplace", line_buffering=True, write_through=True)
    return out, dup


def install() -> None:
    """Route sys.stdout / sys.stderr (see module docstring); idempotent."""
    with _lock:
        if _state:
            return
        import sys

        out, out_fd = _terminal(sys.stdout, 1)
        err, err_fd = _terminal(sys.stderr, 2)
        _state.update(stdout=sys.stdout, stderr=sys.stderr, fds={1: out_fd, 2: err_fd},
                      users=0, native=None)
        sys.stdout, sys.stderr = _Router(out), _Router(err)  # type: ignore[assignment]


def uninstall() -> None:
    import sys

    with _lock:
        if not _state:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = _state["stdout"], _state["stderr"]
        for fd in _state["fds"].values():
            if fd is not None:
                os.close(fd)
        _state.clear()


def installed() -> bool:
    return bool(_state)


def _flush_native() -> None:
    """C stdio buffers (a library's printf to a redirected stdout is fully buffered)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


def _native_on() -> tuple[Path, int]:
    """First capture in: fds 1 and 2 to the process's native file; (file, size now)."""
    with _lock:
        if _state["users"] == 0:
            logs_dir().mkdir(parents=True, exist_ok=True)
            path = logs_dir() / f".native-{os.getpid()}.log"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            _flush_native()
            saved = {n: os.dup(n) for n in (1, 2)}
            for n in (1, 2):
                os.dup2(fd, n)
            os.close(fd)
            _state.update(native=path, saved=saved)
            if "sink" not in _state:  # Python text of capturing threads: onto fd 2
                _state["sink"] = io.TextIOWrapper(io.FileIO(2, "w", closefd=False),
                                                  encoding="utf-8", errors="backslashreplace",
                                                  write_through=True)
        _state["users"] += 1
        path = _state["native"]
        return path, path.stat().st_size


def _native_off() -> None:
    """Last capture out: fds 1 and 2 back where they were."""
    with _lock:
        _state["users"] -= 1
        if _state["users"] == 0:
            _flush_native()
            for n, fd in _state.pop("saved").items():
                os.dup2(fd, n)
                os.close(fd)
            with contextlib.suppress(OSError):
                _state["native"].unlink()


@dataclass
class Capture:
    """One step's captured output: `path` (its log; absent when it stayed empty)."""

    step: str
    path: Path | None = None
    lines: list[str] = field(default_factory=list)

    def summary(self) -> str | None:
        """One line naming the log, what it holds most and how much; None when empty."""
        if not self.lines or self.path is None:
            return None
        counts = Counter(_gist(line) for line in self.lines if line.strip())
        top, times = counts.most_common(1)[0] if counts else ("", 0)
        n = len(self.lines)
        what = "1 line" if n == 1 else f"{n} lines"
        quote = "" if not top else f" (“{top}”)" if n == 1 else \
            f" (most: “{top}”{f' ×{times}' if times > 1 else ''})"
        return f"{self.step}: {what} of library output{quote} in {_shown(self.path)}"


def _gist(line: str) -> str:
    """What a line says, so repeats count as one message: without TVM's `[12:00:01]
    /project/src/x.cc:275: ` prefix, quoted names as '…', cut at 70 characters."""
    text = re.sub(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: ", "", line.strip())
    text = re.sub(r"'[^']*'", "'…'", text)
    return text if len(text) <= 70 else text[:69] + "…"


def _shown(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


@contextlib.contextmanager
def capture(step: str, where: str | None = None) -> Iterator[Capture]:
    """Capture what libraries print during the block (see module docstring); `where` (a
    device) goes into the log's name."""
    cap = Capture(step)
    if not _state:
        yield cap
        return
    before = getattr(_local, "sink", None)
    native, start = _native_on()
    # this thread's Python-level output joins the native file (fd 2 points there now), in
    # order with what the libraries' C++ writes
    _local.sink = _state["sink"]
    try:
        yield cap
    finally:
        _local.sink = before
        _flush_native()
        try:
            with open(native, "rb") as src:
                src.seek(start)
                text = src.read().decode("utf-8", "backslashreplace")
        except OSError:
            text = ""
        _native_off()
    if text.strip():
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{stamp}-{step}" + (f"-{where}" if where
                                                                      else ""))
        cap.path = logs_dir() / f"{name}-{os.getpid()}.log"
        with open(cap.path, "a", encoding="utf-8") as log:
            log.write(text if text.endswith("\n") else text + "\n")
        cap.lines = text.splitlines()
