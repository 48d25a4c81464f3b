"""The inventory's `emulated` flag: validated, default false, written by `farm lab`."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.inventory import load_inventory, parse_inventory

REPO = Path(__file__).resolve().parent.parent

BASE = """\
version: 1
devices:
  - name: board
    transport: ssh
    host: 10.0.0.5
    arch: aarch64
"""


def test_emulated_defaults_false_and_parses_true():
    [dev] = parse_inventory(BASE, "inv.yaml")
    assert dev.emulated is False
    [dev] = parse_inventory(BASE + "    emulated: true\n", "inv.yaml")
    assert dev.emulated is True


@pytest.mark.parametrize("value", ["yes-please", "1", "'true'"])
def test_emulated_must_be_a_boolean(value):
    with pytest.raises(ConfigError) as err:
        parse_inventory(BASE + f"    emulated: {value}\n", "inv.yaml")
    text = str(err.value)
    assert "inv.yaml" in text and "board" in text and "emulated" in text
    assert "true or false" in text


def test_emulated_in_defaults_applies_to_every_device():
    text = BASE.replace("devices:", "defaults:\n  emulated: true\ndevices:")
    [dev] = parse_inventory(text, "inv.yaml")
    assert dev.emulated is True


def test_example_inventory_documents_emulated():
    text = (REPO / "devices.example.yaml").read_text()
    assert "emulated:" in text
    assert load_inventory(str(REPO / "devices.example.yaml")).get("pixel7").emulated is False
