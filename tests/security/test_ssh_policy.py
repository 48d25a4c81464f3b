"""SSH policy on the real lab: the lab's sshd offers public-key auth only (no password,
no keyboard-interactive); farm verifies host keys always (an unknown key is refused and
nothing is added to known_hosts; a changed key is a HostKeyError naming host, pinned file,
presented fingerprint and the explicit `farm devices trust` step); and a password typed
into the inventory is refused without being echoed."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest

from farm.errors import ConfigError, HostKeyError
from farm.inventory import load_inventory, parse_inventory
from farm.transports.ssh import SSHTransport
from farm.transports.trust import fetch_host_key

pytestmark = [pytest.mark.lab]


def _device(lab, name: str = "lab1"):
    return load_inventory(str(lab.inventory_path)).get(name)


def test_lab_sshd_offers_no_password_auth(lab) -> None:
    device = _device(lab)
    sock = socket.create_connection((device.host, device.port), timeout=10)
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=10)
        with pytest.raises(paramiko.BadAuthenticationType) as info:
            transport.auth_password("root", "root")
        assert set(info.value.allowed_types) == {"publickey"}
    finally:
        transport.close()


def test_password_login_attempt_is_refused_even_with_the_right_user(lab) -> None:
    device = _device(lab)
    client = paramiko.SSHClient()
    client.load_host_keys(str(lab.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.AuthenticationException):
        client.connect(device.host, port=device.port, username="root", password="root",
                       allow_agent=False, look_for_keys=False, timeout=10)
    client.close()


def test_unknown_host_is_refused_and_nothing_is_pinned(lab, tmp_path: Path) -> None:
    hosts = tmp_path / "known_hosts"
    hosts.write_text("")
    device = replace(_device(lab), known_hosts=str(hosts))
    with pytest.raises(HostKeyError, match="is not in") as info:
        SSHTransport(device, connect_budget_s=2).run(["true"])
    assert "farm devices trust lab1" in str(info.value)
    assert hosts.read_text() == ""  # never auto-added


def test_changed_host_key_message_names_everything(lab, tmp_path: Path) -> None:
    device = _device(lab)
    real = fetch_host_key(device)
    other = paramiko.Ed25519Key.from_private_key_file(
        str(Path(lab.device("lab2").dir) / "ssh_host_ed25519_key"))
    hosts = tmp_path / "known_hosts"
    hosts.write_text(f"{device.host} {other.get_name()} {other.get_base64()}\n")
    forged = replace(device, known_hosts=str(hosts))
    with pytest.raises(HostKeyError) as info:
        SSHTransport(forged, connect_budget_s=2).run(["true"])
    text = str(info.value)
    assert "host key CHANGED" in text and device.host in text and str(hosts) in text
    assert real.fingerprint in text  # what the device presented
    assert f"farm devices trust {device.name}" in text and "intercepting" in text


def test_password_in_the_inventory_is_refused_without_echo() -> None:
    text = ("version: 1\ndevices:\n  - name: p\n    transport: ssh\n    host: h\n"
            "    arch: aarch64\n    password: hunter2-secret\n")
    with pytest.raises(ConfigError) as info:
        parse_inventory(text, "devices.yaml")
    assert info.value.key == "password" and "unknown key" in str(info.value)
    assert "hunter2-secret" not in str(info.value)
