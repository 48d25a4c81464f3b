"""The launcher of TVM's programs (farm/rpc/tvm_main.py): runs the module with its
arguments and torch hidden, and a missing module is one line naming the interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from farm.rpc.tvm_main import tvm_program_argv

PROBE = '''
import sys
print("ARGV", sys.argv[1:], "NAME", __name__)
try:
    import torch
except ImportError:
    print("TORCH hidden")
'''


def test_runs_the_module_as_main_with_its_arguments_and_torch_hidden(tmp_path: Path) -> None:
    (tmp_path / "probe_mod.py").write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    argv = tvm_program_argv(sys.executable, "probe_mod", "--key", "a b;c", "--silent")
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ARGV ['--key', 'a b;c', '--silent'] NAME __main__" in out.stdout
    assert "TORCH hidden" in out.stdout


def test_a_python_without_the_module_says_so_in_one_line(tmp_path: Path) -> None:
    argv = tvm_program_argv(sys.executable, "no_such_pkg.exec.rpc_server", "--help")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == (f"{sys.executable}: cannot run no_such_pkg.exec.rpc_server: "
                                  "No module named 'no_such_pkg'")
