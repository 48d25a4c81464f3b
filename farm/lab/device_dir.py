"""A lab device's host directory and the spawning of its sshd.

Layout of `<lab_dir>/devices/<name>/`:
  ssh_host_ed25519_key(.pub)  the device's own host key (kept across restarts)
  sshd_config, launch.sh      written on each `up`; sshd.log is its stderr
  home/                       bound over /root inside the device (netns mode):
    .ssh/authorized_keys        the lab client key
    bin/python3[-tvm]           aarch64 devices: wrappers running the sysroot python
    farm/                       the device work dir (/root/farm inside the device)
  authorized_keys, work/      loopback mode (no private mounts there)
  binfmt/, binfmt.rule        aarch64: mount point of the private binfmt_misc, its rule
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from farm.lab import aarch64
from farm.lab.inventory_file import CLIENT_KEY
from farm.lab.records import LabDevice, LabState
from farm.lab.sshd import ensure_key, public_key
from farm.lab.system import start_time


@dataclass(frozen=True)
class DeviceDir:
    path: Path
    client_pub: str

    @classmethod
    def prepare(cls, lab_dir: Path, name: str) -> DeviceDir:
        path = lab_dir / "devices" / name
        path.mkdir(parents=True, exist_ok=True)
        client = ensure_key(lab_dir / CLIENT_KEY, "farm-lab-client")
        ddir = cls(path, public_key(client))
        ensure_key(ddir.host_key, f"farm-lab-{name}-hostkey")
        ssh = ddir.home / ".ssh"
        ssh.mkdir(parents=True, exist_ok=True)
        ddir.home.chmod(0o700)
        ssh.chmod(0o700)
        for keys in (ssh / "authorized_keys", ddir.path / "authorized_keys"):
            keys.write_text(ddir.client_pub + " farm-lab-client\n")
            keys.chmod(0o600)
        (ddir.home / "farm").mkdir(exist_ok=True)
        (ddir.path / "work").mkdir(exist_ok=True)
        return ddir

    @property
    def home(self) -> Path:
        return self.path / "home"

    @property
    def host_key(self) -> Path:
        return self.path / "ssh_host_ed25519_key"

    @property
    def config(self) -> Path:
        return self.path / "sshd_config"

    @property
    def log(self) -> Path:
        return self.path / "sshd.log"

    @property
    def launcher(self) -> Path:
        return self.path / "launch.sh"

    @property
    def binfmt(self) -> Path:
        return self.path / "binfmt"

    @property
    def binfmt_rule(self) -> Path:
        return self.path / "binfmt.rule"

    def write_python_wrappers(self, sysroot: Path) -> None:
        bin_dir = self.home / "bin"
        bin_dir.mkdir(exist_ok=True)
        for file, with_tvm in (("python3", False), ("python3-tvm", True)):
            wrapper = bin_dir / file
            wrapper.write_text(aarch64.python_wrapper(sysroot, with_tvm=with_tvm))
            wrapper.chmod(0o755)
        python = bin_dir / "python"
        if not python.exists():
            python.symlink_to("python3")

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def spawn_sshd(state: LabState, device: LabDevice, ddir: DeviceDir,
               argv: list[str]) -> subprocess.Popen[bytes]:
    """Start a device's sshd in its own session, journaled before and after the spawn.

    `match` (the launcher script and the sshd_config, arguments of the launcher and of
    sshd) finds the process even if farm dies between the spawn and recording its pid.
    """
    record = state.add("process", device=device.name,
                       match=[str(ddir.launcher), str(ddir.config)], pid=None, start=None)
    with ddir.log.open("ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                close_fds=True)
    record["pid"] = device.pid = proc.pid
    record["start"] = device.start = start_time(proc.pid)
    state.save()
    return proc
