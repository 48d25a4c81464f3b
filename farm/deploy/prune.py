"""`farm deploy --prune`: remove from a device what the current selection no longer ships.

Policy (applied on the device by the agent's `--prune` mode, agents/agent_prune.py, under
the agent's device lock):
  - only files farm's manifest lists are candidates: a manifest file the selection does not
    ship is removed. Files deploy never wrote (runner outputs in out/, anything a user put
    in the work dir) are never touched;
  - a partial upload (`<file>.part-<sha12>`, or a `<file>.tmp-<pid>` of an older farm)
    untouched for `part_age_s` (default 10 minutes) is stale and removed; a younger one may
    belong to a deploy running right now and stays;
  - never while a bench may use the files: the device is refused when an agent holds its
    lock (`<workdir>/agent.lock`), and the CLI also takes the host's bench lease of the
    device for the duration (`farm.bench.lease`), so a bench starting on this host waits.
A dry run lists what would be removed and removes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from farm.devices.agent_program import run_agent_mode
from farm.errors import DeployError, FarmError
from farm.inventory.device import Device
from farm.transports import Transport, open_transport

PART_AGE_S = 600.0


@dataclass
class PruneResult:
    device: str
    removed: list[dict] = field(default_factory=list)  # {"file", "bytes", "why"}
    refused: str | None = None
    error: str | None = None

    @property
    def bytes_freed(self) -> int:
        return sum(int(r.get("bytes") or 0) for r in self.removed)

    @property
    def ok(self) -> bool:
        return self.error is None and self.refused is None


def prune_device(device: Device, keep: Iterable[str], *, part_age_s: float = PART_AGE_S,
                 dry_run: bool = False, transport: Transport | None = None) -> PruneResult:
    """Apply the policy above to one device; `keep` = remote paths the selection ships."""
    result = PruneResult(device.name)
    own = transport is None
    link = transport or open_transport(device)
    request = {"keep": sorted(set(keep)), "part_age_s": part_age_s, "dry_run": dry_run}
    try:
        out = run_agent_mode(link, device, ["--prune", json.dumps(request)], timeout=120)
        try:
            answer = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise DeployError(f"device {device.name!r}: pruning failed (exit {out.exited}): "
                              f"{out.stderr.strip()[-300:]}",
                              hint="check `python` and `workdir` in the inventory") from None
        result.removed = list(answer.get("removed") or [])
        result.refused = answer.get("refused")
    except FarmError as exc:
        result.error = str(exc)
    finally:
        if own:
            link.close()
    return result
