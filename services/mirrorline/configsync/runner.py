"""Runs one flow's sync rounds on their intervals, connecting (and reconnecting) first.

Topic rounds (configs and partitions) run every `sync.topic.configs.interval.seconds`,
and at least every `refresh.topics.interval.seconds` so that a grown source topic is
matched as soon as the replicator would notice it; ACL rounds every
`sync.topic.acls.interval.seconds`. The first round of each runs at once, as in MM2.
A cluster that does not answer is retried with backoff and reported in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from mirrorline.configsync.flow import FlowSync
from mirrorline.configsync.records import SyncRecords
from mirrorline.core.backoff import Backoff
from mirrorline.core.drift import DriftPlan
from mirrorline.core.settings import FlowSettings
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.kafka.causes import unreachable
from mirrorline.kafka.clients import admin_kwargs, build, consumer_kwargs, producer_kwargs

log = logging.getLogger(__name__)

#: Shortest interval between two rounds, whatever the configuration says (0 is allowed
#: by the keys, and would spin).
MIN_INTERVAL_S = 1.0


class FlowRunner:
    def __init__(self, flow: FlowSettings, instance: str) -> None:
        self.flow = flow
        self._name = f"{flow.name}|configsync-{instance}"
        self.sync: FlowSync | None = None
        self.error: str | None = None
        self.rounds = 0
        self.last_round_ms = 0
        #: Changes the rounds applied, and those the target refused (metrics).
        self.applied_changes = 0
        self.failed_changes = 0
        #: Rounds (and connection attempts) that failed (a metric).
        self.failed_rounds = 0
        self._admins: list[ClusterAdmin] = []
        self._records: SyncRecords | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    @property
    def started(self) -> bool:
        return self.sync is not None

    @property
    def plan(self) -> DriftPlan | None:
        return self.sync.last_plan if self.sync is not None else None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"configsync {self.flow.name}")

    def wake(self) -> None:
        """Run a round now (e.g. after an operator applied a plan)."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._records is not None:
            with contextlib.suppress(Exception):
                await self._records.stop()
        for admin in self._admins:
            with contextlib.suppress(Exception):
                await admin.close()

    async def _admin(self, alias: str, cfg: Mapping[str, str], role: str) -> ClusterAdmin:
        admin = await ClusterAdmin.open(alias, build(admin_kwargs, cfg, f"{self._name}|{role}"),
                                        30)
        self._admins.append(admin)
        return admin

    async def _connect(self) -> FlowSync:
        flow, backoff, attempt = self.flow, Backoff(maximum=30.0), 0
        while True:
            alias = flow.target
            try:
                target = await self._admin(flow.target, flow.clients.target_admin,
                                           "target-admin")
                alias = flow.source
                source = await self._admin(flow.source, flow.clients.source_admin,
                                           "source-admin")
                records = SyncRecords(
                    flow.source, target_admin=target,
                    producer_kwargs=build(producer_kwargs, flow.clients.target_producer,
                                          f"{self._name}|history"),
                    consumer_kwargs=build(consumer_kwargs, flow.clients.target_consumer,
                                          f"{self._name}|reader"),
                    replication_factor=flow.checkpoints_topic_replication_factor)
                alias = flow.target
                self._records = records
                await records.start()
                return FlowSync(flow, source=source, target=target, records=records)
            except Exception as exc:
                clients = (flow.clients.source_admin if alias == flow.source
                           else flow.clients.target_admin)
                self.error = unreachable(alias, exc, clients.get("bootstrap.servers"),
                                         role="source" if alias == flow.source else "target")
                log.warning("%s: %s; retrying", flow.name, self.error)
                self.failed_rounds += 1
                if self._records is not None:
                    with contextlib.suppress(Exception):
                        await self._records.stop()
                    self._records = None
                for admin in self._admins:
                    with contextlib.suppress(Exception):
                        await admin.close()
                self._admins.clear()
                await asyncio.sleep(backoff.delay(attempt))
                attempt += 1

    def _intervals(self) -> tuple[float, float]:
        flow = self.flow
        topics = flow.refresh_topics_interval_s if flow.refresh_topics_enabled else 600.0
        if flow.sync_topic_configs_enabled:
            topics = min(topics, flow.sync_topic_configs_interval_s)
        return (max(MIN_INTERVAL_S, topics),
                max(MIN_INTERVAL_S, flow.sync_topic_acls_interval_s))

    async def _run(self) -> None:
        sync = self.sync = await self._connect()
        self.error = None
        topic_every, acl_every = self._intervals()
        next_acls = 0.0
        backoff, attempt = Backoff(maximum=60.0), 0
        while True:
            now = time.monotonic()
            acls_due = now >= next_acls
            try:
                result = await sync.round(acls=acls_due)
                self.applied_changes += sum(1 for entry in result.applied if entry.ok)
                self.failed_changes += sum(1 for entry in result.applied if not entry.ok)
                self.error, attempt = None, 0
                self.rounds += 1
                self.last_round_ms = int(time.time() * 1000)
                if acls_due:
                    next_acls = now + acl_every
                wait = min(topic_every, max(0.0, next_acls - time.monotonic()))
            except Exception as exc:
                self.error = f"sync round failed: {exc!r}"
                self.failed_rounds += 1
                log.warning("%s: %s; retrying", self.flow.name, self.error)
                wait = backoff.delay(attempt)
                attempt += 1
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(MIN_INTERVAL_S, wait))
