"""The typed, validated description of one device (data only, no behaviour)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from farm import isa as isa_levels


@dataclass(frozen=True)
class TransportKind:
    """What a transport lets farm do with a device (its `Transport` class, if any, is
    registered in farm/transports/__init__.py)."""

    name: str
    commands: bool           # runs commands: deploy, `devices check`, the agent
    tracker: bool = False    # reached through a TVM tracker key (`key:` required)


# the transport registry: a new transport adds its kind here and its opener in transports/
TRANSPORT_KINDS: dict[str, TransportKind] = {t.name: t for t in (
    TransportKind("local", commands=True),
    TransportKind("ssh", commands=True),
    TransportKind("tvm-rpc", commands=False, tracker=True),
)}
TRANSPORTS = tuple(TRANSPORT_KINDS)
ARCHES = ("x86_64", "aarch64")


@dataclass(frozen=True)
class Device:
    """One device of the fleet, as parsed from the inventory.

    `source` is "file:line" of its entry (or "<builtin>") so later errors can point at it.
    """

    name: str
    transport: str
    arch: str
    triple: str
    features: tuple[str, ...] = ()
    cores: int = 1
    host: str | None = None
    port: int = 22
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    python: str = "python3"
    workdir: str = "/tmp/farm"
    tracker_host: str = "127.0.0.1"
    tracker_port: int = 9190
    key: str | None = None  # TVM RPC tracker key (transport tvm-rpc)
    tags: tuple[str, ...] = ()
    description: str = ""
    # the device runs its code under an emulator (e.g. qemu-user): its latencies are not a
    # phone's, so reports never rank routes or gate on them (sizes, memory still count)
    emulated: bool = False
    # the ISA level farm's own routes are capped at (farm/isa.py; None: the device's own):
    # set by `FARM_ISA` for `local` and by `--isa` (farm.inventory.capped), never by the file
    isa: str | None = None
    # ProxyJump: the name of another inventory device whose SSH server farm connects to
    # first, reaching this device's host:port through it (a `direct-tcpip` channel)
    via: str | None = None
    # `via` resolved by the loader (farm/inventory/jumps.py), its own `gateway` set in turn;
    # left out of equality and repr: `via` names it
    gateway: Device | None = field(default=None, compare=False, repr=False)
    source: str = field(default="<builtin>", compare=False)

    @property
    def is_local(self) -> bool:
        return self.transport == "local"

    @property
    def kind(self) -> TransportKind:
        return TRANSPORT_KINDS[self.transport]

    @property
    def level(self) -> str:
        """The device's own ISA level, from its features (whatever the cap)."""
        return isa_levels.native_level(self.arch, self.features)

    @property
    def isa_level(self) -> str:
        """The level farm's own routes run at: the cap, else the device's own."""
        return self.isa or self.level

    @property
    def isa_features(self) -> tuple[str, ...]:
        """The features farm's own routes may use: the device's, less what the cap removes."""
        return isa_levels.cap_features(self.arch, self.features, self.isa)

    @property
    def hops(self) -> tuple[Device, ...]:
        """The gateways farm passes through to reach this device, nearest to the host first
        (empty for a device reached directly)."""
        chain: list[Device] = []
        gateway = self.gateway
        while gateway is not None:
            chain.insert(0, gateway)
            gateway = gateway.gateway
        return tuple(chain)

    @property
    def has_shell(self) -> bool:
        """Commands run there (so deploy, checks and the agent); a tvm-rpc device has none."""
        return self.kind.commands


def device_from_fields(values: dict[str, Any]) -> Device:
    """A Device from `dataclasses.asdict(device)` read back from JSON (a child process's
    job): lists become tuples again and the gateway chain is rebuilt."""
    values = dict(values)
    for key in ("features", "tags"):
        values[key] = tuple(values.get(key) or ())
    gateway = values.get("gateway")
    values["gateway"] = device_from_fields(gateway) if gateway else None
    return Device(**values)
