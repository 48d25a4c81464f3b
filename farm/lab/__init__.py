"""The real local lab: devices as network namespaces with their own sshd (`farm lab`).

Tooling that creates devices and writes an inventory; it uses `farm.inventory` only.
Public verbs: `up(LabSpec, lab_dir)`, `down(lab_dir)`, `down_stale()` (labs whose owning
test run was killed); the journal is `load_state(lab_dir)`;
`farm.lab.inspect` has `device_status`, `device_pids` and `device_exec` (run a command
inside a device's namespaces without SSH); `farm.lab.sysroot.sysroot_path()` is the
aarch64 sysroot.
"""

from farm.lab.lab import LabSpec, default_lab_dir, down, down_stale, healthy, reachable, up
from farm.lab.records import LabDevice, LabState, load_state
from farm.lab.system import LabError

__all__ = ["LabDevice", "LabError", "LabSpec", "LabState", "default_lab_dir", "down",
           "down_stale", "healthy", "load_state", "reachable", "up"]
