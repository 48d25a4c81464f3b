"""What the build layer produced, for which targets: the list `farm deploy` pushes.

Entries live in `.farm/artifacts/registry.json`. `target` is an arch (`x86_64`,
`aarch64`) or `any` (models, inputs); `remote` is the path under the device work dir.
Files are content-addressed: the remote name carries a sha256 prefix, so two
different builds never overwrite each other on a device.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from farm.paths import state_dir

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Artifact:
    kind: str      # agent | runner | model | inputs | tvm-lib | executor | plan | ...
    local: str     # absolute path on the host
    remote: str    # path relative to the device work dir
    sha256: str
    size: int
    target: str    # x86_64 | aarch64 | any
    source: str = ""  # sha256 of the model it was built from; "" when model-independent


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_artifact(kind: str, local: Path, remote_dir: str, target: str = "any",
                  name: str | None = None, content_name: bool = True,
                  source: str = "") -> Artifact:
    """Describe `local` as an artifact; the remote name is `<sha12>-<name>` by default."""
    digest = sha256_file(local)
    # remote names carry only plain characters, whatever the local file is called
    base = re.sub(r"[^A-Za-z0-9._-]", "_", name or local.name)
    remote_name = f"{digest[:12]}-{base}" if content_name else base
    return Artifact(kind, str(local.resolve()), f"{remote_dir}/{remote_name}", digest,
                    local.stat().st_size, target, source)


def registry_path() -> Path:
    return state_dir() / "artifacts" / "registry.json"


def registered() -> list[Artifact]:
    path = registry_path()
    if not path.is_file():
        return []
    entries = json.loads(path.read_text()).get("artifacts", [])
    return [Artifact(**e) for e in entries if Path(e["local"]).is_file()]


def register(artifact: Artifact) -> Artifact:
    """Add (or replace, same remote path) an artifact in the registry."""
    with _LOCK:
        path = registry_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        current = [a for a in registered() if a.remote != artifact.remote]
        current.append(artifact)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"version": 1, "artifacts": [asdict(a) for a in current]},
                                  indent=1))
        tmp.replace(path)
    return artifact


def for_target(arch: str, model_sha: str | None = None) -> list[Artifact]:
    """Registered artifacts for `arch`; with `model_sha`, only those built from that model
    (plus the model-independent ones such as executors)."""
    return [a for a in registered() if a.target in (arch, "any")
            and (model_sha is None or a.source in ("", model_sha))]
