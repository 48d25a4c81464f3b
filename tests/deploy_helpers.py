"""Helpers of the deploy lab tests: a private work dir per test on the shared lab."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from farm.inventory import load_inventory
from farm.inventory.device import Device


def private_inventory(lab: Any, tmp_path: Path) -> tuple[Path, str]:
    """A copy of the lab inventory whose devices use a fresh work dir; (path, workdir)."""
    workdir = f"/root/deploy-{uuid.uuid4().hex[:8]}"
    text = lab.inventory_path.read_text().replace("workdir: /root/farm", f"workdir: {workdir}")
    path = tmp_path / "devices.yaml"
    path.write_text(text)
    return path, workdir


def device(inventory: Path, name: str) -> Device:
    return load_inventory(str(inventory)).get(name)


def remote_files(lab: Any, name: str, workdir: str) -> dict[str, int]:
    """relative path -> size of every file under the device's work dir (read without SSH)."""
    proc = lab.run_in(name, ["sh", "-c", f'cd {workdir} 2>/dev/null && find . -type f '
                             '-printf "%P|%s\\n"'])
    return {line.split("|")[0]: int(line.split("|")[1])
            for line in proc.stdout.splitlines() if "|" in line}


def manifest(lab: Any, name: str, workdir: str) -> dict[str, Any]:
    proc = lab.run_in(name, ["cat", f"{workdir}/manifest.json"])
    return json.loads(proc.stdout or "{}").get("files", {})
