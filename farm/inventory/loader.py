"""Load and validate `devices.yaml` into `Device` records.

Lookup order: `--inventory PATH`, then `$FARM_INVENTORY`, then `./devices.yaml`; with
none of them, the fleet is just the built-in `local` device. Every problem is a
`ConfigError` naming the file, the line, the device and the key, with the fix.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from farm import followup
from farm.errors import ConfigError
from farm.inventory.builtin import local_device
from farm.inventory.device import ARCHES, TRANSPORT_KINDS, TRANSPORTS, Device
from farm.inventory.jumps import gateway_problems, with_gateways
from farm.inventory.yaml_nodes import Located, read_yaml

INVENTORY_ENV = "FARM_INVENTORY"
DEFAULT_INVENTORY = "devices.yaml"
KNOWN_FEATURES = frozenset({
    "neon", "dotprod", "i8mm", "sve", "fp16",
    "avx2", "fma", "avx512f", "avx512bw", "avx512vnni", "avxvnni", "f16c", "sse4.2",
    "amx-tile", "amx-int8",
})

# Values that reach a remote command line or a path must never need shell quoting tricks.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}")
_USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
_PATH_RE = re.compile(r"[A-Za-z0-9_./~+-]{1,255}")
_TRIPLE_RE = re.compile(r"[a-z0-9_]+(-[a-z0-9_.]+){1,3}")
_MAX_STR = 255


@dataclass(frozen=True)
class Inventory:
    """The fleet: devices by name (always including `local`) and where it came from."""

    devices: dict[str, Device]
    source: str | None  # the file read, or None when only the built-in device exists

    def get(self, name: str) -> Device:
        if name not in self.devices:
            close = difflib.get_close_matches(name, self.devices, n=1)
            hint = (f"did you mean {close[0]!r}?" if close else
                    f"run `{followup.command('devices')}` to list them")
            where = f" in {self.source}" if self.source else " (no inventory file found)"
            raise ConfigError(f"no device named {name!r}{where}", hint=hint)
        return self.devices[name]

    def select(self, names: list[str] | None, all_devices: bool = False) -> list[Device]:
        """Devices named on the command line; `--all` means every device of the file."""
        if all_devices:
            chosen = [d for d in self.devices.values() if not d.is_local] or [self.devices["local"]]
            return chosen
        return [self.get(n) for n in (names or ["local"])]


def find_inventory(explicit: str | None) -> Path | None:
    """Resolve which inventory file to read, or None for the built-in device only."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError("inventory file not found", file=str(path),
                              hint="check the --inventory path")
        return path
    env = os.environ.get(INVENTORY_ENV)
    if env:
        path = Path(env)
        if not path.is_file():
            raise ConfigError(f"inventory file not found (from ${INVENTORY_ENV})", file=env,
                              hint=f"fix or unset ${INVENTORY_ENV}")
        return path
    default = Path.cwd() / DEFAULT_INVENTORY
    return default if default.is_file() else None


def load_inventory(explicit: str | None = None) -> Inventory:
    """Find and load the inventory (see module docstring)."""
    path = find_inventory(explicit)
    builtin = local_device()
    if path is None:
        return Inventory({"local": builtin}, None)
    devices = parse_inventory(path.read_text(errors="replace"), str(path), base_dir=path.parent)
    return Inventory({"local": builtin, **{d.name: d for d in devices}}, str(path))


def parse_inventory(text: str, file: str, base_dir: Path | None = None) -> list[Device]:
    """Validate an inventory text; return its devices in file order."""
    root = read_yaml(text, file)
    if root is None:
        return []
    if not isinstance(root.value, dict):
        raise ConfigError("the top level must be a mapping with a `devices:` list",
                          file=file, line=root.line)
    top = root.value
    # every mistake is collected and reported at once (three mistakes took three runs)
    errors: list[ConfigError] = []
    _reject_unknown(top, {"version", "defaults", "devices"}, file, None, errors)
    if "version" in top and top["version"].value != 1:
        raise ConfigError(f"inventory version {top['version'].value!r} is not supported",
                          file=file, line=top["version"].line, key="version",
                          hint="this farm reads `version: 1`")
    defaults: dict[str, Located] = {}
    if "defaults" in top:
        node = top["defaults"]
        if not isinstance(node.value, dict):
            raise ConfigError("`defaults` must be a mapping", file=file, line=node.line,
                              key="defaults")
        _reject_unknown(node.value, set(_FIELDS) - {"name"}, file, None, errors)
        defaults = {k: v for k, v in node.value.items() if k in _FIELDS}
    devices_node = top.get("devices")
    if devices_node is None or devices_node.value is None:
        raise_all(errors)
        return []
    if not isinstance(devices_node.value, list):
        raise ConfigError("`devices` must be a list of device mappings", file=file,
                          line=devices_node.line, key="devices", hint="write `- name: ...` items")
    seen: dict[str, int] = {}
    via_lines: dict[str, int] = {}
    out = []
    for entry in devices_node.value:
        try:
            device = _parse_device(entry, defaults, file, base_dir)
        except ConfigError as exc:
            errors.extend(getattr(exc, "problems", [exc]))
            continue
        if device.name in seen:
            errors.append(ConfigError(
                f"duplicate device name (first defined at line {seen[device.name]})",
                file=file, line=entry.line, device=device.name, key="name",
                hint="give every device a unique name"))
            continue
        seen[device.name] = entry.line
        via = entry.value.get("via") or defaults.get("via")
        if via is not None:
            via_lines[device.name] = via.line
        out.append(device)
    raise_all(errors)
    raise_all(gateway_problems(out, via_lines, file))
    return with_gateways(out)


def raise_all(errors: list[ConfigError]) -> None:
    """Raise the collected problems: one as itself, several as one ConfigError listing each
    (its file/line/device/key are the first's; `problems` keeps them all)."""
    if not errors:
        return
    if len(errors) == 1:
        raise errors[0]
    listed = "\n".join(f"  - {e.message}" + (f" (hint: {e.hint})" if e.hint else "")
                       for e in errors)
    combined = ConfigError(f"{len(errors)} problems in the inventory:\n{listed}",
                           hint="every problem is listed above: fix them all, then run again")
    first = errors[0]
    combined.file, combined.line, combined.device, combined.key = (
        first.file, first.line, first.device, first.key)
    combined.problems = list(errors)  # type: ignore[attr-defined]
    raise combined


def _reject_unknown(mapping: dict[str, Located], allowed: set[str], file: str,
                    device: str | None, errors: list[ConfigError]) -> None:
    for key, value in mapping.items():
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = (f"did you mean {close[0]!r}?" if close
                    else f"allowed keys: {', '.join(sorted(allowed))}")
            errors.append(ConfigError("unknown key", file=file, line=value.line,
                                      device=device, key=key, hint=hint))


def _parse_device(entry: Located, defaults: dict[str, Located], file: str,
                  base_dir: Path | None) -> Device:
    """One device; every problem of it is collected, then raised together (`raise_all`)."""
    if not isinstance(entry.value, dict):
        raise ConfigError("each device must be a mapping of keys", file=file, line=entry.line,
                          hint="write `- name: mydevice` followed by its keys")
    raw = entry.value
    name_node = raw.get("name")
    label = name_node.value if name_node and isinstance(name_node.value, str) else None
    errors: list[ConfigError] = []
    _reject_unknown(raw, set(_FIELDS), file, label, errors)
    merged = {k: v for k, v in {**defaults, **raw}.items() if k in _FIELDS}
    for required in ("name", "transport", "arch"):
        if required not in merged:
            errors.append(ConfigError("missing required key", file=file, line=entry.line,
                                      device=label, key=required,
                                      hint=_FIELDS[required].help))
    values: dict[str, Any] = {}
    for key, node in merged.items():
        try:
            values[key] = _FIELDS[key].check(node, _Ctx(file, node.line, label, key, base_dir))
        except ConfigError as exc:
            errors.append(exc)
    if errors:
        raise_all(errors)
    device_name = values["name"]
    if device_name == "local":
        raise ConfigError("the name 'local' is reserved for this machine", file=file,
                          line=entry.line, device="local", key="name",
                          hint="choose another name; `local` is always available built in")
    ctx = _Ctx(file, entry.line, device_name, None, base_dir)
    _check_transport(values, ctx)
    values.setdefault("triple", f"{values['arch']}-linux-gnu")
    if not str(values["triple"]).startswith(values["arch"]):
        raise ConfigError(f"triple {values['triple']!r} does not match arch {values['arch']!r}",
                          file=file, line=merged["triple"].line, device=device_name,
                          key="triple", hint=f"use a triple that starts with {values['arch']}-")
    for key in ("features", "tags"):
        if key in values:
            values[key] = tuple(values[key])
    return Device(**values, source=f"{file}:{entry.line}")


def _check_transport(values: dict[str, Any], ctx: _Ctx) -> None:
    transport = values["transport"]
    if transport == "ssh" and not values.get("host"):
        raise ctx.error("an ssh device needs `host`", key="host",
                        hint="add `host: <address>` (and `port:` if not 22)")
    if TRANSPORT_KINDS[transport].tracker and not values.get("key"):
        raise ctx.error(f"a {transport} device needs the tracker `key` it registers under",
                        key="key", hint="add `key: <rpc key>`, e.g. the key set in TVM's RPC app")
    if transport == "local":
        raise ctx.error("transport `local` is only for the built-in `local` device",
                        key="transport", hint="use `ssh` or `tvm-rpc` for inventory devices")


@dataclass(frozen=True)
class _Ctx:
    file: str
    line: int
    device: str | None
    key: str | None
    base_dir: Path | None

    def error(self, message: str, *, key: str | None = None,
              hint: str | None = None) -> ConfigError:
        return ConfigError(message, file=self.file, line=self.line, device=self.device,
                           key=key or self.key, hint=hint)


@dataclass(frozen=True)
class _Field:
    check: Callable[[Located, _Ctx], Any]
    help: str


def _str(pattern: re.Pattern[str], what: str) -> Callable[[Located, _Ctx], str]:
    def check(node: Located, ctx: _Ctx) -> str:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value is None:
            raise ctx.error(f"expected a string, got {type(value).__name__}",
                            hint=f"write {what}")
        value = str(value)
        if len(value) > _MAX_STR:
            raise ctx.error(f"value is {len(value)} characters long (at most {_MAX_STR})",
                            hint=f"write {what}")
        if not pattern.fullmatch(value):
            raise ctx.error(f"{value!r} is not a valid value",
                            hint=f"write {what}; no spaces, quotes or shell metacharacters")
        return value
    return check


def _path(absolute: bool, resolve: bool) -> Callable[[Located, _Ctx], str]:
    base = _str(_PATH_RE, "a path made of letters, digits and ._/~+-")

    def check(node: Located, ctx: _Ctx) -> str:
        value = base(node, ctx)
        if ".." in Path(value).parts:
            raise ctx.error(f"path {value!r} contains '..'",
                            hint="write the path without '..' components")
        if absolute and not value.startswith("/"):
            raise ctx.error(f"path {value!r} must be absolute", hint="start it with /")
        if resolve:
            path = Path(value).expanduser()
            if not path.is_absolute() and ctx.base_dir is not None:
                path = ctx.base_dir / path
            return str(path)
        return value
    return check


def _choice(options: tuple[str, ...]) -> Callable[[Located, _Ctx], str]:
    def check(node: Located, ctx: _Ctx) -> str:
        if node.value not in options:
            raise ctx.error(f"{node.value!r} is not one of {', '.join(options)}",
                            hint=f"use one of: {', '.join(options)}")
        return str(node.value)
    return check


def _int(low: int, high: int) -> Callable[[Located, _Ctx], int]:
    def check(node: Located, ctx: _Ctx) -> int:
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            raise ctx.error(f"expected an integer, got {type(node.value).__name__}",
                            hint=f"write a whole number from {low} to {high}")
        if not low <= node.value <= high:
            raise ctx.error(f"{node.value} is out of range", hint=f"use {low}..{high}")
        return node.value
    return check


def _list(item: Callable[[Located, _Ctx], str],
          allowed: frozenset[str] | None = None) -> Callable[[Located, _Ctx], list[str]]:
    def check(node: Located, ctx: _Ctx) -> list[str]:
        if not isinstance(node.value, list):
            raise ctx.error(f"expected a list, got {type(node.value).__name__}",
                            hint="write [a, b] or one `- item` per line")
        out = []
        for element in node.value:
            value = item(element, _Ctx(ctx.file, element.line, ctx.device, ctx.key, ctx.base_dir))
            if allowed is not None and value not in allowed:
                raise ctx.error(f"unknown feature {value!r}",
                                hint=f"known features: {', '.join(sorted(allowed))}")
            out.append(value)
        return out
    return check


def _bool(node: Located, ctx: _Ctx) -> bool:
    if not isinstance(node.value, bool):
        raise ctx.error(f"expected true or false, got {node.value!r}",
                        hint="write `emulated: true` or `emulated: false`")
    return node.value


def _text(node: Located, ctx: _Ctx) -> str:
    if not isinstance(node.value, str) or len(node.value) > 1000:
        raise ctx.error("expected a short text", hint="write a one-line description")
    return node.value


_FIELDS: dict[str, _Field] = {
    "name": _Field(_str(_NAME_RE, "a device name of letters, digits, '.', '_', '-'"),
                   "every device needs `name: <unique name>`"),
    "transport": _Field(_choice(TRANSPORTS), "add `transport: ssh` (or tvm-rpc)"),
    "arch": _Field(_choice(ARCHES), "add `arch: aarch64` or `arch: x86_64`"),
    "triple": _Field(_str(_TRIPLE_RE, "a target triple such as aarch64-linux-gnu"), ""),
    "features": _Field(_list(_str(_NAME_RE, "a CPU feature name"), KNOWN_FEATURES), ""),
    "cores": _Field(_int(1, 1024), ""),
    "host": _Field(_str(_HOST_RE, "a host name or IP address"), ""),
    "port": _Field(_int(1, 65535), ""),
    "user": _Field(_str(_USER_RE, "a login name"), ""),
    "identity_file": _Field(_path(absolute=False, resolve=True), ""),
    "known_hosts": _Field(_path(absolute=False, resolve=True), ""),
    "python": _Field(_path(absolute=False, resolve=False), ""),
    "workdir": _Field(_path(absolute=True, resolve=False), ""),
    "tracker_host": _Field(_str(_HOST_RE, "the tracker's host name or IP address"), ""),
    "tracker_port": _Field(_int(1, 65535), ""),
    "key": _Field(_str(_NAME_RE, "an RPC key of letters, digits, '.', '_', '-'"), ""),
    "tags": _Field(_list(_str(_NAME_RE, "a tag of letters, digits, '.', '_', '-'")), ""),
    "description": _Field(_text, ""),
    "emulated": _Field(_bool, ""),
    "via": _Field(_str(_NAME_RE, "the name of the device to jump through"), ""),
}

# `isa` is a run's cap (FARM_ISA, --isa: farm/inventory/capped.py), not the device's
assert set(_FIELDS) == {f.name for f in fields(Device)} - {"source", "isa", "gateway"}
