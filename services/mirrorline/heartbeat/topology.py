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

from mirrorline.core.backoff import Backoff
from mirrorline.core.policy import ReplicationPolicy
from mirrorline.core.topology import HeartbeatPath, heartbeat_paths, heartbeat_topics
from mirrorline.kafka.heartbeats import NewestHeartbeats

log = logging.getLogger(__name__)

REFRESH_S = 1.0


@dataclass(frozen=True)
class ClusterView:
    cluster: str
    reachable: bool
    error: str
    paths: tuple[HeartbeatPath, ...]

    @property
    def upstream(self) -> list[str]:
        return sorted({p.origin for p in self.paths})


class TopologyWatcher:
    def __init__(self, alias: str, consumer_kwargs: Mapping[str, Any],
                 policy: ReplicationPolicy, stale_after_ms: int) -> None:
        self.alias = alias
        self.policy = policy
        self.stale_after_ms = stale_after_ms
        self._kwargs = dict(consumer_kwargs)
        self._newest: dict[str, int | None] = {}
        self.error: str | None = "not read yet"
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"topology of {self.alias}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def view(self, now_ms: int | None = None) -> ClusterView:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        paths = heartbeat_paths(self.policy, self.alias, self._newest, now_ms=now,
                                stale_after_ms=self.stale_after_ms)
        if self.error is not None:
            paths = [replace(p, stale=True, reason=f"cluster {self.alias!r} unreachable: "
                                                   f"{self.error}") for p in paths]
        return ClusterView(self.alias, self.error is None, self.error or "", tuple(paths))

    async def _run(self) -> None:
        backoff, attempt = Backoff(maximum=10.0), 0
        while True:
            reader = NewestHeartbeats(self.alias, self._kwargs)
            try:
                await asyncio.wait_for(reader.start(), 15)
                while True:
                    topics = heartbeat_topics(self.policy, await asyncio.wait_for(
                        reader.all_topics(), 15))
                    self._newest = dict(await reader.refresh(topics))
                    if self.error is not None and attempt:
                        log.info("topology: cluster %s reachable again", self.alias)
                    self.error, attempt = None, 0
                    await asyncio.sleep(REFRESH_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = repr(exc)
                if reason != self.error:
                    log.warning("topology: cluster %r unreachable: %s; retrying",
                                self.alias, reason)
                self.error = reason
                await asyncio.sleep(backoff.delay(attempt))
                attempt += 1
            finally:
                with contextlib.suppress(Exception):
                    await reader.stop()
