"""Several produce requests per broker in flight, and several batches of one partition.

aiokafka's `Sender` keeps one produce request per broker in flight and mutes a partition
while its batch travels; a broker takes one batch per partition in a produce request, so
every partition moves one batch per round trip. Kafka's Java producer and librdkafka keep
up to `max.in.flight.requests.per.connection` (default 5) requests in flight per
connection, with several batches of one partition among them, kept in order by
idempotence: the broker checks each batch's sequence and refuses one whose predecessor it
has not written (OUT_OF_ORDER_SEQUENCE_NUMBER).

`install` gives an idempotent, non-transactional `AIOKafkaProducer` (before its start) a
`PipeliningSender`: aiokafka's own sender loop, whose "nodes in flight" and "muted
partitions" sets count instead, so a node takes another request and a partition another
batch until the limit is reached (`CountingSet`). Batches still leave in sequence order:
aiokafka drains the oldest batch of a partition first and numbers it as it drains. A
partition's first batch of a new producer travels alone (`batch_limit`): the broker takes
a new producer's first batch whatever its sequence, so only once it holds one does it
refuse a batch whose predecessor it lacks.

Retries keep that order, as in Kafka's Java producer. aiokafka queues a batch that failed
retriably again after a backoff, at the head of its partition, keeping its sequence; with
batches after it in flight that would be too early (one of them could be written after
it is queued) and, with several failed, in the wrong order. So a partition with a failed
batch is held (nothing new of it leaves) until none of its batches travels; then every
failed batch of it is queued again in the order they first left, and the partition is
released. The broker writes each in turn, or answers a batch it wrote already (the
failure was only the answer's) with its first offsets. A batch refused
OUT_OF_ORDER_SEQUENCE_NUMBER because its predecessor is among those retried is retried
with them. Any other failure fails the batch, as aiokafka does, and nothing more of its
partition is sent: batches after it in flight are refused by the broker as out of order,
and those not sent yet fail the same way here, so the flow replaces the producer and
checks the target before sending those records again (docs/batch-path.md).

Transactional producers are not pipelined (AddPartitionsToTxn muting stays aiokafka's);
nor are producers without idempotence, where nothing would keep a retried batch from
landing after its successor.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Any, Final

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, OutOfOrderSequenceNumber
from aiokafka.producer.sender import Sender, SendProduceReqHandler

from mirrorline.core.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["KEY", "CountingSet", "PipeliningSender", "batch_limit", "depth", "install",
           "max_in_flight", "may_retry"]

#: Kafka's producer setting, and its default.
KEY: Final = "max.in.flight.requests.per.connection"
DEFAULT: Final = 5
#: What a broker remembers per producer and partition to tell duplicates (Kafka's limit
#: for idempotent producers).
IDEMPOTENT_MAX: Final = 5


def max_in_flight(java: Mapping[str, str], *, idempotent: bool) -> int:
    """`max.in.flight.requests.per.connection` of a producer config (Java names); above 5
    with idempotence is refused, as Kafka's producer refuses it."""
    raw = java.get(KEY)
    if raw is None:
        return DEFAULT
    value = raw.strip()
    if not value.lstrip("+").isdigit() or int(value) < 1:
        raise ConfigError(KEY, f"invalid value {raw!r}: must be a whole number, at least 1")
    number = int(value)
    if idempotent and number > IDEMPOTENT_MAX:
        raise ConfigError(KEY, f"= {number}, but an idempotent producer allows at most "
                               f"{IDEMPOTENT_MAX} (the batches a broker remembers per "
                               "producer and partition); set enable.idempotence = false "
                               "to allow more")
    return number


def may_retry(batches_in_flight: int) -> bool:
    """Failed batches of a partition are queued again once none of its batches travels
    (counting the one just ended): one still on its way could land before them."""
    return batches_in_flight <= 1


def batch_limit(limit: int, *, written: bool) -> int:
    """How many batches of a partition may travel at once: one until the broker wrote one
    of this producer's batches there. A broker takes a new producer's first batch
    whatever its sequence number, so were that batch refused, the next one would be
    written in its place; once it holds one, it refuses any batch but the next in line."""
    return limit if written else 1


class CountingSet:
    """A set whose members were added several times: `x in s` once `x` was added `limit`
    times more than removed (once, for a member not in `proven` when that is given), or
    while it is held. aiokafka's sender uses it as its nodes in flight (`ignore_nodes`)
    and muted partitions."""

    def __init__(self, limit: int, proven: set[Hashable] | None = None) -> None:
        self.limit = limit
        self._proven = proven
        self._counts: Counter[Hashable] = Counter()
        self._held: set[Hashable] = set()

    def _limit(self, item: Hashable) -> int:
        if self._proven is None:
            return self.limit
        return batch_limit(self.limit, written=item in self._proven)

    def add(self, item: Hashable) -> None:
        self._counts[item] += 1

    def remove(self, item: Hashable) -> None:
        left = self._counts[item] - 1
        if left < 0:
            raise KeyError(item)
        if left:
            self._counts[item] = left
        else:
            del self._counts[item]

    def count(self, item: Hashable) -> int:
        return self._counts.get(item, 0)

    def hold(self, item: Hashable) -> None:
        """Count `item` as full until `release`, whatever its count."""
        self._held.add(item)

    def release(self, item: Hashable) -> None:
        self._held.discard(item)

    def full(self) -> set[Hashable]:
        return {i for i, n in self._counts.items() if n >= self._limit(i)} | self._held

    def __contains__(self, item: object) -> bool:
        if item in self._held:
            return True
        count = self._counts.get(item, 0)
        return bool(count) and count >= self._limit(item)

    def __bool__(self) -> bool:
        return bool(self._counts) or bool(self._held)

    def __len__(self) -> int:
        return len(self.full())

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.full())

    def __or__(self, other: Iterable[Hashable]) -> set[Hashable]:
        return self.full() | set(other)


class _PipelinedProduce(SendProduceReqHandler):  # type: ignore[misc]
    """aiokafka's produce handler, leaving the retries to `PipeliningSender`."""

    def _can_retry(self, error: Any, batch: Any) -> bool:
        sender: PipeliningSender = self._sender
        if isinstance(error, OutOfOrderSequenceNumber) and batch.tp in sender.retrying:
            return True  # its predecessor is to be sent again first: so is it
        return bool(super()._can_retry(error, batch))

    async def do(self, node_id: int) -> None:
        """aiokafka's `do` up to the retries: the batches to retry stay in
        `_to_reenqueue`, for the sender to queue again in order."""
        request = self.create_request()
        try:
            response = await self._client.send(node_id, request)
        except KafkaError as err:
            log.warning("Got error produce response: %s", err)
            if getattr(err, "invalid_metadata", False):
                self._client.force_metadata_update()
            for batch in self._batches.values():
                if not self._can_retry(err, batch):
                    batch.failure(exception=err)
                else:
                    self._to_reenqueue.append(batch)
        else:
            if request.required_acks == 0:
                for batch in self._batches.values():
                    batch.done_noack()
            else:
                self.handle_response(response)


class PipeliningSender(Sender):  # type: ignore[misc]
    """aiokafka's sender with up to `limit` produce requests per node and batches per
    partition in flight, retrying in sequence order (module doc)."""

    def __init__(self, client: Any, *, limit: int, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.limit = limit
        #: Partitions where the broker wrote a batch of this producer (`batch_limit`).
        self.written: set[Hashable] = set()
        self._in_flight = CountingSet(limit)
        self._muted_partitions = CountingSet(limit, self.written)
        #: Partitions with batches to send again, held until none of theirs travels.
        self.retrying: dict[Any, list[Any]] = {}
        #: The order batches left in, first departure (the order of their sequences).
        self._order: dict[Any, int] = {}
        self._departures = itertools.count()
        #: Partitions with a batch failed for good: nothing more of them is sent (module
        #: doc); their owner replaces the producer.
        self.refused: set[Hashable] = set()

    def batches_in_flight(self, tp: Any) -> int:
        muted: CountingSet = self._muted_partitions
        return muted.count(tp)

    async def _send_produce_req(self, node_id: int, drained: dict[Any, Any]) -> None:
        batches = {}
        for tp, batch in drained.items():
            if tp in self.refused:  # numbered after a batch that failed: never sent
                batch.failure(exception=OutOfOrderSequenceNumber())
            else:
                batches[tp] = batch
        if not batches:
            self._in_flight.remove(node_id)
            for tp in drained:
                self._muted_partitions.remove(tp)
            return
        for batch in batches.values():
            if batch not in self._order:
                self._order[batch] = next(self._departures)
                batch.future.add_done_callback(
                    lambda _f, b=batch: self._order.pop(b, None))
        handler = _PipelinedProduce(self, batches)
        try:
            await handler.do(node_id)
        finally:
            self._in_flight.remove(node_id)
            for tp in drained:
                self._muted_partitions.remove(tp)
            retried = {id(batch) for batch in handler._to_reenqueue}
            for tp, batch in batches.items():
                future = batch.future
                if not future.done() or future.cancelled():
                    continue
                if future.exception() is None:
                    self.written.add(tp)
                elif id(batch) not in retried:
                    self.refused.add(tp)
        for batch in handler._to_reenqueue:
            log.warning("retrying the batch of %s-%d in sequence order", batch.tp.topic,
                        batch.tp.partition)
            self.retrying.setdefault(batch.tp, []).append(batch)
            self._muted_partitions.hold(batch.tp)
        due = [tp for tp in batches if tp in self.retrying and may_retry(
            self.batches_in_flight(tp) + 1)]
        if not due:
            return
        await asyncio.sleep(self._retry_backoff)
        for tp in due:
            waiting = self.retrying.pop(tp, None)
            if waiting is None:
                continue
            for batch in sorted(waiting, key=lambda b: self._order.get(b, -1), reverse=True):
                if not batch.future.done():  # else failed meanwhile (an abort)
                    self._message_accumulator.reenqueue(batch)
            self._muted_partitions.release(tp)
        await self.client._maybe_wait_metadata()


def install(producer: AIOKafkaProducer, limit: int) -> int:
    """Give `producer` (not started yet) a sender with `limit` requests per node in flight;
    returns the depth it got: 1 (aiokafka's own sender, kept) for a limit of 1, a
    transactional producer or one without idempotence."""
    inner: Any = producer
    txn = inner._txn_manager
    if limit <= 1 or txn is None or txn.transactional_id is not None:
        return 1
    old: Sender = inner._sender
    inner._sender = PipeliningSender(
        old.client, limit=limit, acks=old._acks, txn_manager=txn,
        retry_backoff_ms=old._retry_backoff * 1000,
        message_accumulator=old._message_accumulator,
        request_timeout_ms=old._request_timeout_ms)
    return limit


def depth(producer: Any) -> int:
    """How many batches of one partition `producer` keeps in flight."""
    sender = getattr(producer, "_sender", None)
    return sender.limit if isinstance(sender, PipeliningSender) else 1
