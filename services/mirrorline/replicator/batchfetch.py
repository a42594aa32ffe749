"""Fetching a flow's partitions as record batches, for the batch path.

Under `mirrorline.batch.path` = auto or on the flow does not fetch with aiokafka's consumer
(which decodes every record) but with Fetch requests of its own (`kafka/rawbatches.py`),
and turns each partition's answer into what its pump queues: source batches to forward as
they are (`shipment.SourceBatch`) and, for batches that cannot or should not go as they are
(`core.batches.route`, `core.copy_path.PathChooser`), their records, decoded as the
consumer would. Control batches and, under read_committed, aborted transactions are left
out, and fetching continues past them.

Positions are the pumps' own (`fetch_position`): nothing else is seeked, paused or resumed.
A partition is fetched while its pump runs and has room; several fetches may be under way
at once, one per leader for the partitions no fetch covers yet, so a partition whose pump
just made room is not held up behind a fetch waiting at the broker for other partitions.
An answer is used only if its partition is still where it was asked from; anything else
(paused, released, moved past by a retention skip) is dropped and fetched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.errors import KafkaError

from mirrorline.core.backoff import Backoff
from mirrorline.core.batches import BatchError
from mirrorline.core.copy_path import Mode, PathChooser
from mirrorline.kafka.fetchroute import route_fetch
from mirrorline.kafka.rawbatches import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchedPartition,
    RawBatches,
)
from mirrorline.kafka.records import Record
from mirrorline.replicator.pump import Chunk, PartitionPump, PumpState
from mirrorline.replicator.shipment import SourceBatch

__all__ = ["BatchFetcher", "Cut", "FetchRound", "cut"]

log = logging.getLogger(__name__)

#: Kafka's OFFSET_OUT_OF_RANGE.
OFFSET_OUT_OF_RANGE = 1
#: A partition without a known leader is looked for again after this long (metadata is
#: refreshed meanwhile).
NO_LEADER_WAIT_S = 0.1

Wanted = Callable[[PartitionPump], bool]


@dataclass
class FetchRound:
    """What the answers settled in one `BatchFetcher.fetch` call brought."""

    #: Per partition: the chunks to queue and where fetching continues.
    chunks: dict[TopicPartition, tuple[list[Chunk], int]] = field(default_factory=dict)
    #: Partitions whose position the source no longer has (retention, truncation).
    out_of_range: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass
class _Answer:
    positions: dict[TopicPartition, int]
    fetched: dict[TopicPartition, FetchedPartition]


class BatchFetcher:
    def __init__(self, name: str, client: AIOKafkaClient,
                 pumps: Mapping[TopicPartition, PartitionPump], *, mode: Mode,
                 consumer_kwargs: Mapping[str, Any], max_request_size: int,
                 backoff: Backoff) -> None:
        self.name = name
        self._client = client
        self._raw = RawBatches(client)
        self._pumps = pumps
        self._mode = mode
        committed = consumer_kwargs.get("isolation_level") == "read_committed"
        self._isolation = READ_COMMITTED if committed else READ_UNCOMMITTED
        self._max_wait_ms = int(consumer_kwargs.get("fetch_max_wait_ms", 500))
        self._max_bytes = int(consumer_kwargs.get("fetch_max_bytes", 52428800))
        self._partition_max_bytes = int(consumer_kwargs.get("max_partition_fetch_bytes",
                                                            1048576))
        self._max_request_size = max_request_size
        self._backoff = backoff
        #: The source's high watermark per partition, from the latest answer.
        self.highwater: dict[TopicPartition, int] = {}
        self._choosers: dict[TopicPartition, PathChooser] = {}
        #: Fetches under way and the partitions each covers.
        self._tasks: dict[asyncio.Task[_Answer], frozenset[TopicPartition]] = {}
        self._retry_at: dict[TopicPartition, float] = {}
        self._attempt = 0
        self._topics: set[str] = set()

    def waiters(self) -> list[asyncio.Future[Any]]:
        """The fetches under way (the delivery loop wakes when one ends)."""
        return list(self._tasks)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def track(self, topics: set[str]) -> None:
        """Keep the client's metadata to `topics` (the consumer is never assigned here, and
        its client would otherwise refresh every topic of the cluster)."""
        if topics != self._topics:
            self._topics = set(topics)
            self._client.set_topics(sorted(topics))

    def forget(self, tp: TopicPartition) -> None:
        self.highwater.pop(tp, None)
        self._choosers.pop(tp, None)
        self._retry_at.pop(tp, None)

    async def fetch(self, timeout_ms: int, wanted: Wanted) -> FetchRound:
        """Start fetches for the partitions `wanted` that no fetch covers, then settle the
        answers in: those already in, or -- `timeout_ms` > 0 -- the first to come."""
        self._launch(wanted)
        if timeout_ms > 0 and self._tasks and not any(t.done() for t in self._tasks):
            await asyncio.wait(self._tasks, timeout=timeout_ms / 1000.0,
                               return_when=asyncio.FIRST_COMPLETED)
        elif timeout_ms > 0 and not self._tasks:
            await asyncio.sleep(min(timeout_ms / 1000.0, self._next_retry()))
        else:
            await asyncio.sleep(0)  # a fetch is a point where other tasks run, as ever
        out = FetchRound()
        for task in [t for t in self._tasks if t.done()]:
            self._settle(task, self._tasks.pop(task), out)
        return out

    def _next_retry(self) -> float:
        now = time.monotonic()
        waits = [at - now for at in self._retry_at.values() if at > now]
        return min(waits) if waits else 3600.0

    def _launch(self, wanted: Wanted) -> None:
        now = time.monotonic()
        cluster: Any = self._client.cluster
        by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
        covered: set[TopicPartition] = set().union(*self._tasks.values())
        unknown = False
        for tp, pump in list(self._pumps.items()):
            if tp in covered or not wanted(pump) or self._retry_at.get(tp, 0.0) > now:
                continue
            leader = cluster.leader_for_partition(tp)
            if leader is None or leader < 0:
                unknown = True
                self._retry_at[tp] = now + NO_LEADER_WAIT_S
                continue
            by_leader[int(leader)][tp] = pump.fetch_position
        if unknown:
            self._client.force_metadata_update()
        for leader, positions in by_leader.items():
            task = asyncio.ensure_future(self._fetch_from(leader, positions))
            self._tasks[task] = frozenset(positions)

    async def _fetch_from(self, leader: int, positions: dict[TopicPartition, int]) -> _Answer:
        fetched = await self._raw.fetch_from(
            leader, positions, max_wait_ms=self._max_wait_ms, max_bytes=self._max_bytes,
            partition_max_bytes=self._partition_max_bytes, isolation_level=self._isolation)
        return _Answer(positions, fetched)

    def _settle(self, task: asyncio.Task[_Answer], partitions: frozenset[TopicPartition],
                out: FetchRound) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._failed(partitions, exc)
            return
        answer = task.result()
        self._attempt = 0
        for tp, fetched in answer.fetched.items():
            position = answer.positions.get(tp)
            pump = self._pumps.get(tp)
            if position is None or pump is None:
                continue
            if fetched.error_code == 0 or fetched.high_watermark >= 0:
                self.highwater[tp] = fetched.high_watermark
            if pump.state is not PumpState.RUNNING or pump.fetch_position != position:
                continue  # moved meanwhile: this answer is stale
            if fetched.error_code == OFFSET_OUT_OF_RANGE:
                out.out_of_range[tp] = position
                continue
            if fetched.error_code:
                self._partition_failed(tp, fetched)
                continue
            self._retry_at.pop(tp, None)
            try:
                part = cut(fetched, tp, position, self._chooser(tp),
                           read_committed=self._isolation == READ_COMMITTED,
                           max_request_size=self._max_request_size)
            except (BatchError, KafkaError) as exc:
                pump.fail(f"the source batch at or after offset {position} cannot be read "
                          f"({exc})")
                continue
            out.chunks[tp] = (part.chunks, part.next_offset)
            if part.copy_path is not None:
                pump.copy_path, pump.copy_path_reason = part.copy_path, part.reason

    def _failed(self, partitions: frozenset[TopicPartition], exc: BaseException) -> None:
        delay = self._backoff.delay(self._attempt)
        self._attempt += 1
        log.warning("%s: fetch failed (%r); retrying in %.1fs", self.name, exc, delay)
        self._client.force_metadata_update()
        until = time.monotonic() + delay
        for tp in partitions:
            self._retry_at[tp] = until

    def _partition_failed(self, tp: TopicPartition, fetched: FetchedPartition) -> None:
        with contextlib.suppress(Exception):
            fetched.check(tp)
        delay = self._backoff.delay(min(self._attempt, 3))
        log.warning("%s: fetching %s-%d: Kafka error code %d; retrying in %.1fs", self.name,
                    tp.topic, tp.partition, fetched.error_code, delay)
        self._client.force_metadata_update()
        self._retry_at[tp] = time.monotonic() + delay

    def _chooser(self, tp: TopicPartition) -> PathChooser:
        chooser = self._choosers.get(tp)
        if chooser is None:
            chooser = self._choosers[tp] = PathChooser(self._mode)
        return chooser


@dataclass
class Cut:
    """One partition's fetch answer, cut into what its pump queues."""

    chunks: list[Chunk]
    #: Where fetching continues (past batches left out).
    next_offset: int
    #: The path the answer's last data batch took ("batches", "records"), and why; None
    #: when it held no data batch.
    copy_path: str | None = None
    reason: str = ""


def cut(fetched: FetchedPartition, tp: TopicPartition, position: int,
        chooser: PathChooser, *, read_committed: bool, max_request_size: int) -> Cut:
    """Source batches to forward as they are and, for batches taking the record path,
    their decoded records (consecutive ones in one list, so they are re-batched together),
    from the answer to a fetch of `tp` at `position` (`kafka/fetchroute.route_fetch`)."""
    routed = route_fetch(fetched, tp.topic, tp.partition, position, chooser,
                         read_committed=read_committed, max_request_size=max_request_size)
    out = Cut([], routed.next_offset)
    records: list[Record] = []
    for one in routed.batches:
        if one.records is None:
            if records:
                out.chunks.append(records)
                records = []
            out.chunks.append(SourceBatch(one.batch, tp.topic, tp.partition))
            out.copy_path, out.reason = "batches", one.reason
            continue
        records.extend(one.records)
        out.copy_path, out.reason = "records", one.reason
    if records:
        out.chunks.append(records)
    return out
