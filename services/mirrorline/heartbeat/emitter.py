"""MM2 heartbeats: every interval, one record per cluster pair into the target's
`heartbeats` topic (MirrorHeartbeatTask).

As MM2's dedicated mode does, a pair emits whether or not its flow replicates: for an
enabled flow A->B, the heartbeats of pair B->A land in A's `heartbeats`, and the A->B
flow carries them to B as `A.heartbeats`, proving that path. The topic is created
compacted with one partition; records are keyed (source alias, target alias), so
compaction keeps the newest heartbeat of each pair.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer

from mirrorline.core.settings import FlowSettings
from mirrorline.core.wire import Heartbeat
from mirrorline.heartbeat.retrying import Retrying
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec
from mirrorline.kafka.causes import unreachable

log = logging.getLogger(__name__)

#: Pairs due within this many seconds of each other are sent together.
_TOGETHER_S = 0.1


class HeartbeatEmitter(Retrying):
    """Heartbeats of every pair that targets one cluster."""

    def __init__(self, alias: str, pairs: Sequence[FlowSettings], *,
                 producer_kwargs: Mapping[str, Any], admin_kwargs: Mapping[str, Any],
                 topic: str) -> None:
        super().__init__(f"heartbeats to {alias}")
        self.alias = alias
        self.pairs = list(pairs)
        self.topic = topic
        self._producer_kwargs = dict(producer_kwargs)
        self._admin_kwargs = dict(admin_kwargs)
        self.sent = 0

    def _describe(self, exc: Exception) -> tuple[str, str]:
        reason = unreachable(self.alias, exc, self._producer_kwargs.get("bootstrap_servers"),
                             purpose="for heartbeats",
                             protocol=self._producer_kwargs.get("security_protocol"))
        return reason, reason

    async def _session(self) -> None:
        producer: AIOKafkaProducer | None = None
        try:
            admin = ClusterAdmin(self.alias, self._admin_kwargs)
            await asyncio.wait_for(admin.start(), 15)
            try:
                factor = max(p.heartbeats_topic_replication_factor for p in self.pairs)
                await admin.ensure_topic(TopicSpec(
                    self.topic, 1, factor, {"cleanup.policy": "compact"}))
            finally:
                await admin.close()
            producer = AIOKafkaProducer(**self._producer_kwargs)
            await asyncio.wait_for(producer.start(), 15)
            self._ready()
            await self._emit(producer)
        finally:
            if producer is not None:
                with contextlib.suppress(Exception):
                    await producer.stop()

    async def _emit(self, producer: AIOKafkaProducer) -> None:
        """Each pair on its own interval; the first heartbeat one interval after start."""
        loop = asyncio.get_running_loop()
        due = {p.name: loop.time() + p.emit_heartbeats_interval_s for p in self.pairs}
        while True:
            now = loop.time()
            # Pairs due within a moment of each other go out together, in one request: on
            # the same interval they would otherwise wake the service twice a second.
            ready = [p for p in self.pairs if due[p.name] <= now + _TOGETHER_S]
            sends = []
            for pair in ready:
                stamp = int(time.time() * 1000)
                beat = Heartbeat(pair.source, pair.target, stamp)
                sends.append(await producer.send(self.topic, beat.encode_value(),
                                                 key=beat.encode_key(), partition=0,
                                                 timestamp_ms=stamp))
                due[pair.name] = max(due[pair.name], now) + pair.emit_heartbeats_interval_s
            await asyncio.gather(*sends)
            self.sent += len(sends)
            await asyncio.sleep(max(0.01, min(due.values()) - loop.time()))
