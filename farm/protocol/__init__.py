"""The agent protocol: `wire` (framing, kinds, size cap, version) and `session` (host side)."""

from farm.protocol.session import AgentSession, RouteFailed
from farm.protocol.wire import MAX_LINE_BYTES, PROTO

__all__ = ["MAX_LINE_BYTES", "PROTO", "AgentSession", "RouteFailed"]
