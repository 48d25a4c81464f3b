"""Reaching a device through its gateway (`via:` in the inventory, OpenSSH's ProxyJump).

farm connects to the gateway with its own `SSHTransport` (host key checked against the
gateway's known_hosts, its own user and key), then asks the gateway's sshd for a
`direct-tcpip` channel to the device's `host:port`. That channel is the socket the device's
SSH session runs over, end to end encrypted: the gateway forwards bytes and never sees the
device's session, and the device's host key is checked against the device's own
known_hosts entry as on a direct connection. Nothing runs on the gateway (no `ssh -W`, no
shell command built from inventory strings). A chain (the gateway has its own `via`) nests:
the gateway's transport opens its channel through its own gateway in the same way.

What the gateway answers when the channel cannot be opened (RFC 4254 5.1 reason codes) is
named in one line: 2 "connect failed" (nothing listens there, or the device is unreachable
from the gateway: may pass, retried once like a refused direct connection), 1 "administratively
prohibited" (the gateway's sshd forbids forwarding: `AllowTcpForwarding`).
"""

from __future__ import annotations

import paramiko

from farm import followup
from farm.errors import HostKeyError, TransportError
from farm.inventory.device import Device
from farm.transports.ssh_endpoint import EndpointFailure

OPEN_FAILED = {1: "administratively prohibited", 2: "connect failed",
               3: "unknown channel type", 4: "resource shortage"}


def gateway_error(device: Device, exc: TransportError) -> TransportError:
    """`exc` raised while connecting to `device`'s gateway, restated for `device` (one line
    that names both; a host-key problem stays a HostKeyError pointing at the gateway)."""
    gateway = device.gateway
    assert gateway is not None
    prefix = f"device {gateway.name!r}: "
    detail = exc.message[len(prefix):] if exc.message.startswith(prefix) else exc.message
    message = f"cannot reach it through gateway {gateway.name!r}: {detail}"
    if isinstance(exc, HostKeyError):
        return HostKeyError(message, device=device.name, hint=exc.hint)
    if isinstance(exc, EndpointFailure):
        return EndpointFailure(message, device=device.name, hint=exc.hint,
                               transient=exc.transient)
    return TransportError(message, device=device.name, hint=exc.hint)


def open_channel(gateway: paramiko.Transport, device: Device,
                 timeout: float) -> paramiko.Channel:
    """A `direct-tcpip` channel from the gateway to the device's sshd, or an
    EndpointFailure naming what the gateway said."""
    assert device.host and device.gateway is not None
    name = device.gateway.name
    where = f"{device.host}:{device.port}"
    try:
        # the originator address is informational (sshd logs it); farm has no local port
        return gateway.open_channel("direct-tcpip", (device.host, device.port),
                                    ("127.0.0.1", 0), timeout=timeout)
    except paramiko.ChannelException as exc:
        said = OPEN_FAILED.get(exc.code, f"code {exc.code}")
        if exc.code == 1:
            raise EndpointFailure(
                f"gateway {name!r} refused to open a channel to {where} ({said})",
                device=device.name, transient=False,
                hint=f"allow TCP forwarding for farm's user in the sshd_config of {name} "
                     "(`AllowTcpForwarding yes`)") from None
        # paramiko keeps only the code's name (the server's own words go to its log)
        raise EndpointFailure(
            f"cannot connect to {where} through gateway {name!r}: the gateway could not "
            f"reach it (channel open failed: {said})", device=device.name,
            transient=exc.code == 2,
            hint=f"check the device is on, its sshd runs, and `host`/`port` as seen from "
                 f"{name}; `{followup.command('devices', 'check', name)}` checks the "
                 "gateway") from None
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise EndpointFailure(
            f"cannot open a channel to {where} through gateway {name!r}: "
            f"{type(exc).__name__}: {exc}", device=device.name, transient=True,
            hint=f"check the gateway {name} (`{followup.command('devices', 'check', name)}`)"
        ) from None
