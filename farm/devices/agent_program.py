"""The on-device agent as a device gets it: one Python file, packed from agents/.

`agents/farm_agent.py` is the entry (the agent itself, `--probe`, deploy's `--commit` and
`--prune`); the `agents/agent_*.py` modules it imports are packed into the same file as
strings, ahead of it, with a loader that imports them from there before anything on the
device's `sys.path`. So a device runs one self-contained program whichever farm versions
share its work dir: deploy ships it content-addressed as `agent/farm_agent-<sha12>.py`
(the hash the agent's `hello` reports is the whole program's), and the one-shot modes pipe
the same bytes to `python -` (`run_agent_mode`), before anything is deployed.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from farm.inventory.device import Device
from farm.paths import agents_dir, build_cache_dir
from farm.transports import RunResult, Transport

AGENT_FILE = "farm_agent.py"
MODULES = "agent_*.py"  # the entry's own modules, packed with it

# Device-side (Python 3.8+): the packed modules become importable, then the entry runs as
# the file's own code (`__main__`, `__file__` = the packed file).
_LOADER = '''\
# farm on-device agent, packed by farm.devices.agent_program: the agents/agent_*.py modules
# below, then agents/farm_agent.py as it is. Edit those in farm's repository, not this file.
import importlib.abc
import importlib.util
import sys

_AGENT_MODULES = {
@MODULES@}


class _AgentModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports _AGENT_MODULES from this file, ahead of sys.path (which on a device holds
    the agent/ directory of every deployed version)."""

    def find_spec(self, name, path=None, target=None):
        if name not in _AGENT_MODULES:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        exec(compile(_AGENT_MODULES[name], "agents/%s.py" % name, "exec"), module.__dict__)

    def get_source(self, name):  # for tracebacks
        return _AGENT_MODULES[name]


sys.meta_path.insert(0, _AgentModules())
'''


def _literal(source: str) -> str:
    """`source` as a Python expression, one literal per line (readable on the device)."""
    lines = source.splitlines(keepends=True)
    if not lines:
        return "''"
    return "(\n" + "".join(f"        {line!r}\n" for line in lines) + "    )"


def agent_program(source_dir: Path | None = None) -> bytes:
    """The packed agent (from `source_dir`, default farm's agents/)."""
    src = source_dir or agents_dir()
    modules = "".join(f"    {path.stem!r}: {_literal(path.read_text())},\n"
                      for path in sorted(src.glob(MODULES)))
    entry = (src / AGENT_FILE).read_text()
    return (_LOADER.replace("@MODULES@", modules) + f"# ---- {AGENT_FILE}\n" + entry).encode()


def agent_program_file(source_dir: Path | None = None) -> Path:
    """The packed agent as a file named by its content, `farm_agent-<sha12>.py`, kept in
    the build cache for deploy to upload."""
    data = agent_program(source_dir)
    path = build_cache_dir() / "agent" / f"farm_agent-{hashlib.sha256(data).hexdigest()[:12]}.py"
    if not path.is_file() or path.read_bytes() != data:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a temporary name of its own: parallel deploys may all write it; a rename is atomic
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return path


def run_agent_mode(transport: Transport, device: Device, args: Sequence[str], *,
                   timeout: float) -> RunResult:
    """`python - ARGS --workdir W` on the device with the packed agent on stdin: a one-shot
    mode (`--probe`, `--commit PLAN`, `--prune REQUEST`) that prints one JSON line; the
    caller reads it and maps a failure to its own error."""
    return transport.run([device.python, "-", *args, "--workdir", device.workdir],
                         stdin=agent_program(), timeout=timeout, check=False)
