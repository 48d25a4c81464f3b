"""Deploy: push the agent, runners and built artifacts to devices (content-addressed)."""

from __future__ import annotations

from collections.abc import Sequence

from farm.deploy.bundle import bundle_for
from farm.deploy.deployer import DeployResult, Progress, deploy_device
from farm.devices.fanout import fan_out
from farm.inventory.device import Device


def deploy(devices: Sequence[Device], progress: Progress | None = None,
           model_sha: str | None = None) -> dict[str, DeployResult]:
    """Deploy each device's bundle in parallel; one device's failure never stops the others.
    `model_sha`: only the artifacts built from that model (see `bundle_for`)."""
    outcomes = fan_out(devices, lambda d: deploy_device(d, bundle_for(d, model_sha=model_sha),
                                                        progress))
    return {name: (o if isinstance(o, DeployResult) else DeployResult(name, error=str(o)))
            for name, o in outcomes.items()}


__all__ = ["DeployResult", "deploy", "deploy_device"]
