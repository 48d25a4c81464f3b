"""Keys and configuration of the lab's real OpenSSH servers (one per device).

Each device gets its own ed25519 host key and `sshd_config` (key-only auth, no PAM);
all devices trust one lab client key. Host keys are pinned in the lab's known_hosts,
written in the `[host]:port` form when the port is not 22 (as OpenSSH and paramiko expect).
"""

from __future__ import annotations

from pathlib import Path

from farm.lab.system import LabError, run

SSHD = "/usr/sbin/sshd"  # absolute: sshd re-executes itself and refuses a relative path
SFTP_SERVER = "/usr/lib/openssh/sftp-server"


def ensure_key(path: Path, comment: str) -> Path:
    """An ed25519 key pair at `path` (kept across lab restarts so pins stay valid)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return path


def public_key(path: Path) -> str:
    """`<type> <base64>` of a key pair's public half (no comment)."""
    parts = Path(f"{path}.pub").read_text().split()
    return f"{parts[0]} {parts[1]}"


def sshd_config(*, listen: str, port: int, host_key: Path, authorized_keys: str,
                strict_modes: bool, env: dict[str, str]) -> str:
    """The text of one device's sshd_config.

    `authorized_keys` is sshd's AuthorizedKeysFile value (relative to the login's home,
    or absolute in loopback mode where devices share the host's home).
    """
    set_env = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
    lines = [
        f"ListenAddress {listen}:{port}",
        f"HostKey {host_key}",
        "PidFile none",  # the lab tracks the pid it spawned, by (pid, start time)
        f"AuthorizedKeysFile {authorized_keys}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        f"StrictModes {'yes' if strict_modes else 'no'}",
        f"Subsystem sftp {SFTP_SERVER}",
        "AcceptEnv LANG LC_* FARM_*",
        f"SetEnv {set_env}" if set_env else "",
        "PrintMotd no",
        "LogLevel INFO",
        # parallel deploys open many sessions at once
        "MaxStartups 100:30:200",
        "MaxSessions 100",
    ]
    return "\n".join(line for line in lines if line) + "\n"


def write_config(path: Path, text: str) -> None:
    """Write an sshd_config and have sshd itself validate it (`sshd -t`)."""
    path.write_text(text)
    proc = run([SSHD, "-t", "-f", str(path)], check=False)
    if proc.returncode != 0:
        raise LabError(f"sshd rejects {path}: {(proc.stderr or proc.stdout).strip()}",
                       hint="is openssh-server installed? (apt-get install openssh-server)")


def known_hosts_line(host: str, port: int, key: str) -> str:
    target = host if port == 22 else f"[{host}]:{port}"
    return f"{target} {key}"


def ensure_privsep_dir() -> None:
    """sshd (as root) chroots its pre-auth child into /run/sshd; Debian creates it at boot."""
    path = Path("/run/sshd")
    path.mkdir(mode=0o755, exist_ok=True)
    path.chmod(0o755)
