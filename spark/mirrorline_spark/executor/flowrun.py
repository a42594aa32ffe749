"""One flow on the executor: its Kafka clients, the shared bookkeeping, where each of its
partitions starts, and what its part of the executor's query acknowledged.

The query itself belongs to the executor (`executor/query.py`): it copies every flow's
partitions at once. A flow here says where its partitions start
(`mirrorline.kafka.starts`: durable progress checked against the target's tail, never
Spark's checkpoint), records each micro-batch's acknowledgements through the same
bookkeeping as the replicator, and makes progress, offset syncs and the offset map
durable when its partitions stop being copied.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from aiokafka import TopicPartition

from mirrorline.core.acked_runs import run_offsets
from mirrorline.core.settings import FlowSettings
from mirrorline.core.tail_match import Verdict
from mirrorline.kafka.acked import FlowBookkeeping
from mirrorline.kafka.flowclients import FlowClients
from mirrorline.kafka.rdkafka import rdkafka_config, rdkafka_consumer_config
from mirrorline.kafka.starts import StartPlanner
from mirrorline.kafka.watermarks import HighWatermarkProbe
from mirrorline.telemetry.replication import PartitionMetrics, ReplicationMetrics
from mirrorline.v1 import flows_pb2
from mirrorline_spark.acks import PartitionAcks

log = logging.getLogger(__name__)

Key = tuple[str, int]


@dataclass(frozen=True)
class Feed:
    """A flow's part of the executor's query (`mirrorline_spark.options`)."""

    flow: str
    source: dict[str, str]
    target: dict[str, str]
    #: (topic, partition) -> first offset to copy.
    starts: dict[Key, int]
    #: source topic -> remote topic.
    topics: dict[str, str]

    def source_option(self) -> dict[str, object]:
        return {"kafka": self.source,
                "partitions": [[t, p, o] for (t, p), o in sorted(self.starts.items())]}

    def sink_option(self) -> dict[str, object]:
        return {"kafka": self.target, "topics": self.topics, "flow": self.flow}


class FlowRun:
    def __init__(self, settings: FlowSettings, *, metrics: ReplicationMetrics,
                 worker_id: str) -> None:
        self.settings = settings
        self.name = settings.name
        self.policy = settings.replication_policy
        self.worker_id = worker_id
        self._metrics = metrics
        self._clients: FlowClients | None = None
        self.books: FlowBookkeeping | None = None
        self._starts: StartPlanner | None = None
        #: The source's log ends (for lag: `record-lag`, status, the offload policy).
        self._ends: HighWatermarkProbe | None = None
        #: What the control log gives this executor (source partition -> remote topic).
        self.owned: dict[Key, str] = {}
        #: What the executor's query copies of this flow.
        self.running: dict[Key, str] = {}
        self.next_offsets: dict[Key, int] = {}
        self.latest: dict[Key, int] = {}
        self.failed: dict[Key, str] = {}
        self.replicated: dict[Key, int] = {}
        self._pmetrics: dict[Key, PartitionMetrics] = {}
        self.batch_ms = 0.0
        self._last_flush = time.monotonic()

    async def open(self) -> None:
        clients = self._clients = await FlowClients.open(self.settings, self.worker_id)
        try:
            self.books = await FlowBookkeeping.open(self.settings, self.policy, clients)
            self.books.start()
            # The same start decision as every owner (issue 14): durable progress checked
            # against the target's tail.
            self._starts = StartPlanner.for_flow(self.settings, clients, name=self.name,
                                                 map_topic=self.books.map_writer.topic)
            self._ends = HighWatermarkProbe(clients.source_consumer_kwargs)
            await self._ends.start()
        except BaseException:
            await clients.close()
            raise

    async def close(self) -> None:
        """Stop the clients. The query no longer copies this flow (`release` ran)."""
        if self._ends is not None:
            await self._ends.stop()
        if self.books is not None:
            await self.books.stop()
        if self._clients is not None:
            await self._clients.close()

    # -- what runs ----------------------------------------------------------------------
    def want(self, wanted: Mapping[Key, str]) -> dict[Key, str]:
        """Own exactly `wanted`; returns what the query should copy of it (partitions
        stopped at a refused record stay stopped while they are owned)."""
        self.owned = dict(wanted)
        for key in [k for k in self.failed if k not in wanted]:
            del self.failed[key]
        return {k: v for k, v in wanted.items() if k not in self.failed}

    async def plan(self, partitions: Mapping[Key, str]) -> Feed | None:
        """Where each partition starts; the flow's part of the next query (None if none
        of them can run)."""
        assert self.books is not None and self._starts is not None
        saved = await self.books.progress.load()
        starts = await self._starts.starts(
            {TopicPartition(t, p): remote for (t, p), remote in sorted(partitions.items())},
            saved)
        stopped = {(tp.topic, tp.partition): s.point.message for tp, s in starts.items()
                   if s.point.verdict is Verdict.STOP}
        for key, why in stopped.items():
            log.error("%s %s-%d stopped: %s", self.name, key[0], key[1], why)
            self.failed[key] = why
        partitions = {k: v for k, v in partitions.items() if k not in stopped}
        # Update, not replace: a partition stopped at a refused record keeps showing where.
        self.next_offsets.update({(tp.topic, tp.partition): s.offset
                                  for tp, s in starts.items()})
        if not partitions:
            return None
        for (topic, partition), remote in partitions.items():
            metrics = self._pmetrics[(topic, partition)] = self._metrics.partition(
                self.settings.source, self.settings.target, remote, partition)
            metrics.lag = functools.partial(self.lag, (topic, partition))
        self.running = dict(partitions)
        return Feed(flow=self.name,
                    source=rdkafka_consumer_config(self.settings.clients.source_consumer),
                    target=rdkafka_config(self.settings.clients.target_producer),
                    starts={k: self.next_offsets[k] for k in partitions},
                    topics={t: remote for (t, _), remote in partitions.items()})

    async def release(self) -> None:
        """The query stopped copying this flow: make what it recorded durable."""
        for key, remote in self.running.items():
            if self.books is not None and key in self.next_offsets:
                self.books.released(key[0], key[1], self.next_offsets[key])
            self._metrics.forget(self.settings.source, self.settings.target, remote, key[1])
            self._pmetrics.pop(key, None)
        self.running = {}
        if self.books is not None:
            await self.books.flush()

    # -- acknowledgements ---------------------------------------------------------------
    def acknowledged(self, acks: list[PartitionAcks]) -> list[str]:
        """Record this flow's part of one micro-batch (all of it acknowledged by the
        target); returns why partitions stopped, if any did."""
        assert self.books is not None
        errors = []
        for a in acks:
            key = (a.topic, a.partition)
            for run in a.runs:
                offsets = run_offsets(run)
                latest = self.latest.get(key, -1)
                self.books.acknowledged(a.topic, a.partition, offsets, run[2],
                                        caught_up=offsets[-1] + 1 >= latest)
                self.next_offsets[key] = offsets[-1] + 1
            self.replicated[key] = self.replicated.get(key, 0) + a.records
            metrics = self._pmetrics.get(key)
            if metrics is not None and a.records:
                self._metrics.acknowledged_summary(metrics, a.records, a.value_bytes,
                                                   a.min_timestamp, a.max_timestamp,
                                                   a.last_timestamp, fetched_ms=a.fetched_ms)
            if a.error:
                log.error("%s %s-%d stopped: %s", self.name, a.topic, a.partition, a.error)
                self.failed[key] = a.error
                errors.append(a.error)
        return errors

    @property
    def stopped_running(self) -> bool:
        """A partition the query copies was stopped by a refused record."""
        return any(k in self.failed for k in self.running)

    async def tick(self, latest: Mapping[Key, int], batch_ms: float) -> None:
        """Once a second: offset-sync flushes, and the log ends for lag."""
        interval = self.settings.offset_flush_interval_ms / 1000.0
        if self.books is not None and time.monotonic() - self._last_flush >= interval:
            self._last_flush = time.monotonic()
            self.books.flush_syncs()
        self.batch_ms = batch_ms or self.batch_ms
        for key, end in latest.items():
            self.latest[key] = max(end, self.latest.get(key, end))
        await self._learn_ends()

    async def _learn_ends(self) -> None:
        """The running partitions' log ends, from fetch responses: Spark reports only what
        its micro-batches planned (at most `maxRecordsPerPartition` past the position),
        which understates a backlog."""
        if self._ends is None or not self.running:
            return
        positions = {TopicPartition(t, p): self.next_offsets.get((t, p), 0)
                     for t, p in self.running}
        try:
            ends = await self._ends.refresh(positions)
        except Exception as exc:  # a source hiccup: lag stays as last known
            log.warning("%s: cannot read the source's log ends: %r", self.name, exc)
            return
        for tp, end in ends.items():
            key = (tp.topic, tp.partition)
            self.latest[key] = max(end, self.latest.get(key, end))

    def lag(self, key: Key) -> int | None:
        """Records behind the source's end as the query last saw it (`record-lag`)."""
        high, nxt = self.latest.get(key), self.next_offsets.get(key)
        return None if high is None or nxt is None else max(0, high - nxt)

    # -- status -------------------------------------------------------------------------
    def partitions(self) -> list[flows_pb2.PartitionStatus]:
        now = time.time()
        out = []
        for key, remote in sorted({**self.running, **{k: self.owned[k] for k in self.failed
                                                      if k in self.owned}}.items()):
            topic, partition = key
            nxt = self.next_offsets.get(key, -1)
            high = self.latest.get(key)
            lag = -1 if high is None or nxt < 0 else max(0, high - nxt)
            metrics = self._pmetrics.get(key)
            error = self.failed.get(key, "")
            out.append(flows_pb2.PartitionStatus(
                flow=self.name, source_topic=topic, target_topic=remote, partition=partition,
                source_end_offset=-1 if high is None else high, next_offset=nxt,
                lag_records=lag, state=flows_pb2.PARTITION_STATE_ERROR if error
                else flows_pb2.PARTITION_STATE_RUNNING, error=error,
                records_replicated=self.replicated.get(key, 0), worker_id=self.worker_id,
                records_per_second=metrics.records.rate(now, of_count=True) if metrics else 0.0,
                bytes_per_second=metrics.value_bytes.rate(now) if metrics else 0.0,
                micro_batch_ms=self.batch_ms, last_replication_latency_ms=-1.0,
                lag_ms=0.0 if lag == 0 else -1.0))
        return out
