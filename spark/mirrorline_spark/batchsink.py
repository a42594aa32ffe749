"""Writing on the batch path: source batches forwarded as they are, with raw Produce requests.

Under `mirrorline.batch.path` auto or on (the default) the read task that fetched a range
(`mirrorline_spark.copytask`) also sends it, with raw Produce requests
(`mirrorline.kafka.rawbatches`) over an aiokafka client on the task's event loop, as one
idempotent producer (one InitProducerId per task and target cluster), acks=-1:

- a source batch copied as it is gets rewritten for the target (`core.batches.rewrite_header`:
  base offset, leader epoch, producer id, epoch and sequence, CRC) and is forwarded with
  its codec, whatever the target producer's `compression.type` -- as the replicator's
  batch path does;
- records of batches that take the record path are batched here with aiokafka's record
  batch builder, compressed with `<target>.producer.compression.type`, at most 1 MiB or
  `max.request.size` per batch.

A partition's batches leave in order with consecutive sequences, up to `MAX_IN_FLIGHT`
at once (the first alone: a broker takes a new producer's first batch whatever its
sequence), so the broker writes them in order whatever happens to the requests. Where a
batch landed is the base offset the leader answered; its records follow at the offsets
after it (a source batch on this path has no gaps; records batched here keep their own
source offsets), which gives the same `PartitionAcks` runs as the record path, recorded
by the executor through the one bookkeeping.

Failures: a retriable one (leader moved, connection lost, timeout) sends the failed batch
and those behind it again, with the same sequences, so the broker writes each once; a
batch the target refuses (too large, corrupt, invalid) is sent again record by record, so
the refused record is named exactly: it stops its partition only, the records before it
acknowledged, in the record path's words. Anything else fails the task: nothing of the
micro-batch is recorded, and the query copies it again from recorded progress.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiokafka.errors as kafka_errors
from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from mirrorline.core.acked_runs import OffsetRun, extend_runs, offset_runs
from mirrorline.core.batches import (
    CODEC_NAMES,
    HEADER_SIZE,
    Batch,
    next_sequence,
    rewrite_header,
)
from mirrorline.core.rejects import rejected_record
from mirrorline.kafka.clients import producer_kwargs
from mirrorline.kafka.flowclients import idempotent_by_default
from mirrorline.kafka.produce_request import BatchParts
from mirrorline.kafka.rawbatches import RawBatchError, RawBatches
from mirrorline.kafka.rawrecords import decode_batch
from mirrorline_spark.acks import PartitionAcks
from mirrorline_spark.batchread import client_kwargs
from mirrorline_spark.options import DEFAULT_MAX_REQUEST_SIZE, SinkFeed

__all__ = ["MAX_IN_FLIGHT", "BatchWriter"]

#: Batches of one partition in flight at once (a broker remembers a producer's last 5).
MAX_IN_FLIGHT = 5
#: Records batched here go in batches of at most this many bytes (or max.request.size).
BATCH_BYTES = 1 << 20
#: Give up on a partition whose batches keep failing for this long (the task fails).
STALL_S = 120.0
#: Kafka errors that mean "the target will never take this as it is", by the names the
#: record path (librdkafka) gives them, so both paths stop a partition in the same words.
REFUSED = {2: "INVALID_MSG", 4: "INVALID_MSG_SIZE", 10: "MSG_SIZE_TOO_LARGE",
           18: "RECORD_LIST_TOO_LARGE", 87: "INVALID_RECORD"}
_CODECS = {name: code for code, name in CODEC_NAMES.items()}

#: A record to batch here: (source offset, timestamp, key, value, headers).
Rec = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


class _Refused(Exception):
    """A record batch the target will never take as it is."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name} {detail}")
        self.name = name


@dataclass(eq=False)
class _Out:
    """One produce of a partition: a source batch to forward, or records to batch."""

    count: int
    offsets: Sequence[int]
    min_ts: int
    max_ts: int
    last_ts: int
    nbytes: int
    batch: Batch | None = None
    records: list[Rec] | None = None
    seq: int = -1
    task: asyncio.Future[int] | None = None

    @classmethod
    def of_batch(cls, batch: Batch) -> _Out:
        h = batch.header
        assert h is not None
        return cls(h.record_count, range(h.base_offset, h.next_offset), h.base_timestamp,
                   h.max_timestamp, h.max_timestamp, len(batch.data) - HEADER_SIZE, batch=batch)

    @classmethod
    def of_records(cls, records: list[Rec]) -> _Out:
        stamps = [r[1] for r in records]
        return cls(len(records), [r[0] for r in records], min(stamps), max(stamps),
                   stamps[-1], sum(len(r[3]) for r in records if r[3] is not None),
                   records=records)

    def singles(self, topic: str, partition: int) -> list[_Out]:
        """This produce's records one by one (to find the one the target refuses)."""
        if self.records is not None:
            return [_Out.of_records([r]) for r in self.records]
        assert self.batch is not None and self.batch.header is not None
        decoded = decode_batch(self.batch, self.batch.header.base_offset, topic, partition)
        return [_Out.of_records([(r.offset, r.timestamp, r.key, r.value, list(r.headers))])
                for r in decoded]


@dataclass
class _Target:
    """One target cluster's client and idempotent producer identity, for a task."""

    client: AIOKafkaClient
    raw: RawBatches
    producer_id: int
    epoch: int
    codec: int
    max_bytes: int


@dataclass
class _Lane:
    """One (remote topic, partition): its batches in flight and what was acknowledged."""

    target: _Target
    topic: str
    remote: str
    partition: int
    flow: str
    fetched_ms: float = field(default_factory=lambda: time.time() * 1000.0)
    seq: int = 0
    acked_any: bool = False
    in_flight: deque[_Out] = field(default_factory=deque)
    runs: list[OffsetRun] = field(default_factory=list)
    error: str | None = None
    records: int = 0
    value_bytes: int = 0
    min_ts: int = -1
    max_ts: int = -1
    last_ts: int = -1
    path: str = ""
    reason: str = ""
    failing_since: float | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.remote, self.partition)

    @property
    def depth(self) -> int:
        """Batches in flight at most: pipelining needs an idempotent producer."""
        return MAX_IN_FLIGHT if self.target.producer_id >= 0 else 1

    @property
    def sequence(self) -> int:
        return self.seq if self.target.producer_id >= 0 else -1

    async def send(self, out: _Out) -> None:
        if self.error is not None:
            return
        if not self.acked_any and self.in_flight:
            await self.drain()  # a new producer's first batch travels alone
        while len(self.in_flight) >= self.depth and self.error is None:
            await self._settle_one()
        if self.error is not None:
            return
        try:
            data = self._build(out)
        except _Refused as exc:
            await self._refused(out, [], exc)
            return
        out.seq = self.seq
        self.seq = next_sequence(self.seq, out.count)
        out.task = asyncio.ensure_future(self.target.raw.produce(self.tp, data))
        self.in_flight.append(out)

    def _build(self, out: _Out) -> bytearray | BatchParts:
        t = self.target
        if out.batch is not None:
            # The new header and the source's records section, copied once, into the
            # request (`kafka/produce_request.BatchParts`).
            return BatchParts(*rewrite_header(out.batch, producer_id=t.producer_id,
                                              producer_epoch=t.epoch,
                                              base_sequence=self.sequence))
        assert out.records is not None
        builder = DefaultRecordBatchBuilder(2, t.codec, 0, t.producer_id, t.epoch,
                                            self.sequence, 1 << 62)
        for i, (_, stamp, key, value, headers) in enumerate(out.records):
            builder.append(i, stamp, key, value, headers)
        data: bytearray = builder.build()
        if len(data) > t.max_bytes:
            raise _Refused("MSG_SIZE_TOO_LARGE",
                           f"the batch is {len(data)} bytes, above max.request.size "
                           f"{t.max_bytes}")
        return data

    async def drain(self) -> None:
        while self.in_flight and self.error is None:
            await self._settle_one()

    async def _settle_one(self) -> None:
        out = self.in_flight[0]
        assert out.task is not None
        try:
            base = await out.task
        except (KafkaError, RawBatchError, OSError) as exc:
            self.in_flight.popleft()
            await self._failed(out, exc)
            return
        self.in_flight.popleft()
        self.acked_any = True
        self.failing_since = None
        self._acked(out, base)

    def _acked(self, out: _Out, base: int) -> None:
        if isinstance(out.offsets, range):
            extend_runs(self.runs, [(out.offsets.start, out.count, base)])
        else:
            extend_runs(self.runs, offset_runs(out.offsets, range(base, base + out.count)))
        self.records += out.count
        self.value_bytes += out.nbytes
        self.min_ts = out.min_ts if self.min_ts < 0 else min(self.min_ts, out.min_ts)
        self.max_ts = max(self.max_ts, out.max_ts)
        self.last_ts = out.last_ts

    async def _failed(self, head: _Out, exc: BaseException) -> None:
        """`head` failed: settle those behind it, then send again what must go again."""
        behind = list(self.in_flight)
        self.in_flight.clear()
        answers = await asyncio.gather(*(o.task for o in behind if o.task is not None),
                                       return_exceptions=True)
        if any(not isinstance(a, BaseException) for a in answers):
            raise RuntimeError(
                f"{self.remote}-{self.partition}: the target wrote a batch after one it "
                f"refused ({exc}); nothing of this micro-batch is recorded")
        self.seq = head.seq
        code = getattr(exc, "error_code", None)
        if isinstance(code, int) and code in REFUSED:
            await self._refused(head, behind, _Refused(REFUSED[code], str(exc)))
            return
        retriable = (isinstance(exc, OSError) or getattr(exc, "retriable", False)
                     or (isinstance(code, int) and code > 0
                         and getattr(kafka_errors.for_code(code), "retriable", False)))
        now = time.monotonic()
        self.failing_since = self.failing_since or now
        if not retriable or now - self.failing_since > STALL_S:
            raise RuntimeError(f"could not deliver the batches of {self.remote!r} partition "
                               f"{self.partition} to the target: {exc}")
        await asyncio.sleep(0.1)
        self.target.client.force_metadata_update()
        for out in (head, *behind):
            await self.send(out)

    async def _refused(self, head: _Out, behind: list[_Out], exc: _Refused) -> None:
        if head.count == 1:
            what = f"target rejected the record: {exc}"
            self.error = rejected_record(what, self.flow, self.topic, self.partition,
                                         head.offsets[0], self.remote)
            return
        for out in (*head.singles(self.topic, self.partition), *behind):
            await self.send(out)

    def acks(self) -> PartitionAcks:
        acks = PartitionAcks(self.topic, self.partition, self.remote, list(self.runs),
                             self.error, flow=self.flow, copy_path=self.path,
                             copy_path_reason=self.reason)
        if self.records:
            acks.value_bytes = self.value_bytes
            acks.min_timestamp, acks.max_timestamp = self.min_ts, self.max_ts
            acks.last_timestamp = self.last_ts
            acks.fetched_ms = self.fetched_ms
        return acks


class BatchWriter:
    """A read task's writing on the batch path (`mirrorline_spark.copytask`): the batches
    and records of its partitions, sent to `sink`'s cluster on `loop` (shared with the
    task's fetches)."""

    def __init__(self, sink: SinkFeed, loop: asyncio.AbstractEventLoop) -> None:
        self._sink = sink
        self._loop = loop
        self._target: _Target | None = None
        self._lanes: dict[tuple[str, int], _Lane] = {}

    def stopped(self, topic: str, partition: int) -> bool:
        """Whether the target refused a record of this source partition (it stops)."""
        lane = self._lanes.get((self._sink.topics.get(topic, ""), partition))
        return lane is not None and lane.error is not None

    async def send_batch(self, topic: str, partition: int, batch: Batch, *, path: str,
                         reason: str) -> None:
        """Forward one source batch as it is (rewritten for the target)."""
        lane = await self._lane(topic, partition)
        lane.path, lane.reason = path, reason
        await lane.send(_Out.of_batch(batch))

    async def send_records(self, topic: str, partition: int, records: Sequence[Rec], *,
                           path: str, reason: str) -> None:
        """Batch `records` here (the record path), in batches of at most 1 MiB or the
        target's `max.request.size`."""
        if not records:
            return
        lane = await self._lane(topic, partition)
        lane.path, lane.reason = path, reason
        limit = min(BATCH_BYTES, lane.target.max_bytes)
        start, size = 0, 0
        for i, (_, _, key, value, headers) in enumerate(records):
            est = 21 + len(key or b"") + len(value or b"") + sum(
                len(k) + len(v or b"") + 10 for k, v in headers)
            if i > start and size + est > limit - HEADER_SIZE:
                await lane.send(_Out.of_records(list(records[start:i])))
                start, size = i, 0
            size += est
        if start < len(records):
            await lane.send(_Out.of_records(list(records[start:])))

    def finish(self) -> list[PartitionAcks]:
        """Wait for every answer; the acknowledgements of every partition written."""
        for lane in self._lanes.values():
            self._loop.run_until_complete(lane.drain())
        return [lane.acks() for _, lane in sorted(self._lanes.items())]

    async def aclose(self) -> None:
        """Close the client (what was in flight is given up: see `batchread.run_down`)."""
        target, self._target = self._target, None
        if target is not None:
            await target.client.close()

    async def _connected(self) -> _Target:
        """The task's one client and producer of the target (its ranges share them)."""
        return self._target or await self._connect()

    async def _connect(self) -> _Target:
        java = self._sink.client
        kwargs, _ = producer_kwargs(java)
        client = AIOKafkaClient(**client_kwargs(kwargs))
        try:
            await client.bootstrap()
            raw = RawBatches(client)
            producer_id, epoch = await _producer_id(raw, java, kwargs)
        except BaseException:
            await client.close()
            raise
        codec = _CODECS[str(kwargs.get("compression_type") or "none")]
        self._target = _Target(client, raw, producer_id, epoch, codec,
                               int(kwargs.get("max_request_size", DEFAULT_MAX_REQUEST_SIZE)))
        return self._target

    async def _lane(self, topic: str, partition: int) -> _Lane:
        remote = self._sink.topics.get(topic)
        if remote is None:
            raise ValueError(f"no remote topic given for source topic {topic!r} "
                             f"(flow {self._sink.flow})")
        lane = self._lanes.get((remote, partition))
        if lane is None:
            lane = self._lanes[(remote, partition)] = _Lane(
                await self._connected(), topic, remote, partition, self._sink.flow)
        return lane


async def _producer_id(raw: RawBatches, java: Mapping[str, str], kwargs: Mapping[str, Any]
                       ) -> tuple[int, int]:
    """The task's idempotent producer id and epoch; (-1, -1) for a plain producer: when
    `enable.idempotence` is false, or when the target refuses idempotent producers and
    idempotence was only the default (as the replicator's data producer decides)."""
    if not kwargs.get("enable_idempotence", True) or kwargs.get("acks", "all") != "all":
        return -1, -1
    try:
        return await raw.init_producer_id()
    except RawBatchError:
        if not idempotent_by_default(java, kwargs):
            raise
        return -1, -1
