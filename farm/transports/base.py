"""The one small interface every transport implements (fabric-sized).

Commands are argument vectors, never shell strings: the SSH transport quotes each
argument with `shlex.quote` at one place (`command_line`), the local one passes the
vector to `subprocess` without a shell. A failure raises `TransportError` unless
`check=False`; a non-zero exit is then visible on the `RunResult`.
"""

from __future__ import annotations

import queue
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from farm.errors import TransportError
from farm.inventory.device import Device

# A line longer than this is cut here (and the rest of it dropped): a runaway remote
# process must not grow host memory; the protocol (1 MiB cap) then refuses the stub.
LINE_CAP_BYTES = 4 << 20


@dataclass(frozen=True)
class RunResult:
    """What one finished command gave back."""

    argv: tuple[str, ...]
    exited: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exited == 0


class RemoteProcess(ABC):
    """A long-running command with line-based stdin/stdout (the agent's channel).

    Life cycle: started by `Transport.start`; the caller writes lines, iterates stdout
    lines as they arrive (None on timeout), then `close()` which ends the process
    (closing stdin first, so a well-behaved agent exits by itself).
    """

    @abstractmethod
    def write_line(self, line: str) -> None: ...

    @abstractmethod
    def read_line(self, timeout: float | None = None) -> str | None:
        """Next stdout line without its newline; None on timeout; EOFError at end."""

    @abstractmethod
    def stderr_tail(self) -> str:
        """The last few KiB the process wrote to stderr (for error messages)."""

    @abstractmethod
    def exit_status(self) -> int | None:
        """The exit status once the process ended, else None."""

    @abstractmethod
    def close(self, timeout: float = 5.0) -> None: ...

    def lines(self, timeout: float | None = None) -> Iterator[str]:
        while True:
            try:
                line = self.read_line(timeout)
            except EOFError:
                return
            if line is None:
                return
            yield line


class QueuedProcess(RemoteProcess):
    """A RemoteProcess whose reader thread puts stdout lines in `self._lines` (None = EOF);
    `read_line` is the same for every such transport."""

    def __init__(self) -> None:
        self._lines: queue.Queue[str | None] = queue.Queue()

    def read_line(self, timeout: float | None = None) -> str | None:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is None:
            self._lines.put(None)  # keep signalling EOF to later readers
            raise EOFError
        return line


class Transport(ABC):
    """How farm reaches one device: run, start, put, get, close."""

    def __init__(self, device: Device) -> None:
        self.device = device

    @abstractmethod
    def run(self, argv: Sequence[str], *, timeout: float | None = 60.0, check: bool = True,
            env: Mapping[str, str] | None = None, stdin: bytes | None = None) -> RunResult: ...

    @abstractmethod
    def start(self, argv: Sequence[str], *,
              env: Mapping[str, str] | None = None) -> RemoteProcess: ...

    @abstractmethod
    def put(self, local: Path, remote: str,
            callback: Callable[[int, int], None] | None = None, *, offset: int = 0,
            stop: Callable[[], bool] | None = None) -> None:
        """Upload; `callback(bytes_done, bytes_total)` reports progress. `offset > 0`
        resumes: the remote file already holds the first `offset` bytes. `stop()` is polled
        while sending; True ends the upload with `UploadInterrupted` (the bytes written so
        far stay on the device)."""

    @abstractmethod
    def get(self, remote: str, local: Path, *, max_bytes: int | None = None) -> None:
        """Download; with `max_bytes`, a file that turns out larger (or endless, like a
        device file) is refused with TransportError after that many bytes."""

    @abstractmethod
    def close(self) -> None: ...

    def lost_link(self) -> str | None:
        """Why the connection went away when something on the way (a gateway) dropped it,
        for the one line a lost device gets; None when the transport cannot tell."""
        return None

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def copy_capped(src: BinaryIO, dst: BinaryIO, max_bytes: int | None, what: str,
                device: str) -> None:
    """Copy a stream, refusing more than `max_bytes` (a device must not fill the host)."""
    total = 0
    while True:
        block = src.read(1 << 16)
        if not block:
            return
        total += len(block)
        if max_bytes is not None and total > max_bytes:
            raise TransportError(f"{what} is over the {max_bytes}-byte limit for it: refused",
                                 device=device,
                                 hint="the device sent more than this file can hold")
        dst.write(block)


def command_line(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """The one place an argument vector becomes a remote shell command line."""
    prefix = []
    if env:
        prefix = ["env", *[f"{k}={v}" for k, v in env.items()]]
    return shlex.join([*prefix, *argv])
