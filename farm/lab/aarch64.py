"""What makes a lab device an emulated aarch64 device.

Its sshd runs in a child user namespace (identity map of uids/gids 0..65535) that mounts
its OWN binfmt_misc (kernel >= 6.7) and registers /usr/bin/qemu-aarch64 there, so aarch64
ELF files run transparently in that device's sessions only; the host's binfmt is never
touched. Sessions get QEMU_LD_PREFIX=<sysroot> (aarch64 libc, python, ARM /proc/cpuinfo)
and QEMU_CPU=cortex-a76 (NEON + dotprod, like the fleet's phones and SBCs).
The device's `python` is a wrapper in its home that runs the sysroot's aarch64 Python
with the wheel site dir on its path.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from farm.lab.system import LabError

QEMU = "/usr/bin/qemu-aarch64"
QEMU_CPU = "cortex-a76"
PYTHON_VERSION = "3.11"
# magic/mask of an aarch64 ELF executable (the same as Debian's qemu-user-binfmt entry);
# the kernel itself decodes the \x escapes. F = open the interpreter now, so it also works
# from other mount namespaces.
BINFMT_RULE = (
    r":qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
    r":\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"
    f":{QEMU}:F"
)
ID_MAP = "0 0 65536\n"


def fleet_name(index: int) -> str:
    """Names of emulated devices, after the design's fleet: pixel7, rpi5, a64-3, a64-4..."""
    return {1: "pixel7", 2: "rpi5"}.get(index, f"a64-{index}")


def session_env(sysroot: Path) -> dict[str, str]:
    return {"QEMU_LD_PREFIX": str(sysroot), "QEMU_CPU": QEMU_CPU}


def launch_script(*, hostname: str, binfmt_dir: Path, rule_file: Path, home: Path,
                  config: Path, sshd: str) -> str:
    """/bin/sh script run by `unshare --user --mount --uts` inside the device's netns."""
    q = shlex.quote
    return f"""#!/bin/sh
# written by farm lab: start the sshd of aarch64 device {hostname}
set -e
# the parent (farm lab up) writes our uid/gid maps; wait for them, at most 10 s
n=0
while [ -z "$(cat /proc/self/uid_map)" ]; do
  n=$((n + 1)); [ "$n" -le 200 ] || {{ echo "uid_map never written" >&2; exit 1; }}
  sleep 0.05
done
hostname {q(hostname)}
mount -t binfmt_misc binfmt_misc {q(str(binfmt_dir))}
cat {q(str(rule_file))} > {q(str(binfmt_dir / "register"))}
mount --bind {q(str(home))} /root
exec {q(sshd)} -D -e -f {q(str(config))}
"""


def python_wrapper(sysroot: Path, *, with_tvm: bool) -> str:
    """The device's `python`: the sysroot's aarch64 python, wheels on its path.

    Exported variables reach child processes (route runners started with sys.executable).
    FARM_TVM_SITE names the TVM site dir for runners that want it without this wrapper.
    """
    site = sysroot / "opt" / "site"
    tvm_site = sysroot / "opt" / "site-tvm"
    path = f"{site}:{tvm_site}" if with_tvm else str(site)
    return f"""#!/bin/sh
# written by farm lab: aarch64 python of this emulated device (binfmt runs it under qemu)
QEMU_LD_PREFIX={shlex.quote(str(sysroot))}
QEMU_CPU={QEMU_CPU}
FARM_TVM_SITE={shlex.quote(str(tvm_site))}
PYTHONPATH={shlex.quote(path)}${{PYTHONPATH:+:$PYTHONPATH}}
export QEMU_LD_PREFIX QEMU_CPU FARM_TVM_SITE PYTHONPATH
exec {shlex.quote(str(sysroot / "usr" / "bin" / f"python{PYTHON_VERSION}"))} "$@"
"""


def write_id_maps(pid: int, timeout_s: float = 5.0) -> None:
    """Map uids/gids 0..65535 identically once `pid` has entered its new user namespace."""
    own = os.readlink("/proc/self/ns/user")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{pid}/ns/user") != own:
                Path(f"/proc/{pid}/uid_map").write_text(ID_MAP)
                Path(f"/proc/{pid}/gid_map").write_text(ID_MAP)
                return
        except FileNotFoundError as exc:
            raise LabError(f"the aarch64 launcher (pid {pid}) exited before its user "
                           "namespace was set up", hint="see its sshd.log") from exc
        time.sleep(0.02)
    raise LabError(f"pid {pid} did not enter a new user namespace within {timeout_s:.0f} s",
                   hint="does this kernel allow `unshare --user`? (needs >= 6.7 for binfmt)")
