"""How a partition pump reacts when the target refuses records or is briefly unavailable.

The local test broker (Tansu) accepts records of any size and never answers
MESSAGE_TOO_LARGE, so a real rejection cannot be provoked here. These tests therefore
use a stand-in for the producer that fails exactly the way aiokafka reports Kafka's
errors (the only mock in the data-path tests); everything else is the real pump.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import (
    KafkaConnectionError,
    MessageSizeTooLargeError,
    OutOfOrderSequenceNumber,
)

from mirrorline.core.backoff import Backoff
from mirrorline.core.tail_match import Landed
from mirrorline.replicator.delivery import DeliveryLoop
from mirrorline.replicator.pump import MAX_UNREADABLE_CHECKS, Delivered, PartitionPump, PumpState

MAX_VALUE = 1000


@dataclass
class Rec:
    offset: int
    value: bytes | None
    key: bytes | None = b"k"
    timestamp: int = 1_700_000_000_000
    headers: tuple[tuple[str, bytes], ...] = ()
    topic: str = "orders"
    partition: int = 0


@dataclass
class Meta:
    offset: int


@dataclass
class Batch:
    capacity: int
    records: list[tuple[Any, ...]] = field(default_factory=list)

    def append(self, *, timestamp: int, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes]]) -> object | None:
        if len(self.records) >= self.capacity:
            return None
        self.records.append((key, value, tuple(headers), timestamp))
        return object()


class AllPartitions:
    """A producer's client and metadata that know every partition (the stand-in writes
    wherever it is told)."""

    def __init__(self) -> None:
        self.cluster = self

    def partitions_for_topic(self, topic: str) -> range:
        return range(1 << 16)

    async def force_metadata_update(self) -> bool:
        return True


class StandInProducer:
    """Writes into `log`; refuses a batch holding a value over MAX_VALUE bytes like Kafka
    (MESSAGE_TOO_LARGE); can fail the next N sends with a connection error."""

    def __init__(self, capacity: int = 4) -> None:
        self.capacity = capacity
        self.log: dict[int, list[tuple[Any, ...]]] = {}
        self.connection_failures = 0
        self.sends = 0
        self.client = AllPartitions()

    def create_batch(self) -> Batch:
        return Batch(self.capacity)

    async def send_batch(self, batch: Batch, topic: str, *, partition: int
                         ) -> asyncio.Future[Meta]:
        self.sends += 1
        future: asyncio.Future[Meta] = asyncio.get_running_loop().create_future()
        if self.connection_failures:
            self.connection_failures -= 1
            future.set_exception(KafkaConnectionError("broker went away"))
        elif any(v is not None and len(v) > MAX_VALUE for _, v, _, _ in batch.records):
            future.set_exception(MessageSizeTooLargeError())
        else:
            log = self.log.setdefault(partition, [])
            future.set_result(Meta(len(log)))
            log.extend(batch.records)
        return future


class Acks:
    def __init__(self) -> None:
        self.calls: list[tuple[int, list[int], int]] = []

    def __call__(self, pump: PartitionPump, delivered: Delivered) -> None:
        self.calls.append((pump.partition, list(delivered.shipment.offsets()),
                           delivered.base_offset))


def pump_for(partition: int = 0) -> PartitionPump:
    return PartitionPump(flow="primary->backup", source_topic="orders",
                         target_topic="primary.orders", partition=partition, next_offset=0,
                         backoff=Backoff(initial=0.01, maximum=0.02))


@contextlib.asynccontextmanager
async def delivering(producer: StandInProducer, *pumps: PartitionPump
                     ) -> AsyncIterator[Acks]:
    """The real delivery loop over `pumps`; fetching is a no-op (records are offered)."""
    acks = Acks()

    async def fetch(timeout_ms: int) -> None:
        await asyncio.sleep(min(timeout_ms, 10) / 1000)

    loop = DeliveryLoop(producer, {TopicPartition("orders", p.partition): p  # type: ignore[arg-type]
                                   for p in pumps}, fetch=fetch, on_ack=acks, poll_timeout_ms=10)
    task = asyncio.create_task(loop.run())
    try:
        yield acks
    finally:
        await loop.drain(1.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def settled(pump: PartitionPump, until: int, timeout: float = 5.0) -> None:
    async def done() -> None:
        while (pump.next_offset < until and pump.state is PumpState.RUNNING) or pump.in_flight:  # noqa: ASYNC110 - the pump is plain state, nothing to await
            await asyncio.sleep(0.01)
    await asyncio.wait_for(done(), timeout)


async def test_a_rejected_record_stops_only_its_partition_after_the_records_before_it() -> None:
    producer = StandInProducer()
    bad, good = pump_for(0), pump_for(1)
    bad.offer([Rec(i, b"x" * (5000 if i == 6 else 10)) for i in range(10)])  # type: ignore[list-item]
    good.offer([Rec(i, b"y", partition=1) for i in range(10)])  # type: ignore[list-item]
    async with delivering(producer, bad, good):
        await settled(bad, 10)
        await settled(good, 10)
    assert bad.state is PumpState.ERROR
    assert bad.error is not None
    for detail in ("orders", "partition 0", "offset 6"):
        assert detail in bad.error
    # Offsets 0..5 made it, in order, exactly once; nothing after the bad record did.
    assert [v for _, v, _, _ in producer.log[0]] == [b"x" * 10] * 6
    assert bad.next_offset == 6
    assert good.state is PumpState.RUNNING and good.next_offset == 10
    assert len(producer.log[1]) == 10


async def test_records_offered_after_the_failure_are_not_sent() -> None:
    producer = StandInProducer()
    pump = pump_for()
    pump.offer([Rec(0, b"ok"), Rec(1, b"z" * 5000)])  # type: ignore[list-item]
    async with delivering(producer, pump):
        await settled(pump, 2)
        pump.offer([Rec(2, b"late")])  # type: ignore[list-item]
        await asyncio.sleep(0.05)
    assert pump.state is PumpState.ERROR
    assert [v for _, v, _, _ in producer.log[0]] == [b"ok"]


async def test_a_connection_failure_is_retried_without_loss_or_reordering() -> None:
    producer = StandInProducer(capacity=3)
    producer.connection_failures = 2
    pump = pump_for()
    pump.offer([Rec(i, str(i).encode()) for i in range(7)])  # type: ignore[list-item]
    async with delivering(producer, pump) as acks:
        await settled(pump, 7)
    assert pump.state is PumpState.RUNNING and pump.error is None
    assert [v for _, v, _, _ in producer.log[0]] == [str(i).encode() for i in range(7)]
    assert producer.sends == 3 + 2  # three batches of at most 3, two failed attempts
    # Acks report where each batch landed downstream.
    assert acks.calls == [(0, [0, 1, 2], 0), (0, [3, 4, 5], 3), (0, [6], 6)]


async def test_one_batch_in_flight_per_partition_keeps_order() -> None:
    producer = StandInProducer(capacity=2)
    pump = pump_for()
    pump.offer([Rec(i, str(i).encode()) for i in range(3)])  # type: ignore[list-item]
    pump.offer([Rec(i, str(i).encode()) for i in range(3, 6)])  # type: ignore[list-item]
    async with delivering(producer, pump) as acks:
        await settled(pump, 6)
    # Batches fill across fetched chunks, one at a time, in order.
    assert [offsets for _, offsets, _ in acks.calls] == [[0, 1], [2, 3], [4, 5]]
    assert [v for _, v, _, _ in producer.log[0]] == [str(i).encode() for i in range(6)]


async def test_repeated_records_from_a_refetch_are_not_copied_twice() -> None:
    producer = StandInProducer()
    pump = pump_for()
    pump.offer([Rec(i, b"v") for i in range(3)])  # type: ignore[list-item]
    pump.offer([Rec(i, b"v") for i in range(1, 5)])  # type: ignore[list-item]
    async with delivering(producer, pump):
        await settled(pump, 5)
    assert len(producer.log[0]) == 5


def test_a_failed_batch_with_a_known_target_end_is_checked_before_it_is_sent_again() -> None:
    """No producer involved: the pump's own bookkeeping around a failed produce."""
    producer = StandInProducer(capacity=4)
    pump = pump_for()
    pump.target_end = 100  # where this partition's copies end on the target
    pump.offer([Rec(i, str(i).encode()) for i in range(6)])  # type: ignore[list-item]
    pump.build(producer)  # records 0..3 in flight
    pump.failed(KafkaConnectionError("broker went away"), now=0.0)
    assert pump.unverified is not None and [r.offset for r in pump.unverified] == [0, 1, 2, 3]
    assert not pump.ready(now=100.0), "nothing may be sent before the target was checked"
    assert pump.check_due(now=100.0) and "checking the target" in (pump.error or "")
    # The target turned out to hold 0 and 1 (at 100, 101): only 2.. is sent again.
    delivered = pump.checked(Landed(2, 100, 0), end=102, now=100.0)
    assert delivered is not None and list(delivered.shipment.offsets()) == [0, 1]
    assert delivered.base_offset == 100 and pump.next_offset == 2 and pump.target_end == 102
    assert pump.ready(now=100.0)
    pump.build(producer)
    assert list(pump.sending.offsets() if pump.sending else []) == [2, 3]  # then 4, 5: in order


def test_a_target_that_cannot_be_read_keeps_the_records_waiting() -> None:
    producer = StandInProducer(capacity=4)
    pump = pump_for()
    pump.target_end = 0
    pump.offer([Rec(0, b"a")])  # type: ignore[list-item]
    pump.build(producer)
    pump.failed(KafkaConnectionError("down"), now=0.0)
    pump.check_failed("the target does not answer", now=1.0)
    assert pump.unverified is not None and not pump.ready(now=1.0)
    assert "cannot check the target" in (pump.error or "")


def test_a_stopped_pump_forgets_unverified_records() -> None:
    producer = StandInProducer(capacity=4)
    pump = pump_for()
    pump.target_end = 0
    pump.offer([Rec(0, b"a")])  # type: ignore[list-item]
    pump.build(producer)
    pump.failed(KafkaConnectionError("down"), now=0.0)
    pump.stop()
    assert pump.unverified is None and pump.idle and pump.next_offset == 0


def test_a_target_that_answers_but_cannot_serve_the_range_is_given_up_on_loudly() -> None:
    producer = StandInProducer(capacity=4)
    pump = pump_for()
    pump.target_end = 10
    pump.offer([Rec(0, b"a"), Rec(1, b"b")])  # type: ignore[list-item]
    pump.build(producer)
    pump.failed(KafkaConnectionError("down"), now=0.0)
    for attempt in range(MAX_UNREADABLE_CHECKS - 1):
        pump.check_failed("reading took too long", now=float(attempt), answered=True)
        assert pump.unverified is not None
    pump.check_failed("reading took too long", now=5.0, answered=True)
    assert pump.unverified is None and pump.target_end is None
    assert "may be on the target twice" in (pump.error or "")
    pump.build(producer)
    assert list(pump.sending.offsets() if pump.sending else []) == [0, 1]


class HeldProducer(StandInProducer):
    """The stand-in, acknowledging only when told (`release`), as a broker answering
    produce requests in turn; `fail_next` fails the next send the moment it is queued."""

    def __init__(self, capacity: int = 2) -> None:
        super().__init__(capacity)
        self.held: list[tuple[asyncio.Future[Meta], list[tuple[Any, ...]]]] = []
        self.fail_next: BaseException | None = None
        self.written: list[tuple[Any, ...]] = []

    async def send_batch(self, batch: Batch, topic: str, *, partition: int
                         ) -> asyncio.Future[Meta]:
        self.sends += 1
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        future: asyncio.Future[Meta] = asyncio.get_running_loop().create_future()
        self.held.append((future, batch.records))
        return future

    def release(self, index: int, exc: BaseException | None = None) -> None:
        future, records = self.held[index]
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(Meta(len(self.written)))
            self.written.extend(records)


async def wait_until(condition: Any, timeout: float = 5.0) -> None:
    async def done() -> None:
        while not condition():  # noqa: ASYNC110 - plain state, nothing to await
            await asyncio.sleep(0.005)
    await asyncio.wait_for(done(), timeout)


async def test_a_pipelining_pump_sends_its_window_before_the_first_ack_and_settles_in_order(
        ) -> None:
    """With a window of 3 (a producer keeping 3 batches of a partition in flight) three
    batches leave at once; an acknowledgement that ends before an older one waits for it."""
    producer = HeldProducer(capacity=2)
    pump = pump_for()
    pump.window = 3
    pump.offer([Rec(i, str(i).encode()) for i in range(8)])  # type: ignore[list-item]
    async with delivering(producer, pump) as acks:
        await wait_until(lambda: len(producer.held) == 3)
        assert pump.in_flight_count == 3  # and no fourth before an acknowledgement
        producer.release(1)
        producer.release(2)
        await asyncio.sleep(0.05)
        assert acks.calls == [], "a batch is settled only after the ones before it"
        producer.release(0)
        await wait_until(lambda: len(acks.calls) == 3)
        await wait_until(lambda: len(producer.held) == 4)
        producer.release(3)
        await settled(pump, 8)
    assert [offsets for _, offsets, _ in acks.calls] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert pump.next_offset == 8 and pump.error is None


async def test_a_failed_batch_settles_every_batch_sent_after_it_once_they_ended() -> None:
    """The oldest is refused while two more travel: none of the three counts as delivered
    until all have ended; then all go again, in order."""
    producer = HeldProducer(capacity=2)
    pump = pump_for()
    pump.window = 3
    pump.target_end = 50
    failures: list[BaseException] = []
    pump.offer([Rec(i, str(i).encode()) for i in range(6)])  # type: ignore[list-item]

    async def fetch(timeout_ms: int) -> None:
        await asyncio.sleep(min(timeout_ms, 10) / 1000)

    loop = DeliveryLoop(producer, {TopicPartition("orders", 0): pump},  # type: ignore[arg-type]
                        fetch=fetch, on_ack=Acks(), poll_timeout_ms=10,
                        on_failed=lambda _p, exc: failures.append(exc))
    task = asyncio.create_task(loop.run())
    try:
        await wait_until(lambda: len(producer.held) == 3)
        producer.release(0, MessageSizeTooLargeError())
        await asyncio.sleep(0.05)
        assert pump.unverified is None and pump.in_flight_count == 3 and not failures
        producer.release(1, OutOfOrderSequenceNumber())  # the broker lacks their predecessor
        producer.release(2, OutOfOrderSequenceNumber())
        await wait_until(lambda: bool(failures))
        # The owner hears of the refusal and of the out-of-order ones (which replace the
        # producer), once each; all three go again, in order, and land once.
        assert [type(e) for e in failures] == [MessageSizeTooLargeError,
                                               OutOfOrderSequenceNumber]
        while pump.next_offset < 6:
            await wait_until(lambda: len(producer.held) > 3 and not all(
                f.done() for f, _ in producer.held))
            for i, (f, _) in enumerate(producer.held):
                if not f.done():
                    producer.release(i)
            await asyncio.sleep(0.01)
        assert [v for _, v, _, _ in producer.written] == [str(i).encode() for i in range(6)]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_send_whose_predecessor_was_not_queued_is_not_queued() -> None:
    """Order: batch 2 must never be queued without batch 1 before it."""
    producer = HeldProducer(capacity=2)
    producer.fail_next = KafkaConnectionError("cannot queue")
    pump = PartitionPump(flow="primary->backup", source_topic="orders",
                         target_topic="primary.orders", partition=0, next_offset=0,
                         backoff=Backoff(initial=0.5, maximum=0.5))  # room to look first
    pump.window = 3
    pump.offer([Rec(i, str(i).encode()) for i in range(6)])  # type: ignore[list-item]
    async with delivering(producer, pump):
        await wait_until(lambda: pump.error is not None)
        assert producer.held == [] and producer.sends == 1
        await wait_until(lambda: len(producer.held) == 3)  # sent again after the backoff
        for i in range(3):
            producer.release(i)
        await settled(pump, 6)
    assert [v for _, v, _, _ in producer.written] == [str(i).encode() for i in range(6)]


def test_a_rejected_batch_sends_its_successors_again_after_its_halves() -> None:
    producer = StandInProducer(capacity=2)
    pump = pump_for()
    pump.window = 3
    pump.offer([Rec(i, str(i).encode()) for i in range(6)])  # type: ignore[list-item]
    for _ in range(3):
        assert pump.ready(now=0.0)
        pump.build(producer)
    assert not pump.ready(now=0.0)
    pump.failed(MessageSizeTooLargeError(), now=0.0)
    sent = []
    while pump.ready(now=0.0):
        pump.build(producer)
        sent.append(list(pump.sending.offsets() if pump.sending else []))
        pump.acknowledged(len(sent))
    assert sent == [[0], [1], [2, 3], [4, 5]]


def test_a_failed_group_is_checked_as_one_and_sent_again_in_its_batches() -> None:
    """Three batches in flight fail together: the target is checked for all of them; what
    it lacks goes again in the same bounds (a batch split after a refusal stays split)."""
    producer = StandInProducer(capacity=2)
    pump = pump_for()
    pump.window = 3
    pump.target_end = 100
    pump.offer([Rec(i, str(i).encode()) for i in range(6)])  # type: ignore[list-item]
    for _ in range(3):
        pump.build(producer)
    pump.failed(KafkaConnectionError("broker went away"), now=0.0)
    assert [r.offset for r in pump.unverified or []] == [0, 1, 2, 3, 4, 5]
    # The target holds record 0 only: 1 goes alone (the rest of its batch), then 2-3, 4-5.
    delivered = pump.checked(Landed(1, 100, 0), end=101, now=0.0)
    assert delivered is not None and list(delivered.shipment.offsets()) == [0]
    sent = []
    while pump.ready(now=0.0):
        pump.build(producer)
        sent.append(list(pump.sending.offsets() if pump.sending else []))
        pump.acknowledged(101 + len(sent))
    assert sent == [[1], [2, 3], [4, 5]]
