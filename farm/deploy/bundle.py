"""The agent artifact: `agents/farm_agent.py` under a content-hash name (the whole bundle of
`farm deploy --all-builds` is `farm.deploy.selection.bundle_for`)."""

from __future__ import annotations

from farm.artifacts import Artifact, make_artifact
from farm.paths import agents_dir

AGENT_FILE = "farm_agent.py"


def agent_artifact() -> Artifact:
    """The agent, uploaded under a content-hash name (agent/farm_agent-<sha12>.py)."""
    local = agents_dir() / AGENT_FILE
    art = make_artifact("agent", local, "agent", content_name=False)
    return Artifact("agent", art.local, f"agent/farm_agent-{art.sha256[:12]}.py", art.sha256,
                    art.size, "any")
