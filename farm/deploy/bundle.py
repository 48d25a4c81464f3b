"""The agent artifact, and the whole bundle of `farm deploy --all-builds`: the agent, every
route's runners and every build registered for the device's arch (`farm.build.registry`)."""

from __future__ import annotations

from pathlib import Path

from farm.build.registry import Artifact, make_artifact
from farm.devices.agent_program import agent_program_file
from farm.inventory.device import Device


def agent_artifact() -> Artifact:
    """The agent, packed with its modules into one file named by its content and uploaded
    under that name (agent/farm_agent-<sha12>.py, `farm.devices.agent_program`)."""
    return make_artifact("agent", agent_program_file(), "agent", content_name=False)


def bundle_for(device: Device, extra: list[Path] | None = None, *,
               registered: bool = True, model_sha: str | None = None) -> list[Artifact]:
    """Every route's runners plus registered builds (`farm deploy --all-builds`), in
    upload order (agent first); see `farm.deploy.selection.ship_list` for the selection.

    `registered=False` leaves out the build registry; `model_sha` keeps only what was
    built from that model."""
    from farm.deploy.selection import ROUTES, registered_builds, ship_list

    builds = (registered_builds(device, None if model_sha is None else [model_sha], ROUTES)
              if registered else [])
    return ship_list(device, ROUTES, builds,
                     [make_artifact("file", p, "artifacts") for p in (extra or [])])
