"""What one device receives: the agent, the route runners, and the built artifacts
registered for its arch (see `farm.build.registry`)."""

from __future__ import annotations

from pathlib import Path

from farm.build.registry import Artifact, for_target, make_artifact
from farm.build.routes import agent_table_file
from farm.inventory.device import Device
from farm.paths import agents_dir

AGENT_FILE = "farm_agent.py"


def agent_artifact() -> Artifact:
    """The agent, uploaded under a content-hash name (agent/farm_agent-<sha12>.py)."""
    local = agents_dir() / AGENT_FILE
    art = make_artifact("agent", local, "agent", content_name=False)
    return Artifact("agent", art.local, f"agent/farm_agent-{art.sha256[:12]}.py", art.sha256,
                    art.size, "any")


def runner_artifacts() -> list[Artifact]:
    """Python route runners and their helpers, under fixed names in runners/."""
    root = agents_dir()
    # routes.json: the route registry's table, from which the agent learns its routes
    files = [root / "ftns.py", *sorted((root / "runners").glob("*.py")), agent_table_file()]
    return [make_artifact("runner", f, "runners", content_name=False)
            for f in files if f.is_file()]


def bundle_for(device: Device, extra: list[Path] | None = None, *,
               registered: bool = True, model_sha: str | None = None) -> list[Artifact]:
    """Everything `farm deploy` pushes to `device`, in upload order (agent first).

    `registered=False` leaves out the build registry (a bench adds just what it runs);
    `model_sha` keeps only what was built from that model (`farm deploy --model`)."""
    items: list[Artifact] = []
    if (agents_dir() / AGENT_FILE).is_file():
        items.append(agent_artifact())
    items.extend(runner_artifacts())
    if registered:
        items.extend(for_target(device.arch, model_sha))
    items.extend(make_artifact("file", p, "artifacts") for p in (extra or []))
    seen: set[str] = set()
    unique = []
    for item in items:
        if item.remote not in seen:
            seen.add(item.remote)
            unique.append(item)
    return unique
