"""One flow on Spark: its Kafka clients, the shared bookkeeping, the acknowledgement
socket and the streaming query that copies the partitions this executor owns.

Hand-over is fenced like a replicator worker's: when the owned partitions change, the
running query is drained (the source plans no more data, the micro-batch in flight
finishes and is recorded), stopped, and progress, offset syncs and the offset map are
flushed before the change counts as done; only then does the executor report the
release. A new query starts where `mirrorline.kafka.starts` decides (durable progress
checked against the target's tail), never from Spark's checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
from collections.abc import Mapping

from aiokafka import TopicPartition

from mirrorline.core.acked_runs import run_offsets
from mirrorline.core.policy import make_policy
from mirrorline.core.settings import FlowSettings
from mirrorline.core.tail_match import Verdict
from mirrorline.kafka.acked import FlowBookkeeping
from mirrorline.kafka.flowclients import FlowClients
from mirrorline.kafka.rdkafka import rdkafka_config
from mirrorline.kafka.starts import StartPlanner
from mirrorline.kafka.watermarks import HighWatermarkProbe
from mirrorline.telemetry.replication import PartitionMetrics, ReplicationMetrics
from mirrorline.v1 import flows_pb2
from mirrorline_spark.acks import PartitionAcks
from mirrorline_spark.executor.acksrv import AckServer
from mirrorline_spark.executor.driver import RunningQuery, SparkDriver

log = logging.getLogger(__name__)

Key = tuple[str, int]
#: How long a hand-over waits for the micro-batch in flight before stopping the query.
DRAIN_S = 20.0


class FlowRun:
    def __init__(self, settings: FlowSettings, *, driver: SparkDriver,
                 metrics: ReplicationMetrics, worker_id: str, workdir: str) -> None:
        self.settings = settings
        self.name = settings.name
        self.policy = make_policy(settings.policy, settings.naming_source)
        self.worker_id = worker_id
        self._driver = driver
        self._metrics = metrics
        self._workdir = workdir
        safe = self.name.replace(">", "").replace("-", "_")
        self._drain_file = os.path.join(workdir, f"{safe}.drain")
        self._clients: FlowClients | None = None
        self.books: FlowBookkeeping | None = None
        self._starts: StartPlanner | None = None
        self._acks = AckServer(os.path.join(workdir, f"{safe}.sock"), self._on_batch)
        #: The source's log ends (for lag: `record-lag`, status, the offload policy).
        self._ends: HighWatermarkProbe | None = None
        self._query: RunningQuery | None = None
        #: What the control log gives this executor (source partition -> remote topic).
        self.owned: dict[Key, str] = {}
        #: What the running query copies.
        self.running: dict[Key, str] = {}
        self.next_offsets: dict[Key, int] = {}
        self.latest: dict[Key, int] = {}
        self.failed: dict[Key, str] = {}
        self.replicated: dict[Key, int] = {}
        self._pmetrics: dict[Key, PartitionMetrics] = {}
        self.batch_ms = 0.0
        #: Why the query failed (the executor gives every partition back), if it did.
        self.problem: str | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._last_flush = time.monotonic()

    async def open(self) -> None:
        clients = self._clients = await FlowClients.open(self.settings, self.worker_id)
        try:
            self.books = await FlowBookkeeping.open(self.settings, self.policy, clients)
            self.books.start()
            flow = self.settings
            syncs = None
            if flow.emit_offset_syncs_enabled:
                at_source = flow.offset_syncs_topic_location == "source"
                syncs = (self.policy.offset_syncs_topic(flow.naming_target if at_source
                                                        else flow.naming_source),
                         clients.source_consumer_kwargs if at_source
                         else clients.target_consumer_kwargs)
            # The same start decision as every owner (issue 14): durable progress checked
            # against the target's tail.
            self._starts = StartPlanner(
                self.name, consumer=clients.consumer,
                source_consumer=clients.source_consumer_kwargs,
                target_consumer=clients.target_consumer_kwargs,
                map_topic=self.books.map_writer.topic,
                reset=flow.clients.source_consumer.get("auto.offset.reset", "earliest"),
                syncs=syncs, match_tail=flow.properties.get(
                    "mirrorline.resume.tail.match", "true").strip().lower() != "false")
            await self._acks.start()
            self._ends = HighWatermarkProbe(clients.source_consumer_kwargs)
            await self._ends.start()
        except BaseException:
            await clients.close()
            raise
        self._task = asyncio.create_task(self._watch(), name=f"watch {self.name}")

    async def close(self, *, drain: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        async with self._lock:
            await self._stop_query(drain=drain)
        await self._acks.stop()
        if self._ends is not None:
            await self._ends.stop()
        if self.books is not None:
            await self.books.stop()
        if self._clients is not None:
            await self._clients.close()

    # -- what runs ----------------------------------------------------------------------
    async def apply(self, wanted: Mapping[Key, str], *, drain: bool = True) -> None:
        """Copy exactly `wanted` (minus partitions stopped by an error); returns once the
        partitions let go are stopped with their progress durable. `drain` False (fenced):
        stop the query at once rather than let its micro-batch finish -- the controller
        may hand the partitions on as soon as the lease runs out."""
        async with self._lock:
            self.owned = dict(wanted)
            for key in [k for k in self.failed if k not in wanted]:
                del self.failed[key]
            runnable = {k: v for k, v in wanted.items() if k not in self.failed}
            if self.problem is not None:
                runnable = {}
            if runnable == self.running and (self._query is not None or not runnable):
                return
            await self._stop_query(drain=drain)
            if runnable:
                await self._start_query(runnable)

    async def _start_query(self, partitions: Mapping[Key, str]) -> None:
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
            return
        for (topic, partition), remote in partitions.items():
            metrics = self._pmetrics[(topic, partition)] = self._metrics.partition(
                self.settings.source, self.settings.target, remote, partition)
            metrics.lag = functools.partial(self.lag, (topic, partition))
        source = {"kafka": json.dumps(rdkafka_config(self.settings.clients.source_consumer)),
                  "partitions": json.dumps([[t, p, self.next_offsets[(t, p)]]
                                            for t, p in sorted(partitions)]),
                  "drainFile": self._drain_file, "layout": "chunks"}
        sink = {"kafka": json.dumps(rdkafka_config(self.settings.clients.target_producer)),
                "topics": json.dumps({t: remote for (t, _), remote in partitions.items()}),
                "ackSocket": self._acks.path, "flow": self.name}
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._drain_file)
        self._query = await self._driver.start_query(f"mirrorline_{self.name}", source, sink)
        self.running = dict(partitions)
        log.info("%s: Spark query copies %d partitions from %s", self.name, len(partitions),
                 ", ".join(f"{t}-{p}@{self.next_offsets[(t, p)]}" for t, p in sorted(partitions)))

    async def _stop_query(self, *, drain: bool = True) -> None:
        query, self._query = self._query, None
        if query is not None:
            # The source plans no more data from now on (it checks this file).
            await asyncio.to_thread(_touch, self._drain_file)
            deadline = time.monotonic() + (DRAIN_S if drain else 0.0)
            with contextlib.suppress(Exception):
                # Spark offers no event for "micro-batch finished": poll its status.
                while time.monotonic() < deadline and await query.trigger_active():  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
            with contextlib.suppress(Exception):
                await query.stop()
            log.info("%s: Spark query stopped", self.name)
        for key in self.running:
            if self.books is not None and key in self.next_offsets:
                self.books.released(key[0], key[1], self.next_offsets[key])
            remote = self.running[key]
            self._metrics.forget(self.settings.source, self.settings.target, remote, key[1])
            self._pmetrics.pop(key, None)
        self.running = {}
        if self.books is not None:
            await self.books.flush()

    # -- acknowledgements ---------------------------------------------------------------
    def _on_batch(self, batch_id: int, acks: list[PartitionAcks]) -> str | None:
        """Record one micro-batch (everything in it was acknowledged by the target)."""
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
        return "; ".join(errors) if errors else None

    async def _watch(self) -> None:
        """Once a second: status, offset-sync flushes, and what to do about a failed query."""
        interval = self.settings.offset_flush_interval_ms / 1000.0
        while True:
            await asyncio.sleep(1.0)
            if self.books is not None and time.monotonic() - self._last_flush >= interval:
                self._last_flush = time.monotonic()
                self.books.flush_syncs()
            query = self._query
            if query is None:
                continue
            try:
                status = await query.status()
            except Exception as exc:
                log.warning("%s: cannot read the query status: %r", self.name, exc)
                continue
            self.batch_ms = status.batch_ms or self.batch_ms
            for key, end in status.latest.items():
                self.latest[key] = max(end, self.latest.get(key, end))
            await self._learn_ends()
            if status.active:
                continue
            async with self._lock:
                if self._query is not query:
                    continue
                if any(k in self.failed for k in self.running):
                    # A record was rejected: that partition stops, the others go on.
                    log.warning("%s: restarting the query without the stopped partitions",
                                self.name)
                    await self._stop_query()
                    runnable = {k: v for k, v in self.owned.items() if k not in self.failed}
                    if runnable:
                        await self._start_query(runnable)
                    continue
                self.problem = (f"Spark query of {self.name} failed: "
                                f"{(status.error or 'stopped').splitlines()[0][:500]}")
                log.error("%s; giving its partitions back to the workers", self.problem)
                await self._stop_query()

    async def _learn_ends(self) -> None:
        """The running partitions' log ends, from fetch responses: Spark reports only what
        its micro-batches planned (at most `maxRecordsPerPartition` past the position),
        which understates a backlog."""
        if self._ends is None:
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
        shown = self.running if self.problem is None else {}
        for key, remote in sorted({**shown, **{k: self.owned[k] for k in self.failed
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


def _touch(path: str) -> None:
    with open(path, "w"):
        pass
