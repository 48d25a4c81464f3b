"""The SSH transport against the real lab: host keys, quoting, streaming, files, deploy."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from farm.cli.main import main as farm_main
from farm.deploy import deploy
from farm.errors import HostKeyError, TransportError
from farm.inventory import load_inventory
from farm.transports import open_transport
from farm.transports.ssh import SSHTransport
from farm.transports.trust import fetch_host_key, pin_host_key

pytestmark = [pytest.mark.lab]


def lab_device(lab, name="lab1"):
    return load_inventory(str(lab.inventory_path)).get(name)


def keygen_fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[1]


def test_run_quotes_hostile_arguments(lab, tmp_path):
    device = lab_device(lab)
    with open_transport(device) as t:
        hostile = "a b; touch /tmp/farm-pwned-$(id -u) `reboot` 'q\" |&"
        result = t.run(["printf", "%s", hostile])
        assert result.ok and result.stdout == hostile
        assert t.run(["test", "-e", "/tmp/farm-pwned-0"], check=False).exited == 1
        assert t.run(["hostname"]).stdout.strip() != subprocess.getoutput("hostname")


def test_run_feeds_stdin_and_reads_both_streams_without_file_objects(lab, monkeypatch):
    # run() once used SSHClient.exec_command's file objects; a ChannelStdinFile finalised by
    # the garbage collector on paramiko's transport thread deadlocked a CI run. run() must
    # talk to the channel itself: making any channel file object here fails the test.
    import paramiko.channel

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"run() made a {type(self).__name__}")

    for cls in (paramiko.channel.ChannelFile, paramiko.channel.ChannelStdinFile,
                paramiko.channel.ChannelStderrFile):
        monkeypatch.setattr(cls, "__init__", refuse)
    device = lab_device(lab)
    payload = bytes(range(256)) * 8192  # 2 MiB: more than one window adjustment's worth
    script = ("import sys\n"
              "data = sys.stdin.buffer.read()\n"
              "sys.stdout.write(data.hex())\n"
              "sys.stderr.write('len %d' % len(data))\n"
              "sys.exit(3)")
    with open_transport(device) as t:
        result = t.run([device.python, "-c", script], stdin=payload, check=False)
        assert result.exited == 3 and not result.ok
        assert result.stdout == payload.hex() and result.stderr == f"len {len(payload)}"
        with pytest.raises(TransportError, match="exited 3"):
            t.run([device.python, "-c", "import sys; sys.exit(3)"])
        with pytest.raises(TransportError, match=r"(?i)timeout"):
            t.run(["sleep", "30"], timeout=1.0)
        # output closed at once, the command runs on: the exit status is waited for too
        with pytest.raises(TransportError, match=r"no exit status within 1\.0 s"):
            t.run(["sh", "-c", "exec >&- 2>&-; sleep 30"], timeout=1.0)
        assert t.run(["echo", "still usable"]).stdout == "still usable\n"


def test_stream_lines_and_files(lab, tmp_path):
    device = lab_device(lab)
    with open_transport(device) as t:
        proc = t.start([device.python, "-u", "-c",
                        "import sys\nfor l in sys.stdin: print('got', l.strip(), flush=True)"])
        proc.write_line("one")
        assert proc.read_line(timeout=10) == "got one"
        proc.close()
        src = tmp_path / "blob"
        src.write_bytes(bytes(range(256)) * 100)
        t.run(["mkdir", "-p", device.workdir])
        t.put(src, f"{device.workdir}/blob")
        t.get(f"{device.workdir}/blob", tmp_path / "back")
        assert (tmp_path / "back").read_bytes() == src.read_bytes()


def test_unknown_host_key_is_rejected_with_trust_hint(lab, tmp_path):
    device = replace(lab_device(lab), known_hosts=str(tmp_path / "empty_known_hosts"))
    with pytest.raises(HostKeyError) as info:
        SSHTransport(device).run(["true"])
    assert "not in" in str(info.value) and f"farm devices trust {device.name}" in str(info.value)


def test_changed_host_key_is_rejected(lab, tmp_path):
    device = lab_device(lab)
    other = lab_device(lab, "lab2")
    # pin lab2's key under lab1's address: what a man in the middle would look like
    presented = fetch_host_key(other)
    forged = replace(device, known_hosts=str(tmp_path / "kh"))
    pin_host_key(forged, replace(presented, host_name=device.host))
    with pytest.raises(HostKeyError, match="CHANGED"):
        SSHTransport(forged).run(["true"])


def test_trust_shows_fingerprint_and_pins_only_when_asked(lab, tmp_path, capsys):
    device = lab_device(lab)
    presented = fetch_host_key(device)
    pub = Path(lab.device("lab1").dir) / "ssh_host_ed25519_key.pub"
    assert presented.fingerprint == keygen_fingerprint(pub)
    assert presented.pinned == "match"  # the lab pinned it in its known_hosts
    inv = tmp_path / "inv.yaml"
    text = lab.inventory_path.read_text().replace(str(lab.known_hosts), str(tmp_path / "kh"))
    inv.write_text(text)
    assert farm_main(["--inventory", str(inv), "devices", "trust", "lab1"]) == 1
    assert not (tmp_path / "kh").exists()  # shown, not pinned
    assert presented.fingerprint in capsys.readouterr().out
    assert farm_main(["--inventory", str(inv), "devices", "trust", "lab1", "--expect",
                      "SHA256:wrong"]) == 2
    assert farm_main(["--inventory", str(inv), "devices", "trust", "lab1", "--expect",
                      presented.fingerprint]) == 0
    SSHTransport(load_inventory(str(inv)).get("lab1")).run(["true"])  # now trusted


def test_connection_refused_is_a_clear_error(lab):
    device = replace(lab_device(lab), port=2)
    with pytest.raises(TransportError, match="cannot connect") as info:
        SSHTransport(device, connect_budget_s=1.0).run(["true"])
    assert "connection refused (nothing listens on port 2)" in str(info.value)
    assert "sshd runs" in str(info.value)  # the next step


def test_devices_check_all_reports_healthy_and_aarch64(lab, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    code = farm_main(["--inventory", str(lab.inventory_path), "devices", "check", "--all",
                      "--output", "json"])
    report = json.loads(capsys.readouterr().out)
    by_name = {r["device"]: r for r in report["results"]}
    assert code == 0, report
    assert set(lab.devices) <= set(by_name)
    assert all(r["healthy"] for r in by_name.values())
    if "pixel7" in by_name:
        assert by_name["pixel7"]["probe"]["arch"] == "aarch64"  # from its own Python
    assert list((tmp_path / "checks").glob("check-*.json"))


def test_deploy_twice_uploads_nothing_the_second_time(lab, tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_HOME", str(tmp_path))
    devices = [lab_device(lab, n) for n in lab.devices]
    first = deploy(devices)
    assert all(r.ok for r in first.values()), {n: r.error for n, r in first.items()}
    second = deploy(devices)
    assert all(r.ok and not r.uploaded and r.unchanged for r in second.values())
