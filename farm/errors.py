"""The error family of farm and the exit codes they map to at the CLI boundary.

Every message says what failed, where (file/line/device), and the next step.
Lower layers raise these; only `farm.cli` turns them into exit codes.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3  # some devices failed, the others' results are kept
EXIT_INTERRUPTED = 130


class FarmError(Exception):
    """Base of every error farm reports to the user (exit code 1 unless overridden)."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(FarmError):
    """Bad command-line usage (exit code 2)."""

    exit_code = EXIT_USAGE


class ConfigError(FarmError):
    """Invalid inventory or configuration; names file, line, device and key."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        device: str | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = []
        if file:
            where.append(f"{file}:{line}" if line else file)
        if device:
            where.append(f"device {device!r}")
        if key:
            where.append(f"key {key!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message, hint=hint)
        self.file, self.line, self.device, self.key = file, line, device, key


class TransportError(FarmError):
    """Could not reach or talk to a device (connect, auth, host key, dropped link)."""

    def __init__(self, message: str, *, device: str | None = None, hint: str | None = None):
        super().__init__(f"device {device!r}: {message}" if device else message, hint=hint)
        self.device = device


class HostKeyError(TransportError):
    """The device's SSH host key is unknown or does not match the pinned one."""


class BuildError(FarmError):
    """An artifact (model, TVM library, kernels, plan) could not be built."""


class DeployError(FarmError):
    """Artifacts could not be deployed or verified on a device."""


class AgentError(FarmError):
    """The on-device agent failed, spoke garbage, or a protocol version we do not speak."""


class ProtocolError(AgentError):
    """A protocol line could not be decoded or violates the protocol."""


class StoreError(FarmError):
    """The result store is unreadable, of an unknown schema version, or inconsistent."""


class StoreUnavailable(StoreError):
    """The store cannot take a write now (a full disk under a SQLite file, a PostgreSQL
    server that went away): nothing is wrong with what it holds. A bench keeps what it
    could not store in the spill file (`farm.results.keeper`) and goes on measuring."""
