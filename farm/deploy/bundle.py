"""The agent artifact: `agents/farm_agent.py` packed with its modules into one file named
by its content (the whole bundle of `farm deploy --all-builds` is
`farm.deploy.selection.bundle_for`)."""

from __future__ import annotations

from farm.artifacts import Artifact, make_artifact
from farm.devices.agent_program import agent_program_file


def agent_artifact() -> Artifact:
    """The agent, packed with its modules into one file named by its content and uploaded
    under that name (agent/farm_agent-<sha12>.py, `farm.devices.agent_program`)."""
    return make_artifact("agent", agent_program_file(), "agent", content_name=False)
