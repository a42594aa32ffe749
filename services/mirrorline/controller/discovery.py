"""Discovery for every flow the controller runs: which partitions exist, remote topics made.

Reuses the replicator's `TopicDiscovery` (filtering, remote topic creation, partition
growth) with one admin client per cluster shared by all flows. Each flow is refreshed
every `refresh.topics.interval.seconds`, and at once when it is created or changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mirrorline.core.assignment import PartitionKey
from mirrorline.core.policy import make_policy
from mirrorline.core.settings import FlowSettings
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.replicator.discovery import DiscoveryResult, TopicDiscovery

log = logging.getLogger(__name__)


@dataclass
class FlowTopics:
    settings: FlowSettings
    result: DiscoveryResult | None = None
    refreshed_at: float = float("-inf")
    error: str | None = None
    #: Bumped when the flow's settings change, so a refresh starts at once.
    stale: bool = True
    version: int = -1
    partitions: dict[PartitionKey, str] = field(default_factory=dict)


class Discoveries:
    def __init__(self, admin_kwargs: Mapping[str, Mapping[str, Any]]) -> None:
        self._admin_kwargs = admin_kwargs  # alias -> aiokafka admin kwargs
        self._admins: dict[str, ClusterAdmin] = {}
        self.flows: dict[str, FlowTopics] = {}

    async def close(self) -> None:
        for admin in self._admins.values():
            with contextlib.suppress(Exception):
                await admin.close()
        self._admins.clear()

    async def admin(self, alias: str) -> ClusterAdmin:
        admin = self._admins.get(alias)
        if admin is None:
            admin = ClusterAdmin(alias, self._admin_kwargs[alias])
            await admin.start()
            self._admins[alias] = admin
        return admin

    def sync(self, flows: Iterable[tuple[FlowSettings, int]]) -> None:
        """Track exactly these flows (settings with the version they were defined at)."""
        wanted = {settings.name: (settings, version) for settings, version in flows}
        for name in list(self.flows):
            if name not in wanted:
                del self.flows[name]
        for name, (settings, version) in wanted.items():
            known = self.flows.get(name)
            if known is None or known.version != version:
                self.flows[name] = FlowTopics(settings, version=version,
                                              partitions=known.partitions if known else {})

    async def refresh_due(self, paused: set[str]) -> None:
        """Refresh every flow whose interval has passed (paused flows keep what they had).

        With `refresh.topics.enabled = false` a flow's topics are found once, when the flow
        starts or changes, and never again -- MM2 loads them when the connector starts and
        schedules no refresh; a failed first attempt is retried until it succeeds."""
        now = time.monotonic()
        due = [f for name, f in self.flows.items() if name not in paused and (
            f.stale or (now - f.refreshed_at >= f.settings.refresh_topics_interval_s
                        and (f.settings.refresh_topics_enabled or f.result is None)))]
        await asyncio.gather(*(self._refresh(f) for f in due))

    async def _refresh(self, flow: FlowTopics) -> None:
        settings = flow.settings
        try:
            source = await self.admin(settings.source)
            target = await self.admin(settings.target)
            policy = make_policy(settings.policy, settings.naming_source)
            discovery = TopicDiscovery(settings, policy, source=source, target=target)
            flow.result = await discovery.refresh()
            flow.error = None
            flow.partitions = {
                PartitionKey(settings.name, topic, p): remote.name
                for topic, remote in flow.result.topics.items()
                for p in range(remote.partitions)
            }
        except Exception as exc:
            flow.error = f"topic discovery failed: {exc!r}"
            log.warning("%s: %s", settings.name, flow.error)
            for alias in (settings.source, settings.target):
                admin = self._admins.pop(alias, None)
                if admin is not None:
                    with contextlib.suppress(Exception):
                        await admin.close()
        flow.refreshed_at = time.monotonic()
        flow.stale = False

    def desired(self) -> dict[PartitionKey, str]:
        out: dict[PartitionKey, str] = {}
        for flow in self.flows.values():
            out.update(flow.partitions)
        return out

    def problems(self, name: str) -> dict[str, str]:
        flow = self.flows.get(name)
        if flow is None:
            return {}
        found = dict(flow.result.problems) if flow.result else {}
        if flow.error:
            found["*"] = flow.error
        return found
