"""The lag of partitions no live owner reports, measured by the leading controller.

An owner measures its own partitions (`replicator/lag.py`): it knows its next offset
exactly, ahead of its durable progress. A partition nobody reports -- not assigned yet
(no worker, a topic just discovered), moving, or its owner's lease gone -- has no such
owner, and is still behind the source: the leader measures it. Where copying will go on
is the flow's durable progress on the target (`mm2-offsets.<source>.internal`), or, with
none, where an owner would start (`auto.offset.reset`: the log start, or its end for
`latest`); how far the source is, its log end (ListOffsets); how old the oldest record
not copied is, one small fetch of it (`kafka/oldest.OldestRecords`, only when its offset
moved). Every `LAG_INTERVAL_S`, and only while such partitions exist: a deployment whose
partitions are all owned costs the controller nothing here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from mirrorline.core.assignment import PartitionKey
from mirrorline.core.lag import Lag, LagBook
from mirrorline.core.settings import FlowSettings
from mirrorline.core.unmapped_tail import starts_at_source_start
from mirrorline.kafka.clients import build, consumer_kwargs
from mirrorline.kafka.oldest import OldestRecords
from mirrorline.kafka.progress import read_progress

__all__ = ["LAG_INTERVAL_S", "Measured", "UnownedLag"]

log = logging.getLogger(__name__)

#: How often partitions without a reporting owner are measured.
LAG_INTERVAL_S = 2.0
#: Bound on one flow's measurement (a cluster that does not answer).
MEASURE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Measured:
    end: int
    next_offset: int
    lag: Lag


@dataclass
class _FlowClients:
    version: object
    source: AIOKafkaConsumer
    target: dict[str, Any]
    oldest: OldestRecords

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.source.stop()
        with contextlib.suppress(Exception):
            await self.oldest.stop()


class UnownedLag:
    def __init__(self, client_id: str) -> None:
        self._client_id = client_id
        self.book: LagBook[PartitionKey] = LagBook()
        #: Where copying goes on, per measured partition.
        self._next: dict[PartitionKey, int] = {}
        #: key -> (source alias, target alias, remote topic), for the metrics' labels.
        self._labels: dict[PartitionKey, tuple[str, str, str]] = {}
        self._clients: dict[str, _FlowClients] = {}
        self._failing: dict[str, str] = {}

    def view(self, key: PartitionKey, now_ms: float | None = None) -> Measured | None:
        """The last measurement of `key`, if it was measured."""
        next_offset = self._next.get(key)
        end = self.book.end(key)
        if next_offset is None or end is None:
            return None
        now = time.time() * 1000.0 if now_ms is None else now_ms
        return Measured(end, next_offset, self.book.lag(key, next_offset, now))

    def register_metrics(self, meter: Meter) -> None:
        """`record-lag` and `record-lag-ms` of the partitions measured here, under the
        replicator's names and labels, so a dashboard sums them with the owners'."""
        def observe(read: Callable[[Lag], float]
                    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def callback(_: CallbackOptions) -> Iterable[Observation]:
                now = time.time() * 1000.0
                for key, (source, target, remote) in list(self._labels.items()):
                    measured = self.view(key, now)
                    if measured is None:
                        continue
                    value = read(measured.lag)
                    if value >= 0:
                        yield Observation(value, {"source": source, "target": target,
                                                  "topic": remote,
                                                  "partition": key.partition})
            return callback
        meter.create_observable_gauge("record-lag", callbacks=[observe(
            lambda lag: float(lag.records))], description="source log end - next offset "
                                                           "to copy")
        meter.create_observable_gauge("record-lag-ms", callbacks=[observe(
            lambda lag: lag.ms)], description="age of the oldest source record not copied "
                                              "yet (0: caught up)")

    async def run(self, unowned: Callable[[], Mapping[PartitionKey, str]],
                  flows: Callable[[], Mapping[str, FlowSettings]]) -> None:
        """Measure `unowned()` (key -> remote topic) every `LAG_INTERVAL_S`; nothing is
        measured (and no client kept open) while it is empty."""
        try:
            while True:
                await self.measure(unowned(), flows())
                await asyncio.sleep(LAG_INTERVAL_S)
        finally:
            await self.close()

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        await asyncio.gather(*(c.close() for c in clients.values()))

    async def measure(self, unowned: Mapping[PartitionKey, str],
                      flows: Mapping[str, FlowSettings]) -> None:
        by_flow: dict[str, dict[PartitionKey, str]] = {}
        for key, remote in unowned.items():
            if key.flow in flows:
                by_flow.setdefault(key.flow, {})[key] = remote
        self.book.retain(k for keys in by_flow.values() for k in keys)
        for key in [k for k in self._next if k.flow not in by_flow or k not in unowned]:
            del self._next[key]
        self._labels = {k: (flows[k.flow].source, flows[k.flow].target, remote)
                        for keys in by_flow.values() for k, remote in keys.items()}
        for name in [n for n in self._clients if n not in by_flow]:
            await self._clients.pop(name).close()
        for name, keys in sorted(by_flow.items()):
            try:
                await asyncio.wait_for(self._measure_flow(flows[name], keys),
                                       MEASURE_TIMEOUT_S)
                if self._failing.pop(name, None) is not None:
                    log.info("%s: lag of unassigned partitions measured again", name)
            except Exception as exc:  # the last measurement stands
                why = repr(exc)
                if self._failing.get(name) != why:
                    log.info("%s: cannot measure the lag of unassigned partitions (%s)",
                             name, why)
                self._failing[name] = why
                clients = self._clients.pop(name, None)
                if clients is not None:
                    await clients.close()

    async def _measure_flow(self, flow: FlowSettings, keys: Mapping[PartitionKey, str]
                            ) -> None:
        clients = await self._open(flow)
        tps = {TopicPartition(k.topic, k.partition): k for k in keys}
        ends = await clients.source.end_offsets(list(tps))
        try:
            progress = await read_progress(clients.target, flow.source)
        except LookupError:  # no progress topic yet: nothing copied
            progress = {}
        fresh = [tp for tp in tps if (tp.topic, tp.partition) not in progress]
        starts: dict[TopicPartition, int] = {}
        if fresh:
            reset = flow.auto_offset_reset
            starts = (await clients.source.beginning_offsets(fresh)
                      if starts_at_source_start(reset) else {tp: ends[tp] for tp in fresh})
        positions: dict[PartitionKey, int] = {}
        for tp, key in tps.items():
            at = progress.get((tp.topic, tp.partition), starts.get(tp))
            if at is not None and tp in ends:
                positions[key] = int(at)
        self.book.saw_ends({tps[tp]: int(end) for tp, end in ends.items()})
        self._next.update(positions)
        wanted = self.book.stamps_wanted(positions)
        if wanted:
            oldest = await clients.oldest.timestamps(
                {TopicPartition(k.topic, k.partition): o for k, o in wanted.items()})
            self.book.saw_ends({tps[tp]: high for tp, high in oldest.high_watermarks.items()})
            for tp, timestamp in oldest.timestamps.items():
                key = tps[tp]
                self.book.saw_stamp(key, wanted[key], timestamp)

    async def _open(self, flow: FlowSettings) -> _FlowClients:
        known = self._clients.get(flow.name)
        version = (dict(flow.clients.source_consumer), dict(flow.clients.target_consumer))
        if known is not None and known.version == version:
            return known
        if known is not None:
            await self._clients.pop(flow.name).close()
        name = f"{self._client_id}|{flow.name}|lag"
        source = build(consumer_kwargs, flow.clients.source_consumer, name)
        source.update(enable_auto_commit=False, group_id=None)
        target = build(consumer_kwargs, flow.clients.target_consumer, f"{name}|progress")
        target.pop("group_id", None)
        consumer = AIOKafkaConsumer(**source)
        await consumer.start()
        opened = _FlowClients(version, consumer, target, OldestRecords(source))
        self._clients[flow.name] = opened
        return opened
