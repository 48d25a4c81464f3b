"""A nestable lease lets the same process's benches run inside it; others still wait."""

from __future__ import annotations

import subprocess
import sys

import pytest

from farm.bench.lease import DeviceLease, LeaseBusy


def test_nested_leases_of_this_process_pass_through(tmp_path):
    outer = DeviceLease("dev", "pytest:test_x", directory=tmp_path, nestable=True)
    outer.acquire()
    try:
        inner = DeviceLease("dev", "run-1", directory=tmp_path)
        with inner.hold():
            assert outer.read()["run_id"] == "pytest:test_x"  # the outer lease stays
        assert outer.path.exists()  # the inner release did not drop the outer lease
        # another process still finds the device busy
        code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); "
                "from pathlib import Path; from farm.bench.lease import DeviceLease, LeaseBusy\n"
                f"try:\n  DeviceLease('dev', 'other', directory=Path({str(tmp_path)!r}))"
                ".acquire()\nexcept LeaseBusy as e:\n  print('busy', e)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        assert out.startswith("busy") and "pytest:test_x" in out
    finally:
        outer.release()
    assert not outer.path.exists()
    # once released, a plain lease takes the device normally and is not nestable
    plain = DeviceLease("dev", "run-2", directory=tmp_path)
    plain.acquire()
    try:
        with pytest.raises(LeaseBusy):
            DeviceLease("dev", "run-3", directory=tmp_path).acquire()
    finally:
        plain.release()
