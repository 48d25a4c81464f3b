"""The agent tells qemu-user from real hardware by itself (no inventory flag needed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

AGENTS = Path(__file__).resolve().parent.parent / "agents"
PROBE = (f"import json, sys; sys.path.insert(0, {str(AGENTS)!r}); import farm_agent; "
         "print(json.dumps(farm_agent.cpu_info()))")


def _cpu(argv: list[str]) -> dict:
    out = subprocess.run([*argv, "-c", PROBE], capture_output=True, text=True, timeout=120,
                         check=True)
    return json.loads(out.stdout)


def test_native_python_is_not_emulated():
    assert _cpu([sys.executable])["emulator"] is None


@pytest.mark.skipif(not shutil.which("qemu-x86_64"), reason="qemu-x86_64 missing")
def test_python_under_qemu_user_names_the_emulator():
    # the same host Python, run by qemu-user: /proc/self/exe still claims python
    python = os.path.realpath(sys.executable)
    cpu = _cpu(["qemu-x86_64", python])
    assert cpu["emulator"] is not None
    assert os.path.basename(cpu["emulator"]).startswith("qemu-x86_64")
