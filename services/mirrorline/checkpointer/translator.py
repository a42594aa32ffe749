"""Everything needed to translate one flow's offsets, kept current by tailing two topics.

* MM2's offset syncs (sparse; on the source by default) feed MM2's OffsetSyncStore, with
  its read-to-end gating and must-read-to-end rule;
* Mirrorline's offset map (dense; on the target) feeds the OffsetMap.
Either may be unavailable -- the source cluster may be down during a failover -- and the
other still answers: the map alone translates exactly what it covers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka.errors import KafkaConnectionError

from mirrorline.core.bad_records import BadRecords
from mirrorline.core.offset_map import OffsetMap
from mirrorline.core.offset_sync_store import OffsetSyncStore
from mirrorline.core.policy import ReplicationPolicy
from mirrorline.core.settings import FlowSettings
from mirrorline.core.translation import Translation, translate, why_not
from mirrorline.core.wire import valid_sync
from mirrorline.kafka.causes import unreachable
from mirrorline.kafka.reader import TopicReader
from mirrorline.kafka.records import Record
from mirrorline.v1 import offset_map_pb2

log = logging.getLogger(__name__)

RETRY_S = 3.0


class FlowTranslator:
    def __init__(self, flow: FlowSettings, policy: ReplicationPolicy, *,
                 source_consumer: Mapping[str, Any], target_consumer: Mapping[str, Any]) -> None:
        self.flow = flow
        self.syncs_topic = flow.offset_syncs_topic
        self._syncs_kwargs = source_consumer if flow.offset_syncs_at_source else target_consumer
        self._syncs_cluster = flow.offset_syncs_cluster
        self.map_topic = flow.offset_map_topic
        self._map_kwargs = target_consumer
        self.syncs = OffsetSyncStore()
        self.map = OffsetMap()
        self.map_ready = asyncio.Event()
        self.syncs_ready = asyncio.Event()
        self._must_read_to_end = True
        self.bad_records = BadRecords(f"checkpointer {flow.name}")
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, *, checkpoints_loaded: bool) -> None:
        # MM2's rule: when earlier checkpoints could not be read, keep only the newest sync
        # per partition from the initial read, so no checkpoint can go backwards.
        self._must_read_to_end = not checkpoints_loaded
        self._tasks = [
            asyncio.create_task(self._follow(self.syncs_topic, self._syncs_cluster,
                                             self._syncs_kwargs, self._on_sync,
                                             self._syncs_loaded),
                                name=f"{self.flow.name} offset syncs"),
            asyncio.create_task(self._follow(self.map_topic, self.flow.target,
                                             self._map_kwargs, self._on_map,
                                             self.map_ready.set),
                                name=f"{self.flow.name} offset map"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def ready(self) -> bool:
        return self.map_ready.is_set() or self.syncs.is_ready

    def translate(self, topic: str, partition: int, upstream: int) -> Translation | None:
        if not self.map_ready.is_set():  # do not answer from a map still being read
            return translate(upstream, topic=topic, partition=partition,
                             offset_map=OffsetMap(), syncs=self.syncs)
        return translate(upstream, topic=topic, partition=partition, offset_map=self.map,
                         syncs=self.syncs)

    def why_not(self, topic: str, partition: int, upstream: int) -> str:
        if not self.ready:
            return "the offset syncs and the offset map are still being read"
        return why_not(upstream, topic=topic, partition=partition, offset_map=self.map,
                       syncs=self.syncs)

    def checkpoint_offset(self, topic: str, partition: int, upstream: int) -> int | None:
        """What a checkpoint records (None: no checkpoint for this partition yet)."""
        found = self.translate(topic, partition, upstream)
        return None if found is None else found.downstream_offset

    # -- following the topics -------------------------------------------------------------
    def _syncs_loaded(self) -> None:
        self.syncs.finish_initial_read()
        self.syncs_ready.set()

    def _on_sync(self, record: Record) -> None:
        sync = self.bad_records.decode(record.topic, record.partition, record.offset,
                                       lambda: valid_sync(record.key, record.value))
        if sync is not None:
            self.syncs.add(sync)

    def _on_map(self, record: Record) -> None:
        def fold() -> None:  # decoding and checking happen before anything changes
            parsed = offset_map_pb2.OffsetMapRecord()
            parsed.ParseFromString(record.value or b"")
            self.map.add_record(parsed)

        self.bad_records.decode(record.topic, record.partition, record.offset, fold)

    async def _follow(self, topic: str, cluster: str, kwargs: Mapping[str, Any],
                      apply: Any, loaded: Any) -> None:
        """Read `topic` to its end (then `loaded()`), then keep tailing; retry while it is
        missing or its cluster is unreachable."""
        first = True
        missing_said = False
        position: int | None = None  # after a reconnect, continue where reading stopped
        while True:
            reader = TopicReader(kwargs, topic)
            try:
                if not await reader.start_if_exists(
                        partitions=1, resume_at=None if position is None else {0: position}):
                    # Nobody wrote it yet (a replicator creates it with its first copies,
                    # and topics are never auto-created): nothing to translate from is an
                    # answer, not a reason to keep callers waiting.
                    if first:
                        if topic == self.syncs_topic:
                            self.syncs.start_initial_read(self._must_read_to_end)
                        loaded()
                        first = False
                    if not missing_said:
                        log.info("%s: %s does not exist yet: nothing to translate from "
                                 "until it does", self.flow.name, topic)
                        missing_said = True
                    await reader.stop()
                    await asyncio.sleep(RETRY_S)
                    continue
                if first and topic == self.syncs_topic:
                    self.syncs.start_initial_read(self._must_read_to_end)
                for record in await reader.read_to_end():
                    apply(record)
                    position = record.offset + 1
                if first:
                    loaded()
                    first = False
                while True:
                    for record in await reader.poll(timeout_ms=1000):
                        apply(record)
                        position = record.offset + 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # missing topic, unreachable cluster
                why = (unreachable(cluster, exc, kwargs.get("bootstrap_servers"))
                       if isinstance(exc, KafkaConnectionError | OSError | TimeoutError)
                       else f"{type(exc).__name__}: {exc}")
                log.info("%s: reading %s: %s; retrying in %.0fs", self.flow.name, topic,
                         why, RETRY_S)
            finally:
                with contextlib.suppress(Exception):
                    await reader.stop()
            await asyncio.sleep(RETRY_S)
