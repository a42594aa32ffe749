"""Replication of one flow `source->target`: the partitions it owns, copied in order.

One consumer (explicitly assigned partitions, never a consumer group) feeds one
`PartitionPump` per partition; one producer carries data, progress and -- when the
offset-syncs topic lives on the target -- offset syncs. After each acknowledged batch
the flow records progress, plans offset syncs (MM2's rule) and updates metrics.

In standalone mode the flow discovers its topics itself every
`refresh.topics.interval.seconds`; under a controller it is told which partitions to own.

This module is the flow's lifecycle and what it owns; opening its clients and bookkeeping
is `flow_open`, the records' way from fetch to acknowledgement is `traffic`.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Collection, Mapping

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import InvalidProducerEpoch, OutOfOrderSequenceNumber, UnknownProducerId
from opentelemetry.trace import Tracer

from mirrorline.core.backoff import Backoff
from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import FlowSettings
from mirrorline.core.tail_match import ResumePoint, Verdict
from mirrorline.kafka.causes import explain
from mirrorline.kafka.discovery import DiscoveryResult, RemoteTopic, TopicDiscovery
from mirrorline.kafka.flowclients import FlowClients
from mirrorline.kafka.metadata import partitions_by_topic
from mirrorline.kafka.starts import Start, StartPlanner
from mirrorline.replicator.batchfetch import BatchFetcher
from mirrorline.replicator.checker import TargetChecker
from mirrorline.replicator.delivery import DeliveryLoop
from mirrorline.replicator.exactly_once import check_exactly_once
from mirrorline.replicator.flow_open import bootstrap_servers, open_flow
from mirrorline.replicator.flow_status import partition_views
from mirrorline.replicator.lag import FlowLag
from mirrorline.replicator.pump import PartitionPump
from mirrorline.replicator.sending import abort_sends, reopen_producer, replace_transactional
from mirrorline.replicator.traffic import FlowTraffic
from mirrorline.replicator.transactional import (
    RoundBooks,
    TransactionalDelivery,
    committed_progress,
)
from mirrorline.telemetry.replication import PartitionMetrics, ReplicationMetrics
from mirrorline.v1 import flows_pb2

log = logging.getLogger(__name__)

#: Refusals meaning the broker no longer agrees with the producer's sequence numbers: only
#: a new producer (id) recovers.
PRODUCER_STATE_LOST = (OutOfOrderSequenceNumber, UnknownProducerId, InvalidProducerEpoch)
#: aiokafka's request.timeout.ms when the file sets none.
DEFAULT_REQUEST_TIMEOUT_MS = 40_000

#: A partition let go with a batch in flight says why it waits, this often.
RELEASE_WAIT_S = 10.0


class FlowState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    ERROR = "error"
    STOPPED = "stopped"


class FlowReplicator:
    def __init__(self, flow: FlowSettings, *, worker_id: str, metrics: ReplicationMetrics,
                 tracer: Tracer, discover: bool = True, vanished: set[str] | None = None
                 ) -> None:
        """`discover=False`: a controller decides the partitions (`set_partitions`), and
        progress is re-read whenever partitions arrive (another worker may have moved it).
        `vanished`: the flow's record of source topics seen deleted, kept by the caller
        when this object may be replaced (a worker's flow that owned nothing for a while)."""
        self.flow = flow
        self.policy = flow.replication_policy
        self.worker_id = worker_id
        self.state = FlowState.STARTING
        self.error: str | None = None
        self.problems: dict[str, str] = {}
        self._metrics = metrics
        self._tracer = tracer
        self._discover = discover
        self._backoff = Backoff(maximum=10.0)
        self._pumps: dict[TopicPartition, PartitionPump] = {}
        self._pump_metrics: dict[TopicPartition, PartitionMetrics] = {}
        self._traffic = FlowTraffic(flow.name, self._pumps, self._pump_metrics,
                                    metrics=metrics, tracer=tracer, backoff=self._backoff)
        self._lag = FlowLag(flow.name, self._pumps, lambda: self._traffic.consumer,
                            self._traffic.highwater)
        self._saved: dict[tuple[str, int], int] = {}
        #: Source topics whose partitions were let go because the topic vanished: if it
        #: comes back it was recreated, and is copied from its start.
        self._vanished: set[str] = vanished if vanished is not None else set()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        #: A producer reset after a refused sequence is under way (one at a time).
        self._resetting = False
        self._lock = asyncio.Lock()
        self.paused = False
        self.ready = asyncio.Event()
        # Clients, created in start().
        self._producer: AIOKafkaProducer | None = None
        self._clients: FlowClients | None = None
        self._discovery: TopicDiscovery | None = None
        self._planner_of_starts: StartPlanner | None = None
        self._delivery: DeliveryLoop | None = None
        #: Exactly-once mode: the bookkeeping each round's transaction carries.
        self._txn_books: RoundBooks | None = None

    @property
    def name(self) -> str:
        return self.flow.name

    # -- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        """Connect (retrying with backoff while a cluster is unreachable), then run."""
        attempt = 0
        while not self._stopping:
            try:
                transactional = await check_exactly_once(self.flow, self.flow.properties)
                await self._connect(transactional)
                break
            except ConfigError as exc:  # retrying cannot help: say so once and stay stopped
                await self._close_clients()
                self.state, self.error = FlowState.ERROR, f"configuration error: {exc}"
                log.error("%s: %s", self.name, self.error)
                return
            except Exception as exc:
                await self._close_clients()
                delay = self._backoff.delay(attempt)
                attempt += 1
                self.error = (f"cannot start flow {self.name}: "
                              f"{explain(exc, bootstrap_servers(self.flow))}")
                log.warning("%s (retrying in %.1fs)", self.error, delay)
                await asyncio.sleep(delay)
        if self._stopping:
            return
        self.state, self.error = FlowState.RUNNING, None
        self.ready.set()
        assert self._traffic.books is not None
        self._traffic.books.start()
        assert self._producer is not None
        assert self._clients is not None
        traffic = self._traffic
        checker = TargetChecker(self._pumps, self._clients.target_consumer_kwargs,
                                on_ack=traffic.on_ack, on_checked=self._wake_delivery)
        if self._txn_books is not None:
            self._delivery = TransactionalDelivery(
                self._producer, self._pumps, fetch=traffic.fetch, on_ack=traffic.on_ack,
                books=self._txn_books, recover=self._recover_transactional,
                committed=self._committed, on_fenced=self._fenced,
                poll_timeout_ms=self.flow.consumer_poll_timeout_ms)
        else:
            pkw = self._clients.producer_kwargs
            self._delivery = DeliveryLoop(
                self._producer, self._pumps, fetch=traffic.fetch, on_ack=traffic.on_ack,
                on_failed=functools.partial(self._send_failed, checker),
                poll_timeout_ms=self.flow.consumer_poll_timeout_ms,
                stall_after_s=(pkw.get("request_timeout_ms", DEFAULT_REQUEST_TIMEOUT_MS) / 1000
                               if pkw.get("enable_idempotence") else None),
                on_stalled=self._send_stalled, fetch_waiters=traffic.fetch_waiters)
        self._tasks.append(asyncio.create_task(self._delivery.run(), name=f"{self.name} copy"))
        self._tasks.append(asyncio.create_task(checker.run(), name=f"{self.name} check"))
        self._tasks.append(asyncio.create_task(traffic.watch(
            self.flow.offset_flush_interval_ms / 1000.0, lambda: self._stopping),
            name=f"{self.name} watch"))
        self._tasks.append(asyncio.create_task(self._lag.run(lambda: self._stopping),
                                               name=f"{self.name} lag"))
        if self._discover:
            self._tasks.append(asyncio.create_task(self._discovery_loop(),
                                                   name=f"{self.name} discovery"))
        log.info("%s: replicating (worker %s)", self.name, self.worker_id)

    async def _connect(self, transactional: bool = False) -> None:
        opened = await open_flow(self.flow, self.policy, self.worker_id,
                                 standalone=self._discover, transactional=transactional)
        clients = self._clients = opened.clients
        self._traffic.consumer, self._producer = clients.consumer, clients.producer
        self._traffic.books, self._saved = opened.books, opened.saved
        self._traffic.progress = opened.books.progress
        self._planner_of_starts, self._discovery = opened.starts, opened.discovery
        self._txn_books = opened.txn_books
        self._lag.open(clients.source_consumer_kwargs)
        if self.flow.batch_path != "off":
            self._traffic.fetcher = BatchFetcher(
                self.name, clients.consumer._client, self._pumps, mode=self.flow.batch_path,
                consumer_kwargs=clients.source_consumer_kwargs,
                max_request_size=int(clients.producer_kwargs.get("max_request_size",
                                                                 1048576)),
                backoff=self._backoff)

    async def stop(self) -> None:
        """Finish batches in flight, persist progress and offset syncs, close clients."""
        self._stopping = True
        self._traffic.assignment_changed.set()
        for pump in self._pumps.values():
            pump.stop()
        if self._delivery is not None and not await self._delivery.drain(timeout=10.0):
            await self.abort_sends("stopping: batches unacknowledged after 10s")
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._traffic.books is not None:
            await self._traffic.books.stop()
        await self._close_clients()
        self.state = FlowState.STOPPED

    async def abort_sends(self, reason: str) -> None:
        """Cancel every batch in flight now, so none of them can land later (fencing,
        stopping): a partition let go must not deliver anything afterwards. Partitions
        still running check the target before sending those records again."""
        if self._clients is not None and self._delivery is not None:
            self._producer = None
            await abort_sends(self.name, self._clients, self._delivery, reason)
            if not self._stopping:
                self._tasks.append(asyncio.create_task(self._reopen_producer(),
                                                       name=f"{self.name} reopen producer"))

    def _send_failed(self, checker: TargetChecker, _pump: PartitionPump,
                     exc: BaseException) -> None:
        """A batch failed: its partition checks the target before sending again. An
        idempotent producer whose batch expired keeps counting sequence numbers the broker
        never saw, so every later batch of that partition is refused as out of order:
        such a producer is replaced (a new producer id starts its sequences afresh)."""
        checker.wake.set()
        if isinstance(exc, PRODUCER_STATE_LOST):
            self._replace_producer(f"the target refused this producer's sequence "
                                   f"({type(exc).__name__})")

    def _send_stalled(self, age_s: float) -> None:
        """An idempotent producer's batch unacknowledged past the request timeout: the
        target is down or unreachable, and aiokafka would retry it silently until it
        returns. The sends are aborted instead (a new producer takes over), so every
        partition says the target failed it and checks the target before sending again,
        as after an expired batch of a producer that is not idempotent."""
        self._replace_producer(f"the target acknowledged no batch for {age_s:.0f}s "
                               "(request.timeout.ms)")

    def _replace_producer(self, why: str) -> None:
        """Abort the sends and open a new producer, once at a time, outside exactly-once
        mode (which replaces its transactional producer itself) and not while stopping."""
        if (self._txn_books is not None or self._producer is None or self._stopping
                or self._resetting):
            return
        self._resetting = True
        self._tasks.append(asyncio.create_task(self._reset_producer(
            f"{why}: a new producer takes over"), name=f"{self.name} reset producer"))

    async def _reset_producer(self, reason: str) -> None:
        try:
            await self.abort_sends(reason)
        finally:
            self._resetting = False

    async def _reopen_producer(self) -> None:
        if self._clients is not None and self._delivery is not None:
            self._producer = await reopen_producer(self.name, self._clients, self._delivery,
                                                   self._backoff)

    async def _recover_transactional(self, failed: AIOKafkaProducer) -> AIOKafkaProducer:
        assert self._clients is not None and self._delivery is not None
        self._producer = await replace_transactional(self.name, self._clients, self._delivery,
                                                     self._backoff, failed)
        return self._producer

    async def _committed(self, partitions: Collection[TopicPartition]
                         ) -> dict[tuple[str, int], int]:
        assert self._clients is not None
        return await committed_progress(self.name, self._clients.target_consumer_kwargs,
                                        self.flow.source, partitions, self._backoff)

    def _fenced(self, reason: str) -> None:
        self._producer = None
        self.state, self.error = FlowState.ERROR, reason

    def _wake_delivery(self) -> None:
        if self._delivery is not None:
            self._delivery.wake.set()

    async def _close_clients(self) -> None:
        await self._lag.close()
        fetcher, self._traffic.fetcher = self._traffic.fetcher, None
        if fetcher is not None:
            await fetcher.close()
        if self._clients is not None:
            await self._clients.close()
        self._clients = None
        self._traffic.consumer = self._producer = None

    # -- which partitions ---------------------------------------------------------------
    async def _discovery_loop(self) -> None:
        assert self._discovery is not None
        attempt = pending = 0
        while not self._stopping:
            try:
                result = await self._discovery.refresh()
                # Taking partitions on reads the source and target (start offsets): a
                # failure there is retried like a failed refresh, not the end of discovery.
                await self.apply_discovery(result)
                attempt = 0
            except Exception as exc:
                delay = self._backoff.delay(attempt)
                attempt += 1
                log.warning("%s: topic refresh failed (%r); retrying in %.1fs", self.name, exc,
                            delay)
                await asyncio.sleep(delay)
                continue
            if result.pending:
                # Remote topics created but not yet in the target's metadata: look again
                # soon (even with refresh.topics.enabled = false, or they are never copied).
                delay = min(self._backoff.delay(pending), self.flow.refresh_topics_interval_s)
                pending += 1
                log.info("%s: remote topics of %s created but not yet known to %s; looking "
                         "again in %.1fs", self.name, ", ".join(sorted(result.pending)),
                         self.flow.target, delay)
                await asyncio.sleep(delay)
                continue
            pending = 0
            if not self.flow.refresh_topics_enabled:
                return
            await asyncio.sleep(self.flow.refresh_topics_interval_s)

    async def apply_discovery(self, result: DiscoveryResult) -> None:
        self.problems = dict(result.problems)
        await self.set_topics(result.topics)

    async def set_topics(self, topics: Mapping[str, RemoteTopic]) -> None:
        """Own exactly the partitions of `topics` (source topic -> remote topic)."""
        await self.set_partitions({
            TopicPartition(source, p): remote.name
            for source, remote in topics.items()
            for p in range(remote.partitions)
        })

    async def set_partitions(self, wanted: Mapping[TopicPartition, str]) -> None:
        """Own exactly `wanted` (source partition -> remote topic). Partitions let go are
        stopped after their last batch settled, with their progress durable on return."""
        async with self._lock:
            if not self._discover and any(tp not in self._pumps for tp in wanted):
                assert self._traffic.progress is not None
                self._saved = await self._traffic.progress.load()
            await self._reassign(wanted)
            if self._traffic.progress is not None:
                await self._traffic.progress.flush()

    def pause(self) -> None:
        self.paused = True
        for pump in self._pumps.values():
            pump.pause()
        if self._pumps:
            self._traffic.pause(self._pumps)
        if self.state is FlowState.RUNNING:
            self.state = FlowState.PAUSED

    def resume(self) -> None:
        self.paused = False
        for pump in self._pumps.values():
            pump.resume()
        if self._pumps:
            self._traffic.resume(self._pumps)
        if self.state is FlowState.PAUSED:
            self.state = FlowState.RUNNING

    async def _reassign(self, wanted: Mapping[TopicPartition, str]) -> None:
        removed = [tp for tp in self._pumps if tp not in wanted]
        added = [tp for tp in wanted if tp not in self._pumps]
        if not removed and not added:
            return
        if removed:
            await self._note_vanished({tp.topic for tp in removed})
        for tp in removed:
            await self._drop(tp)
        assert self._planner_of_starts is not None
        recreated = [tp for tp in added if tp.topic in self._vanished]
        starts = await self._planner_of_starts.starts(
            {tp: wanted[tp] for tp in added if tp not in recreated}, self._saved)
        starts.update(await self._recreated(recreated, wanted))
        for tp in added:
            self._add_pump(tp, wanted[tp], starts[tp])
            if self.paused:
                self._pumps[tp].pause()
        self._traffic.assign()
        if added:
            log.info("%s: now replicating %d partitions (+%d, -%d)", self.name,
                     len(self._pumps), len(added), len(removed))
        self._traffic.assignment_changed.set()
        if added:
            self._lag.wake()

    async def _note_vanished(self, topics: set[str]) -> None:
        """Remember which of `topics` (whose partitions are let go) no longer exist on the
        source: if one exists again later, it was recreated (see `_recreated`)."""
        consumer = self._traffic.consumer
        assert consumer is not None
        try:
            present = await partitions_by_topic(consumer, topics)
        except Exception as exc:  # cannot tell: resume as after any hand-over
            log.warning("%s: cannot tell whether %s still exist on the source (%r)",
                        self.name, ", ".join(sorted(topics)), exc)
            return
        for topic in sorted(topics - set(present) - self._vanished):
            log.warning("%s: source topic %s no longer exists; letting its partitions go "
                        "(if it is created again, it is copied from its start)",
                        self.name, topic)
            self._vanished.add(topic)

    async def _recreated(self, partitions: list[TopicPartition],
                         wanted: Mapping[TopicPartition, str]) -> dict[TopicPartition, Start]:
        """Starts of the partitions of a source topic that vanished and exists again: it
        was deleted and created anew, so its offsets start over. Each is copied from its
        log start (its records follow the old ones on the remote topic) instead of resuming
        at the old topic's offset, which would skip the new topic's first records without
        a word."""
        if not partitions:
            return {}
        consumer = self._traffic.consumer
        assert consumer is not None
        begin = await consumer.beginning_offsets(partitions)
        out: dict[TopicPartition, Start] = {}
        for tp in partitions:
            old = self._saved.pop((tp.topic, tp.partition), None)
            reason = (f"source topic {tp.topic} was deleted and recreated: partition "
                      f"{tp.partition} is copied from its start (offset {begin[tp]}), after "
                      f"the old topic's records on {wanted[tp]}"
                      + (f" (the old one was copied up to offset {old})" if old is not None
                         else ""))
            log.warning("%s: %s", self.name, reason)
            out[tp] = Start(begin[tp], ResumePoint(begin[tp], Verdict.FALLBACK, reason))
            if self._traffic.progress is not None:
                self._traffic.progress.save(tp.topic, tp.partition, begin[tp])
        self._vanished.difference_update(tp.topic for tp in partitions)
        return out

    def _add_pump(self, tp: TopicPartition, remote: str, start: Start) -> None:
        pump = PartitionPump(flow=self.name, source_topic=tp.topic, target_topic=remote,
                             partition=tp.partition, next_offset=start.offset,
                             backoff=self._backoff)
        pump.target_end = start.point.target_end
        pump.transactional = self._txn_books is not None
        if self._clients is not None and not pump.transactional:
            pump.window = self._clients.pipelining
        if start.point.verdict is Verdict.STOP:
            pump.fail(start.point.message, logged=True)
        elif start.point.verdict is Verdict.FALLBACK:
            pump.notice = start.point.message
        metrics = self._metrics.partition(self.flow.source, self.flow.target, remote,
                                          tp.partition)
        metrics.lag = functools.partial(self._lag.records, tp, pump)
        metrics.lag_ms = functools.partial(self._lag.millis, tp, pump)
        self._pumps[tp] = pump
        self._pump_metrics[tp] = metrics

    async def _drop(self, tp: TopicPartition) -> None:
        """Let go of a partition only once nothing it sent can still arrive: its batch in
        flight is acknowledged or failed (`abort_sends` fails it at once when fenced)."""
        pump = self._pumps[tp]
        pump.stop()
        while self._delivery is not None and pump.in_flight and \
                not await self._delivery.wait_settled(pump, timeout=RELEASE_WAIT_S):
            log.warning("%s %s-%d: waiting for its batch in flight to be acknowledged or "
                        "to fail before letting go (the target does not answer)", self.name,
                        tp.topic, tp.partition)
        del self._pumps[tp]
        self._saved[(tp.topic, tp.partition)] = pump.next_offset
        self._pump_metrics.pop(tp, None)
        self._traffic.throttled.discard(tp)
        if self._traffic.fetcher is not None:
            self._traffic.fetcher.forget(tp)
        if self._traffic.books is not None:
            self._traffic.books.released(tp.topic, tp.partition, pump.next_offset)
        self._metrics.forget(self.flow.source, self.flow.target, pump.target_topic, tp.partition)
        log.info("%s: stopped replicating %s-%d at offset %d", self.name, tp.topic, tp.partition,
                 pump.next_offset)

    # -- status -----------------------------------------------------------------------
    def partitions(self) -> list[flows_pb2.PartitionStatus]:
        """Every owned partition as GetStatus and the worker heartbeats report it."""
        return partition_views(self.name, self.worker_id, self._pumps, self._pump_metrics,
                               self._lag)

    @property
    def healthy(self) -> bool:
        return self.state in (FlowState.RUNNING, FlowState.PAUSED)
