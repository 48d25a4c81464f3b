"""`via:` in devices.yaml: gateways resolved into chains; a wrong chain is one clear error
naming the file, the line of `via`, the device and the fix."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from farm.cli.main import main as farm_main
from farm.errors import ConfigError
from farm.inventory import load_inventory, parse_inventory
from farm.inventory.device import device_from_fields

FLEET = """\
version: 1
defaults:
  transport: ssh
  arch: aarch64
devices:
  - name: gate
    host: 10.0.0.1
  - name: inner
    host: 10.1.0.1
    via: gate
  - name: deep
    host: 127.0.0.1
    port: 8022
    via: inner
  - name: rpc
    transport: tvm-rpc
    key: phone
"""


def test_chains_resolve_nearest_gateway_first(tmp_path: Path) -> None:
    devices = {d.name: d for d in parse_inventory(FLEET, "f.yaml")}
    assert devices["gate"].gateway is None and devices["gate"].hops == ()
    assert devices["inner"].via == "gate" and devices["inner"].gateway == devices["gate"]
    assert [h.name for h in devices["deep"].hops] == ["gate", "inner"]
    assert devices["deep"].gateway.gateway.host == "10.0.0.1"


def test_device_round_trips_through_json_with_its_chain() -> None:
    deep = {d.name: d for d in parse_inventory(FLEET, "f.yaml")}["deep"]
    back = device_from_fields(json.loads(json.dumps(asdict(deep))))
    assert back == deep and [h.name for h in back.hops] == ["gate", "inner"]
    assert back.gateway.host == "10.1.0.1" and back.features == ()


def entry(name: str, via: str, transport: str = "ssh") -> str:
    extra = "    key: k\n" if transport == "tvm-rpc" else "    host: 10.9.9.9\n"
    return f"  - name: {name}\n    transport: {transport}\n{extra}    via: {via}\n"


@pytest.mark.parametrize(("name", "added", "device", "words"), [
    ("unknown", entry("far", "gaet"), "far", "gateway 'gaet' is not a device of this file"),
    ("self", entry("far", "far"), "far", "is its own gateway"),
    ("cycle", entry("a", "b") + entry("b", "a"), "a", "`via` loops: a -> b -> a"),
    ("cycle behind", entry("c", "a") + entry("a", "b") + entry("b", "a"), "a",
     "`via` loops: a -> b -> a"),
    ("local", entry("far", "local"), "far", "gateway 'local' is not a device"),
    ("rpc gateway", entry("far", "rpc"), "far", "gateway 'rpc' is a tvm-rpc device"),
    ("rpc device", entry("phone2", "gate", "tvm-rpc"), "phone2", "`via` is for ssh devices"),
])
def test_a_wrong_chain_names_file_line_device_and_fix(tmp_path: Path, name: str, added: str,
                                                      device: str, words: str) -> None:
    path = tmp_path / "devices.yaml"
    text = FLEET + added
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_inventory(str(path))
    error = info.value
    problems = getattr(error, "problems", [error])
    [first] = problems  # one problem, named once: at the device whose `via` is wrong
    assert first.device == device
    assert words in first.message, first.message
    assert first.key == "via" and first.file == str(path)
    via_line = text.splitlines()[first.line - 1]  # the line named is the `via:` line
    assert via_line.strip().startswith("via:"), via_line
    assert "\n" not in first.message and first.hint


def test_unknown_gateway_suggests_the_close_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean 'gate'"):
        parse_inventory(FLEET + entry("far", "gaet"), "f.yaml")


def test_devices_listing_shows_via_and_json_names_it(tmp_path: Path, capsys) -> None:
    path = tmp_path / "devices.yaml"
    path.write_text(FLEET)
    assert farm_main(["--inventory", str(path), "devices", "--output", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["deep"]["via"] == "inner" and "gateway" not in rows["deep"]
    assert farm_main(["--inventory", str(path), "devices"]) == 0
    assert "root@127.0.0.1:8022 via inner" in capsys.readouterr().out


def test_a_chain_longer_than_the_cap_is_refused() -> None:
    chain = "".join(entry(f"h{i}", f"h{i - 1}" if i else "gate") for i in range(9))
    with pytest.raises(ConfigError, match="more than 8 gateways: h8 -> h7") as info:
        parse_inventory(FLEET + chain, "f.yaml")
    assert info.value.device == "h8"
