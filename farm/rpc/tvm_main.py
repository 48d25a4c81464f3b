"""The command line that runs one of TVM's `tvm.exec` programs (tracker, RPC server).

tvm-ffi imports torch whenever torch is installed, for a DLPack exchange farm never uses:
~3-4 s of every such process's start on a host with the `export` extra (an RPC server
started in 5.9 s, 1.6 s with torch hidden). The program runs under `python -c` with torch
hidden from that process only. The code is a constant: nothing from an inventory or a file
name goes into it, and the module and its arguments are separate argv words.
"""

from __future__ import annotations

TVM_MAIN = """\
import importlib.util, runpy, sys
sys.modules.setdefault("torch", None)
module = sys.argv.pop(1)
try:
    found = importlib.util.find_spec(module)
except ImportError as exc:
    found, why = None, exc
else:
    why = "not found"
if found is None:  # one line, as `python -m` says it
    sys.exit(f"{sys.executable}: cannot run {module}: {why}")
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def tvm_program_argv(python: str, module: str, *args: str) -> list[str]:
    """`python -m module args...`, with torch hidden (see the module docstring)."""
    return [python, "-c", TVM_MAIN, module, *args]
