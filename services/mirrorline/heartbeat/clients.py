"""Which client settings the heartbeat service uses for a cluster.

The service talks to clusters, not flows: it writes heartbeats into every cluster and
reads topology from every cluster. A cluster's clients take the settings of a flow that
reaches it (so `<alias>.consumer.*` and friends apply), else its connection keys alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from mirrorline.core.settings import MirrorSettings
from mirrorline.kafka.clients import admin_kwargs, build, consumer_kwargs, producer_kwargs

Role = Literal["consumer", "producer", "admin"]


def cluster_config(settings: MirrorSettings, alias: str, role: Role) -> Mapping[str, str]:
    for flow in settings.flows.values():
        if flow.target == alias:
            return {"consumer": flow.clients.target_consumer,
                    "producer": flow.clients.target_producer,
                    "admin": flow.clients.target_admin}[role]
    for flow in settings.flows.values():
        if flow.source == alias:
            return {"consumer": flow.clients.source_consumer,
                    "producer": flow.clients.source_producer,
                    "admin": flow.clients.source_admin}[role]
    return settings.clusters[alias].connection


def cluster_kwargs(settings: MirrorSettings, alias: str, role: Role,
                   client_id: str) -> dict[str, Any]:
    translate = {"consumer": consumer_kwargs, "producer": producer_kwargs,
                 "admin": admin_kwargs}[role]
    return build(translate, cluster_config(settings, alias, role), client_id)
