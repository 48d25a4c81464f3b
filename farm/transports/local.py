"""The `local` transport: this machine, argument vectors run through subprocess (no shell)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from farm.errors import TransportError
from farm.transports.base import (
    LINE_CAP_BYTES,
    QueuedProcess,
    RunResult,
    Transport,
    copy_capped,
)

_COPY_BLOCK = 4 << 20


class LocalProcess(QueuedProcess):
    """A child process in its own process group, so close() ends its children too."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None) -> None:
        full_env = {**os.environ, **(env or {})}
        try:
            self._proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=full_env, start_new_session=True,
                text=True, bufsize=1, errors="replace",  # a bad byte must reach the decoder
            )
        except OSError as exc:
            raise TransportError(f"cannot start {argv[0]!r}: {exc}", device="local") from exc
        super().__init__()
        self._stderr: deque[str] = deque(maxlen=200)
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump_stdout(self) -> None:
        assert self._proc.stdout is not None
        skipping = False  # inside the dropped rest of an over-long line
        while True:
            line = self._proc.stdout.readline(LINE_CAP_BYTES + 1)
            if not line:
                break
            complete = line.endswith("\n")
            if not skipping:
                self._lines.put(line.rstrip("\n"))
            skipping = not complete
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr.append(line)

    def write_line(self, line: str) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise TransportError("process stdin closed", device="local") from exc

    def stderr_tail(self) -> str:
        return "".join(self._stderr)[-4096:]

    def exit_status(self) -> int | None:
        return self._proc.poll()

    def close(self, timeout: float = 5.0) -> None:
        if self._proc.stdin and not self._proc.stdin.closed:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=timeout)
        # the group may hold grandchildren even after the leader exited
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()

    @property
    def pid(self) -> int:
        return self._proc.pid


class LocalTransport(Transport):
    """Runs commands on this machine."""

    def run(self, argv: Sequence[str], *, timeout: float | None = 60.0, check: bool = True,
            env: Mapping[str, str] | None = None, stdin: bytes | None = None) -> RunResult:
        try:
            proc = subprocess.run(list(argv), input=stdin, capture_output=True, timeout=timeout,
                                  env={**os.environ, **(env or {})}, check=False)
        except subprocess.TimeoutExpired as exc:
            raise TransportError(f"{argv[0]!r} timed out after {timeout} s",
                                 device=self.device.name) from exc
        except OSError as exc:
            raise TransportError(f"cannot run {argv[0]!r}: {exc}", device=self.device.name) from exc
        result = RunResult(tuple(argv), proc.returncode, proc.stdout.decode(errors="replace"),
                           proc.stderr.decode(errors="replace"))
        if check and not result.ok:
            raise TransportError(
                f"command {argv[0]!r} exited {result.exited}: {result.stderr.strip()[-500:]}",
                device=self.device.name)
        return result

    def start(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> LocalProcess:
        return LocalProcess(argv, env)

    def put(self, local: Path, remote: str,
            callback: Callable[[int, int], None] | None = None, *, offset: int = 0,
            stop: Callable[[], bool] | None = None) -> None:
        from farm.transports.sftp_upload import UploadInterrupted

        size = Path(local).stat().st_size
        position = offset
        try:
            with open(local, "rb") as source, open(remote, "r+b" if offset else "wb") as out:
                source.seek(offset)
                out.seek(offset)
                out.truncate()
                while block := source.read(_COPY_BLOCK):
                    if stop is not None and stop():
                        raise UploadInterrupted(f"copy to {remote} stopped at {position} of "
                                                f"{size} bytes", device=self.device.name)
                    out.write(block)
                    position += len(block)
                    if callback:
                        callback(position, size)
        except OSError as exc:
            raise TransportError(f"cannot write {remote}: {exc}", device=self.device.name) from exc
        if callback and size == offset:
            callback(size, size)

    def get(self, remote: str, local: Path, *, max_bytes: int | None = None) -> None:
        try:
            if max_bytes is None:
                shutil.copyfile(remote, local)
                return
            with open(remote, "rb") as src, open(local, "wb") as dst:
                copy_capped(src, dst, max_bytes, remote, self.device.name)
        except OSError as exc:
            raise TransportError(f"cannot read {remote}: {exc}", device=self.device.name) from exc

    def close(self) -> None:
        pass
