"""Topology as every cluster's heartbeat topics show it, refreshed in the background.

One reader per cluster lists the cluster's topics, keeps the heartbeat topics, and reads
the newest heartbeat of each. The pure derivation (routes, hops, staleness) is
`mirrorline.core.topology`. A cluster that cannot be reached keeps its last known paths,
all marked stale with the reason -- never fresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mirrorline.core.policy import ReplicationPolicy
from mirrorline.core.topology import HeartbeatPath, heartbeat_paths, heartbeat_topics
from mirrorline.heartbeat.retrying import Retrying
from mirrorline.kafka.causes import unreachable
from mirrorline.kafka.heartbeats import NewestHeartbeats

log = logging.getLogger(__name__)

#: Seconds between reads of the heartbeat topics: a path turns stale after 10 s at least
#: (`STALE_MIN_MS`), so it is seen stale within 12 s.
REFRESH_S = 2.0


@dataclass(frozen=True)
class ClusterView:
    cluster: str
    reachable: bool
    error: str
    paths: tuple[HeartbeatPath, ...]

    @property
    def upstream(self) -> list[str]:
        return sorted({p.origin for p in self.paths})


class TopologyWatcher(Retrying):
    initial_error = "not read yet"

    def __init__(self, alias: str, consumer_kwargs: Mapping[str, Any],
                 policy: ReplicationPolicy, stale_after_ms: int) -> None:
        super().__init__(f"topology of {alias}")
        self.alias = alias
        self.policy = policy
        self.stale_after_ms = stale_after_ms
        self._kwargs = dict(consumer_kwargs)
        self._newest: dict[str, int | None] = {}

    def view(self, now_ms: int | None = None) -> ClusterView:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        paths = heartbeat_paths(self.policy, self.alias, self._newest, now_ms=now,
                                stale_after_ms=self.stale_after_ms)
        if self.error is not None:
            paths = [replace(p, stale=True, reason=f"cluster {self.alias!r} unreachable: "
                                                   f"{self.error}") for p in paths]
        return ClusterView(self.alias, self.error is None, self.error or "", tuple(paths))

    def _describe(self, exc: Exception) -> tuple[str, str]:
        line = unreachable(self.alias, exc, self._kwargs.get("bootstrap_servers"),
                           protocol=self._kwargs.get("security_protocol"))
        return line.partition(" unreachable: ")[2], f"topology: {line}"

    async def _session(self) -> None:
        reader = NewestHeartbeats(self.alias, self._kwargs)
        try:
            await asyncio.wait_for(reader.start(), 15)
            while True:
                partitions = await asyncio.wait_for(reader.all_partitions(), 15)
                topics = heartbeat_topics(self.policy, sorted(partitions))
                self._newest = dict(await reader.refresh(topics, partitions=partitions))
                self._ready()
                await asyncio.sleep(REFRESH_S)
        finally:
            with contextlib.suppress(Exception):
                await reader.stop()
