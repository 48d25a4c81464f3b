"""Deploy progress per device: bytes, rate and ETA.

`deploy_progress(devices, console)` is a context manager yielding the `Progress` callback
deploy calls from its worker threads (device, bytes done, bytes total, status). On a
terminal it draws one rich bar per device (bytes, rate, ETA); elsewhere it prints one
line per device at most every `every_s` seconds and at each status change, so a log of a
slow link still says how far each device is and when it will be done.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

Callback = Callable[[str, int, int, str], None]


@dataclass
class _Line:
    started: float
    printed: float = 0.0
    status: str = ""


def rate_line(device: str, done: int, total: int, status: str, elapsed_s: float) -> str:
    """`lab1 uploading 12.0/40.0 MiB 10.1 MB/s ETA 3 s` (rate over the whole upload)."""
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    eta = f"ETA {(total - done) / rate:.0f} s" if rate > 0 and total > done else ""
    return (f"{device} {status} {done / 2**20:.1f}/{total / 2**20:.1f} MiB "
            f"{rate / 1e6:.1f} MB/s {eta}").rstrip()


@contextlib.contextmanager
def deploy_progress(devices: Sequence[str], console: Console,
                    every_s: float = 5.0) -> Iterator[Callback]:
    lock = threading.Lock()
    if not console.is_terminal:
        lines: dict[str, _Line] = {}

        def log(device: str, done: int, total: int, status: str) -> None:
            now = time.monotonic()
            with lock:
                line = lines.setdefault(device, _Line(now))
                if status == line.status and now - line.printed < every_s:
                    return
                line.status, line.printed = status, now
                console.print(rate_line(device, done, total, status, now - line.started),
                              highlight=False)

        yield log
        return
    with Progress(TextColumn("{task.description:<12}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeRemainingColumn(),
                  TextColumn("{task.fields[status]}"), console=console,
                  transient=False) as bar:
        tasks = {d: bar.add_task(d, total=None, status="queued") for d in devices}

        def draw(device: str, done: int, total: int, status: str) -> None:
            with lock:
                bar.update(tasks[device], completed=done, total=total or None, status=status)

        yield draw
