"""Why a write failed, asked of the device (`farm.deploy.write_cause`).

Locally: the real probe (the device's Python, argv only) names a missing directory and a
write bigger than the free space; every cause has a sentence naming the directory and a
next step. On the lab: a read-only work dir (a read-only bind mount in the device's own
mount namespace) turns SFTP's bare "Failure" into "read-only file system".
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from farm.artifacts import make_artifact
from farm.deploy import deploy_device
from farm.deploy.write_cause import describe, explain_write_failure
from farm.inventory import load_inventory
from farm.inventory.builtin import local_device
from farm.transports import open_transport


def test_probe_names_a_missing_directory(tmp_path: Path) -> None:
    with open_transport(local_device()) as t:
        cause = explain_write_failure(t, local_device(), str(tmp_path / "a" / "b"), 10)
    assert cause is not None and cause.kind == "missing-dir"
    assert f"{tmp_path / 'a' / 'b'} does not exist" in cause.text and str(tmp_path) in cause.text


def test_probe_names_a_write_bigger_than_the_free_space(tmp_path: Path) -> None:
    with open_transport(local_device()) as t:
        cause = explain_write_failure(t, local_device(), str(tmp_path), 1 << 60)
    assert cause is not None and cause.kind == "no-space", cause
    assert "no space left in" in cause.text and "MiB free" in cause.text
    assert list(tmp_path.iterdir()) == []  # the probe file is gone


@pytest.mark.parametrize(("facts", "words"), [
    ({"kind": "read-only"}, "read-only file system"),
    ({"kind": "quota"}, "quota"),
    ({"kind": "permission", "uid": 1000, "error": "[Errno 13] Permission denied"},
     "not writable for the login user (uid 1000)"),
    ({"kind": "no-inodes"}, "no free inodes"),
    ({"kind": "unknown", "free": 1 << 30}, "cannot tell"),
])
def test_every_cause_names_the_directory_and_a_next_step(facts: dict, words: str) -> None:
    cause = describe({"dir": "/data/farm", **facts}, 1 << 20)
    assert words in cause.text and "/data/farm" in cause.text and cause.hint


def test_read_only_work_dir_on_the_lab(lab: Any, tmp_path: Path) -> None:
    if lab.state.mode != "netns":
        pytest.skip("needs the network-namespace lab (a mount in the device's namespace)")
    workdir = "/root/farm-readonly-test"
    device = dataclasses.replace(load_inventory(str(lab.inventory_path)).get("lab1"),
                                 workdir=workdir)
    first_file, second_file = tmp_path / "first.bin", tmp_path / "second.bin"
    first_file.write_bytes(os.urandom(4096))
    second_file.write_bytes(os.urandom(4096))
    first = make_artifact("runner", first_file, "runners")
    result = deploy_device(device, [first])
    assert result.ok, result.error
    lab.run_in("lab1", ["mount", "--bind", workdir, workdir]).check_returncode()
    try:
        lab.run_in("lab1", ["mount", "-o", "remount,bind,ro", workdir]).check_returncode()
        result = deploy_device(device, [first, make_artifact("runner", second_file, "runners")])
    finally:
        lab.run_in("lab1", ["umount", "-l", workdir])
    assert not result.ok
    print(result.error)
    assert f"{workdir}/runners is on a read-only file system" in result.error
    assert "(SFTP said: Failure)" in result.error  # what the user saw before
    assert "remount it read-write" in result.error
