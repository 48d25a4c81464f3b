"""`farm devices` marks emulated devices; `farm devices check` warns about them."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace

import pytest

from farm.cli.main import main as farm_main
from farm.devices.check import check_device
from farm.inventory.builtin import local_device

INVENTORY = """\
version: 1
devices:
  - name: emu1
    transport: ssh
    host: 127.0.0.1
    arch: aarch64
    emulated: true
  - name: real1
    transport: ssh
    host: 127.0.0.1
    arch: aarch64
"""


def test_devices_list_marks_emulated(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    inv = tmp_path / "devices.yaml"
    inv.write_text(INVENTORY)
    assert farm_main(["--inventory", str(inv), "devices"]) == 0
    out = capsys.readouterr().out
    assert "emu1 (emulated)" in out and "real1 (emulated)" not in out


def test_check_warns_for_an_inventory_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    device = replace(local_device(), workdir=str(tmp_path / "w"), emulated=True)
    result = check_device(device)
    assert result.healthy
    assert any("emulated (the inventory says emulated: true)" in w for w in result.warnings)
    plain = check_device(replace(device, emulated=False))
    assert not any("emulated" in w for w in plain.warnings)


@pytest.mark.skipif(not shutil.which("qemu-x86_64"), reason="qemu-x86_64 missing")
def test_check_warns_when_the_probe_finds_qemu(tmp_path, monkeypatch):
    """The device's Python really runs under qemu-user; the inventory does not say so."""
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    wrapper = tmp_path / "qpython"
    wrapper.write_text(f'#!/bin/sh\nexec qemu-x86_64 {os.path.realpath(sys.executable)} "$@"\n')
    wrapper.chmod(0o755)
    device = replace(local_device(), workdir=str(tmp_path / "w"), python=str(wrapper))
    result = check_device(device)
    assert result.error is None, result.error
    assert result.probe["cpu"]["emulator"].endswith("qemu-x86_64")
    assert any("runs under" in w and "qemu-x86_64" in w for w in result.warnings)
    assert "add `emulated: true` to its inventory entry" in result.warnings
