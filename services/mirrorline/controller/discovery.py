"""Discovery for every flow the controller runs: which partitions exist, remote topics made.

Reuses the replicator's `TopicDiscovery` (filtering, remote topic creation, partition
growth) with one admin client per cluster shared by all flows. Each flow is refreshed
every `refresh.topics.interval.seconds`, at once when it is created or changed, and
soon again while remote topics it created are not in the target's metadata yet.

Flows are independent: each refresh runs in its own task with its own time limit, so a
flow whose cluster hangs (a TLS client talking to a plaintext listener waits for a
timeout on every request) delays nobody else's discovery. The reconcile loop plans from
whatever is known and is woken whenever a refresh finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mirrorline.core.assignment import PartitionKey
from mirrorline.core.backoff import Backoff
from mirrorline.core.settings import FlowSettings
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.kafka.causes import explain, unreachable
from mirrorline.kafka.discovery import DiscoveryResult, TopicDiscovery

log = logging.getLogger(__name__)

#: Longest a flow's refresh may take before it counts as failed.
REFRESH_TIMEOUT_S = 30.0
#: Looks again at remote topics created but not visible yet: 0.2 s, 0.4 s, ... up to 10 s.
_PENDING_BACKOFF = Backoff(maximum=10.0)


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
    #: When to look again before the interval: remote topics were created but the target's
    #: metadata does not show them yet (`DiscoveryResult.pending`).
    retry_at: float | None = None
    pending_attempts: int = 0

    def due(self, now: float) -> bool:
        """A refresh should start now. With `refresh.topics.enabled = false` only the
        first one, a retry of a failed first one, and looks at remote topics still
        pending are due -- or they would never be copied."""
        if self.stale or (self.retry_at is not None and now >= self.retry_at):
            return True
        return (now - self.refreshed_at >= self.settings.refresh_topics_interval_s
                and (self.settings.refresh_topics_enabled or self.result is None))

    def saw(self, result: DiscoveryResult, now: float) -> float | None:
        """Take a refresh's result; the delay before looking again at remote topics not
        visible yet (None when there are none)."""
        self.result = result
        if not result.pending:
            self.retry_at, self.pending_attempts = None, 0
            return None
        delay = min(_PENDING_BACKOFF.delay(self.pending_attempts),
                    self.settings.refresh_topics_interval_s)
        self.pending_attempts += 1
        self.retry_at = now + delay
        return delay


class Discoveries:
    def __init__(self, admin_kwargs: Mapping[str, Mapping[str, Any]],
                 on_refreshed: Callable[[], None] | None = None) -> None:
        self._admin_kwargs = admin_kwargs  # alias -> aiokafka admin kwargs
        self._admins: dict[str, ClusterAdmin] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self.on_refreshed = on_refreshed
        self.flows: dict[str, FlowTopics] = {}
        #: Flows whose definition does not fit this deployment, with the reason.
        self.broken: dict[str, str] = {}

    async def close(self) -> None:
        for task in self._running.values():
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
        self._running.clear()
        for admin in self._admins.values():
            with contextlib.suppress(Exception):
                await admin.close()
        self._admins.clear()

    async def admin(self, alias: str) -> ClusterAdmin:
        async with self._connecting.setdefault(alias, asyncio.Lock()):
            admin = self._admins.get(alias)
            if admin is None:
                admin = ClusterAdmin(alias, self._admin_kwargs[alias])
                try:
                    await admin.start()
                except BaseException:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(admin.close(), 1.0)
                    raise
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
        """Start a refresh of every flow whose interval has passed (paused flows keep what
        they had); returns at once -- see the module docstring.

        With `refresh.topics.enabled = false` a flow's topics are found once, when the flow
        starts or changes, and never again -- MM2 loads them when the connector starts and
        schedules no refresh; a failed first attempt is retried until it succeeds."""
        now = time.monotonic()
        for name, f in self.flows.items():
            if name in paused or name in self._running:
                continue
            if f.due(now):
                task = asyncio.create_task(self._refresh_within(f), name=f"discover {name}")
                self._running[name] = task
                task.add_done_callback(functools.partial(self._refreshed, name))

    async def wait_idle(self) -> None:
        """Wait for the refreshes under way (tests and shutdown)."""
        await asyncio.gather(*self._running.values(), return_exceptions=True)

    def _refreshed(self, name: str, _task: asyncio.Task[None]) -> None:
        self._running.pop(name, None)
        if self.on_refreshed is not None:
            self.on_refreshed()

    async def _refresh_within(self, flow: FlowTopics) -> None:
        try:
            await asyncio.wait_for(self._refresh(flow), REFRESH_TIMEOUT_S)
        except TimeoutError:
            flow.error = (f"topic discovery failed: no answer within {REFRESH_TIMEOUT_S:.0f}s "
                          f"from {flow.settings.source!r} or {flow.settings.target!r}")
            log.warning("%s: %s", flow.settings.name, flow.error)
            flow.refreshed_at = time.monotonic()
            flow.stale = False

    async def _refresh(self, flow: FlowTopics) -> None:
        settings = flow.settings
        connecting: str | None = settings.source  # the cluster being connected to, if any
        try:
            source = await self.admin(settings.source)
            connecting = settings.target
            target = await self.admin(settings.target)
            connecting = None
            policy = settings.replication_policy
            discovery = TopicDiscovery(settings, policy, source=source, target=target)
            delay = flow.saw(await discovery.refresh(), time.monotonic())
            assert flow.result is not None
            if delay is not None:
                log.info("%s: remote topics of %s created but not yet known to %s; looking "
                         "again in %.1fs", settings.name,
                         ", ".join(sorted(flow.result.pending)), settings.target, delay)
            flow.error = None
            flow.partitions = {
                PartitionKey(settings.name, topic, p): remote.name
                for topic, remote in flow.result.topics.items()
                for p in range(remote.partitions)
            }
        except Exception as exc:
            protocols = {self._admin_kwargs.get(a, {}).get("security_protocol")
                         for a in (settings.source, settings.target)}
            tls = "SSL" if protocols & {"SSL", "SASL_SSL"} else None
            if connecting is not None:
                kwargs = self._admin_kwargs.get(connecting, {})
                role = "source" if connecting == settings.source else "target"
                flow.error = "topic discovery failed: " + unreachable(
                    connecting, exc, kwargs.get("bootstrap_servers"), role=role,
                    protocol=kwargs.get("security_protocol") or tls)
            else:
                flow.error = (f"topic discovery failed: "
                              f"{explain(exc, self._servers(settings), protocol=tls)}")
            log.warning("%s: %s", settings.name, flow.error)
            for alias in (settings.source, settings.target):
                admin = self._admins.pop(alias, None)
                if admin is not None:
                    with contextlib.suppress(Exception):
                        await admin.close()
        flow.refreshed_at = time.monotonic()
        flow.stale = False

    def _servers(self, settings: FlowSettings) -> list[str]:
        out: list[str] = []
        for alias in (settings.source, settings.target):
            servers = self._admin_kwargs.get(alias, {}).get("bootstrap_servers", "")
            out += servers.split(",") if isinstance(servers, str) else list(servers)
        return out

    def desired(self) -> dict[PartitionKey, str]:
        out: dict[PartitionKey, str] = {}
        for flow in self.flows.values():
            out.update(flow.partitions)
        return out

    def undiscovered(self) -> set[str]:
        """Flows whose topics are not known yet (first refresh under way or failed): their
        current assignment stands until they are."""
        return {name for name, f in self.flows.items() if f.result is None}

    def problems(self, name: str) -> dict[str, str]:
        if name in self.broken:
            return {"*": self.broken[name]}
        flow = self.flows.get(name)
        if flow is None:
            return {}
        found = dict(flow.result.problems) if flow.result else {}
        if flow.error:
            found["*"] = flow.error
        return found
