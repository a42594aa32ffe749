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

import asyncio
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from mirrorline.core.acked_runs import run_offsets
from mirrorline.core.lag import Lag, LagBook
from mirrorline.core.settings import FlowSettings
from mirrorline.core.tail_match import Verdict
from mirrorline.kafka.acked import FlowBookkeeping
from mirrorline.kafka.flowclients import FlowClients
from mirrorline.kafka.oldest import OldestRecords
from mirrorline.kafka.rdkafka import rdkafka_consumer_config, rdkafka_producer_config
from mirrorline.kafka.starts import StartPlanner
from mirrorline.telemetry.replication import PartitionMetrics, ReplicationMetrics
from mirrorline.v1 import flows_pb2
from mirrorline_spark.acks import PartitionAcks
from mirrorline_spark.options import DEFAULT_MAX_REQUEST_SIZE

log = logging.getLogger(__name__)

Key = tuple[str, int]

#: Bound on one round of reading the source's log ends and oldest records (a source that
#: does not answer must not hold up the executor's watch loop for long).
MEASURE_TIMEOUT_S = 5.0
#: At most this many oldest-record reads per round (the most behind first).
MAX_READS = 256


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
    #: `mirrorline.batch.path`, and the source consumer's and target producer's settings
    #: (Java properties) for the batch path's aiokafka clients.
    batch_path: str = "auto"
    source_client: Mapping[str, str] = field(default_factory=dict)
    target_client: Mapping[str, str] = field(default_factory=dict)

    def source_option(self) -> dict[str, object]:
        return {"kafka": self.source,
                "partitions": [[t, p, o] for (t, p), o in sorted(self.starts.items())],
                "batchPath": self.batch_path, "client": dict(self.source_client),
                "maxBatchBytes": int(self.target_client.get(
                    "max.request.size", DEFAULT_MAX_REQUEST_SIZE)),
                # On the batch path the read task copies (`mirrorline_spark.copytask`).
                "target": self.sink_option()}

    def sink_option(self) -> dict[str, object]:
        return {"kafka": self.target, "topics": self.topics, "flow": self.flow,
                "batchPath": self.batch_path, "client": dict(self.target_client)}


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
        #: Reads the source's log ends and the oldest records not copied yet (for lag:
        #: `record-lag`, `record-lag-ms`, status, the offload policy).
        self._probe: OldestRecords | None = None
        #: What is known of the source's log ends and oldest records, per partition.
        self.book: LagBook[Key] = LagBook()
        self._probe_failing = False
        #: What the control log gives this executor (source partition -> remote topic).
        self.owned: dict[Key, str] = {}
        #: What the executor's query copies of this flow.
        self.running: dict[Key, str] = {}
        self.next_offsets: dict[Key, int] = {}
        self.failed: dict[Key, str] = {}
        self.replicated: dict[Key, int] = {}
        #: The copy path of each partition's last acknowledged chunk, and why (status).
        self.copy_paths: dict[Key, tuple[str, str]] = {}
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
            self._probe = OldestRecords(clients.source_consumer_kwargs)
        except BaseException:
            await clients.close()
            raise

    async def close(self) -> None:
        """Stop the clients. The query no longer copies this flow (`release` ran)."""
        if self._probe is not None:
            await self._probe.stop()
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
            metrics.lag_ms = functools.partial(self.lag_ms, (topic, partition))
        self.running = dict(partitions)
        return Feed(flow=self.name,
                    source=rdkafka_consumer_config(self.settings.clients.source_consumer),
                    target=rdkafka_producer_config(self.settings.clients.target_producer),
                    starts={k: self.next_offsets[k] for k in partitions},
                    topics={t: remote for (t, _), remote in partitions.items()},
                    batch_path=self.settings.batch_path,
                    source_client=self.settings.clients.source_consumer,
                    target_client=self.settings.clients.target_producer)

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
                latest = self.book.end(key)
                self.books.acknowledged(a.topic, a.partition, offsets, run[2],
                                        caught_up=latest is None or offsets[-1] + 1 >= latest)
                self.next_offsets[key] = offsets[-1] + 1
            self.replicated[key] = self.replicated.get(key, 0) + a.records
            if a.copy_path:
                self.copy_paths[key] = (a.copy_path, a.copy_path_reason)
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
        """Once a second: offset-sync flushes, and the log ends and oldest records for
        lag."""
        interval = self.settings.offset_flush_interval_ms / 1000.0
        if self.books is not None and time.monotonic() - self._last_flush >= interval:
            self._last_flush = time.monotonic()
            self.books.flush_syncs()
        self.batch_ms = batch_ms or self.batch_ms
        shown = self._shown()
        # Kept for every owned partition, not only the shown ones: between a query's stop
        # and its restart none is shown, and the ends then still say what is caught up.
        self.book.retain(self.owned)
        self.book.saw_ends({k: end for k, end in latest.items() if k in self.owned})
        try:
            await asyncio.wait_for(self._measure(shown), MEASURE_TIMEOUT_S)
        except Exception as exc:  # a source hiccup: lag stays as last known
            if not self._probe_failing:
                log.warning("%s: cannot read the source's log ends (%r); lag shows the "
                            "last known ones", self.name, exc)
            self._probe_failing = True
        else:
            if self._probe_failing:
                log.info("%s: the source's log ends are read again", self.name)
            self._probe_failing = False

    async def _measure(self, shown: Mapping[Key, str]) -> None:
        """The log ends of the partitions status shows (running, or stopped at a refused
        record), from fetch responses: Spark reports only what its micro-batches planned
        (at most `maxRecordsPerPartition` past the position), which understates a backlog.
        Then, for the lagging ones, the timestamp of the oldest record not copied (one
        small fetch each, and only when their next offset or the end moved: `LagBook`)."""
        if self._probe is None or not shown:
            return
        positions = {key: self.next_offsets.get(key, 0) for key in shown}
        ends = await self._probe.high_watermarks(
            {TopicPartition(t, p): offset for (t, p), offset in positions.items()})
        self.book.saw_ends({(tp.topic, tp.partition): end for tp, end in ends.items()})
        wanted = self.book.stamps_wanted(positions, limit=MAX_READS)
        if not wanted:
            return
        oldest = await self._probe.timestamps(
            {TopicPartition(t, p): offset for (t, p), offset in wanted.items()})
        self.book.saw_ends({(tp.topic, tp.partition): end
                            for tp, end in oldest.high_watermarks.items()})
        for tp, timestamp in oldest.timestamps.items():
            key = (tp.topic, tp.partition)
            self.book.saw_stamp(key, wanted[key], timestamp)

    def _shown(self) -> dict[Key, str]:
        """The partitions status shows: those the query copies and those stopped at a
        refused record while still owned."""
        return {**self.running, **{k: self.owned[k] for k in self.failed if k in self.owned}}

    def _lag(self, key: Key, now_ms: float | None = None) -> Lag:
        return self.book.lag(key, self.next_offsets.get(key, -1),
                             time.time() * 1000.0 if now_ms is None else now_ms)

    def lag(self, key: Key) -> int | None:
        """Records behind the source's end (`record-lag`); None while not known."""
        records = self._lag(key).records
        return None if records < 0 else records

    def lag_ms(self, key: Key) -> float | None:
        """Age of the oldest record not copied yet (`record-lag-ms`); None while not
        known."""
        ms = self._lag(key).ms
        return None if ms < 0 else ms

    # -- status -------------------------------------------------------------------------
    def partitions(self) -> list[flows_pb2.PartitionStatus]:
        now = time.time()
        out = []
        for key, remote in sorted(self._shown().items()):
            topic, partition = key
            nxt = self.next_offsets.get(key, -1)
            high = self.book.end(key)
            lag = self._lag(key, now * 1000.0)
            metrics = self._pmetrics.get(key)
            error = self.failed.get(key, "")
            path, reason = self.copy_paths.get(key, ("", ""))
            out.append(flows_pb2.PartitionStatus(
                flow=self.name, source_topic=topic, target_topic=remote, partition=partition,
                source_end_offset=-1 if high is None else high, next_offset=nxt,
                lag_records=lag.records, state=flows_pb2.PARTITION_STATE_ERROR if error
                else flows_pb2.PARTITION_STATE_RUNNING, error=error,
                records_replicated=self.replicated.get(key, 0), worker_id=self.worker_id,
                records_per_second=metrics.records.rate(now, of_count=True) if metrics else 0.0,
                bytes_per_second=metrics.value_bytes.rate(now) if metrics else 0.0,
                micro_batch_ms=self.batch_ms, last_replication_latency_ms=-1.0,
                lag_ms=lag.ms, copy_path=path, copy_path_reason=reason))
        return out
