"""Source batches in a pump: forwarded as they are, acknowledged by their header, and taken
apart into records only when the target did not take them.

The batches are Kafka's own (`data/kafka_batches.json`, made by Kafka's Java code). The
producer is a stand-in that writes what it is sent into a list, and can fail sends the
way aiokafka reports Kafka's errors (as in `test_pump.py`); the pump, the delivery loop
and `SourceBatchBuilder` (what aiokafka's producer is handed) are the real ones.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError
from aiokafka.record.default_records import DefaultRecordBatch
from test_pump import Batch, Meta, delivering, pump_for, settled

from mirrorline.core.batches import Batch as SourceBytes
from mirrorline.core.batches import parse_header, rewrite, split
from mirrorline.kafka.batchbuilder import SourceBatchBuilder
from mirrorline.replicator.shipment import SourceBatch

FIXTURES = pathlib.Path(__file__).parent / "data" / "kafka_batches.json"


def kafka_batch(name: str, base_offset: int) -> SourceBytes:
    """Kafka's batch `name`, placed at `base_offset` as a fetch from the source shows it."""
    case = next(c for c in json.loads(FIXTURES.read_text())["cases"] if c["name"] == name)
    placed = rewrite(split(bytes.fromhex(case["bytes"])).batches[0], base_offset=base_offset)
    return split(bytes(placed)).batches[0]


def source(name: str, base_offset: int) -> SourceBatch:
    return SourceBatch(kafka_batch(name, base_offset), "orders", 0)


def records_of(data: bytes) -> list[tuple[Any, ...]]:
    return [(r.key, r.value, tuple(r.headers), r.timestamp) for r in DefaultRecordBatch(data)]


class BatchTarget:
    """Takes record batches and source batches; `refuse_source_over` bytes: refuses a source
    batch that large as MESSAGE_TOO_LARGE (a target topic's max.message.bytes)."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.sends: list[str] = []
        self.connection_failures = 0
        self.refuse_source_over: int | None = None
        self.codecs: list[int] = []
        self.client = self

        class _Cluster:
            def partitions_for_topic(self, topic: str) -> range:
                return range(8)
        self.cluster = _Cluster()

    async def force_metadata_update(self) -> bool:
        return True

    def create_batch(self) -> Batch:
        return Batch(capacity=100)

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> asyncio.Future[Meta]:
        future: asyncio.Future[Meta] = asyncio.get_running_loop().create_future()
        kind = "source" if isinstance(batch, SourceBatchBuilder) else "records"
        self.sends.append(kind)
        if self.connection_failures:
            self.connection_failures -= 1
            future.set_exception(KafkaConnectionError("broker went away"))
            return future
        if kind == "source":
            if self.refuse_source_over is not None and batch.size() > self.refuse_source_over:
                future.set_exception(MessageSizeTooLargeError())
                return future
            data = batch.sent_bytes()
            self.codecs.append(parse_header(data).compression)
            written = records_of(data)
        else:
            written = [(k, v, h, t) for k, v, h, t in batch.records]
        future.set_result(Meta(len(self.log)))
        self.log.extend(written)
        return future


async def test_source_batches_go_as_they_are_and_move_the_partition_by_their_header() -> None:
    target = BatchTarget()
    pump = pump_for()
    first, second = source("plain-lz4", 0), source("plain-zstd", 3)
    pump.offer_fetch([first, second], next_offset=6)
    async with delivering(target, pump) as acks:  # type: ignore[arg-type]
        await settled(pump, until=6)
    assert target.sends == ["source", "source"] and target.codecs == [3, 4]
    assert target.log == records_of(bytes(first.batch.data)) + records_of(
        bytes(second.batch.data))
    assert (pump.next_offset, pump.target_end, pump.records_replicated) == (6, 6, 6)
    assert acks.calls == [(0, [0, 1, 2], 0), (0, [3, 4, 5], 3)]


async def test_a_source_batch_that_failed_goes_again_as_records_before_the_next_one() -> None:
    """A failed source batch is decoded and sent again as records (checked first where the
    target's end is known); the batch after it, already built, waits its turn."""
    target = BatchTarget()
    target.connection_failures = 1
    pump = pump_for()
    first, second = source("plain-gzip", 0), source("plain-none", 3)
    pump.offer_fetch([first, second], next_offset=6)
    async with delivering(target, pump):  # type: ignore[arg-type]
        await settled(pump, until=6)
    assert target.sends == ["source", "records", "source"]
    assert target.log == records_of(bytes(first.batch.data)) + records_of(
        bytes(second.batch.data))
    assert pump.next_offset == 6 and pump.state.value == "running"


async def test_a_source_batch_too_large_for_the_target_is_rebatched() -> None:
    """The target topic's max.message.bytes is below the source's: the batch is decoded and
    its records re-batched, none lost, none twice."""
    target = BatchTarget()
    big = source("idempotent-zstd", 10)
    target.refuse_source_over = big.batch.header.size - 1  # type: ignore[union-attr]
    pump = pump_for()
    pump.next_offset = pump.fetch_position = 10
    pump.offer_fetch([big], next_offset=16)
    async with delivering(target, pump) as acks:  # type: ignore[arg-type]
        await settled(pump, until=16)
    assert target.sends == ["source", "records"]
    assert target.log == records_of(bytes(big.batch.data))
    assert acks.calls == [(0, [10, 11, 12, 13, 14, 15], 0)]


def test_the_producer_state_and_transactional_bit_land_in_the_header_only() -> None:
    batch = kafka_batch("idempotent-zstd", 1000)
    plain = SourceBatchBuilder(batch)
    assert (plain.record_count(), plain.size(), plain.closed()) == (6, len(batch.data), True)
    assert plain.append(timestamp=0, key=b"k", value=b"v") is None
    header = parse_header(plain.sent_bytes())
    assert (header.base_offset, header.producer_id, header.base_sequence,
            header.is_transactional) == (0, -1, -1, False)
    txn = SourceBatchBuilder(batch, transactional=True)
    txn._set_producer_state(42, 3, 17)
    data = txn.sent_bytes()
    header = parse_header(data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence,
            header.is_transactional, header.partition_leader_epoch) == (42, 3, 17, True, -1)
    assert DefaultRecordBatch(data).validate_crc()
    assert records_of(data) == records_of(bytes(batch.data))

