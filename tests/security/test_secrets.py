"""Keys and passwords never appear in logs, results or reports.

After a real bench on two lab devices (plus `farm devices check`, `farm deploy`,
`farm results show`, `farm report` with an HTML page, and a failed run whose error
messages name the key file), every byte farm wrote -- its state dir (store, WAL, checks,
locks, logs), the report page, everything printed, the device work dirs -- is searched for
the lab's private key material: each base64 line of the client key and of the devices'
host keys, the raw ed25519 seeds (bytes, hex, base64) and PEM markers. The key file's
*path* may be named in messages; its contents never.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import paramiko
import pytest

from farm.cli.main import main as farm_main

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def secret_needles(key_files: list[Path]) -> list[bytes]:
    needles: list[bytes] = [b"PRIVATE KEY"]
    for path in key_files:
        lines = [line.strip() for line in path.read_text().splitlines()
                 if line.strip() and not line.startswith("-----")]
        needles += [line.encode() for line in lines if len(line) >= 40]
        key = paramiko.Ed25519Key.from_private_key_file(str(path))
        seed = bytes(key._signing_key)[:32]  # the private half, not derivable from the pub
        needles += [seed, seed.hex().encode(), base64.b64encode(seed).rstrip(b"=")]
    return needles


def files_under(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]


def test_no_key_material_in_anything_farm_writes(lab, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("FARM_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    inv = str(lab.inventory_path)
    fast = ["--model", "tiny", "--routes", "ort", "--runs", "3", "--min-time", "0",
            "--warmup", "1", "--warmup-time", "0", "--profile-runs", "1", "--pause", "0",
            "--rounds", "1"]
    assert farm_main(["--inventory", inv, "devices", "check", "--all"]) == 0
    assert farm_main(["--inventory", inv, "deploy", "--device", "lab1"]) == 0
    assert farm_main(["--inventory", inv, "bench", "--device", "lab1", "--device", "lab2",
                      *fast]) == 0
    assert farm_main(["--inventory", inv, "bench", "--device", "lab1", *fast,
                      "--output", "jsonl"]) == 0
    # a failure whose messages talk about the key: a client key the device does not accept
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)],
                   check=True)
    bad_inv = tmp_path / "bad.yaml"
    bad_inv.write_text(lab.inventory_path.read_text().replace(str(lab.client_key), str(wrong)))
    assert farm_main(["--inventory", str(bad_inv), "bench", "--device", "lab1", *fast]) == 3
    assert farm_main(["results", "show", "latest"]) == 0
    report = tmp_path / "report.html"
    assert farm_main(["report", "--latest", "--html", str(report)]) == 0
    printed = capsys.readouterr()
    assert "authentication failed" in printed.err  # the failure really happened

    keys = [lab.client_key, wrong] + [Path(lab.device(d).dir) / "ssh_host_ed25519_key"
                                      for d in lab.devices]
    needles = secret_needles(keys)
    # the search can find what it looks for: the key files themselves are caught
    assert all(any(n in k.read_bytes() for n in secret_needles([k])) for k in keys)
    workdirs = [Path(lab.device(d).dir) / "home" / "farm" for d in lab.devices]
    searched = [*files_under(home, *workdirs), report]
    assert len(searched) > 10 and report.stat().st_size > 1000
    blobs = {str(p): p.read_bytes() for p in searched}
    blobs["<stdout>"] = printed.out.encode()
    blobs["<stderr>"] = printed.err.encode()
    leaks = [(where, needle[:12]) for where, data in blobs.items() for needle in needles
             if needle in data]
    assert leaks == []
