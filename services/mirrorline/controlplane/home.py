"""The home cluster: where the control log and the controller lease live.

Every service of a deployment must agree on it, so it is derived the same way
everywhere: the first alias given with `--clusters` (as MM2's option), else the target
of the file's first enabled flow, else the file's first cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mirrorline.core.settings import MirrorSettings
from mirrorline.kafka.clients import admin_kwargs, consumer_kwargs, producer_kwargs


def home_cluster(settings: MirrorSettings, targets: Sequence[str] | None) -> str:
    if targets:
        return targets[0]
    enabled = settings.enabled_flows()
    return enabled[0].target if enabled else next(iter(settings.clusters))


def home_clients(settings: MirrorSettings, alias: str, client_id: str
                 ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(consumer, producer, admin) kwargs from the home cluster's connection settings."""
    connection = dict(settings.clusters[alias].connection)
    made = []
    for translate in (consumer_kwargs, producer_kwargs, admin_kwargs):
        kwargs, _ = translate(connection)
        made.append(dict(kwargs, client_id=client_id))
    return made[0], made[1], made[2]


def control_topics(settings: MirrorSettings) -> tuple[str, str]:
    """(control log, controller lease) topic names; `mirrorline.deployment` sets them apart
    when several deployments share a home cluster."""
    if settings.deployment is None:
        return "mirrorline.control.internal", "mirrorline.controller-lease.internal"
    prefix = f"mirrorline-{settings.deployment}"
    return f"{prefix}.control.internal", f"{prefix}.controller-lease.internal"
