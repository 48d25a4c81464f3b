"""Fetch a device's presented SSH host key and pin it in a known_hosts file.

Used by `farm devices trust NAME`: the key is shown first; it is written only when the
user asks (interactive yes, `--pin`, or `--expect FINGERPRINT` matching). A device behind a
gateway (`via`) is reached through it, so its gateway's key must be pinned first (trust the
gateway, then the device); each key goes to its own device's known_hosts entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import paramiko

from farm.errors import TransportError
from farm.inventory.device import Device
from farm.transports.ssh import (
    CONNECT_TIMEOUT_S,
    SSHTransport,
    fingerprint,
    host_key_name,
    known_hosts_path,
)


@dataclass(frozen=True)
class PresentedKey:
    device: str
    host_name: str  # as written in known_hosts
    key: paramiko.PKey
    fingerprint: str
    pinned: str  # "match" | "changed" | "unknown"


def fetch_host_key(device: Device) -> PresentedKey:
    """Connect without authenticating and read the host key the server presents."""
    if device.transport != "ssh" or not device.host:
        raise TransportError("only ssh devices have host keys", device=device.name)
    # a TCP connection, or for a device with `via` a channel through its gateway: the
    # gateway's own pinned key is verified (and farm logs in there) before this key is read
    carrier = SSHTransport(device)
    try:
        sock = carrier.open_stream()
        transport = paramiko.Transport(sock)  # type: ignore[arg-type]
        try:
            transport.start_client(timeout=CONNECT_TIMEOUT_S)
            key = transport.get_remote_server_key()
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise TransportError(f"SSH handshake failed: {exc}", device=device.name) from None
        finally:
            transport.close()
    finally:
        carrier.close()
    name = host_key_name(device)
    hosts = paramiko.HostKeys()
    path = known_hosts_path(device)
    if path.is_file():
        hosts.load(str(path))
    known = hosts.lookup(name) or {}
    pinned = known.get(key.get_name())
    state = "unknown" if pinned is None else ("match" if pinned == key else "changed")
    if pinned is None and known:
        state = "changed"  # a key of another type is pinned
    return PresentedKey(device.name, name, key, fingerprint(key), state)


def pin_host_key(device: Device, presented: PresentedKey) -> Path:
    """Write (or replace) the device's entry in its known_hosts file."""
    path = known_hosts_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    hosts = paramiko.HostKeys()
    if path.is_file():
        hosts.load(str(path))
    if presented.host_name in hosts:
        del hosts[presented.host_name]
    hosts.add(presented.host_name, presented.key.get_name(), presented.key)
    tmp = path.with_suffix(path.suffix + ".tmp")
    hosts.save(str(tmp))
    tmp.replace(path)
    return path
