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
aiokafka drains the oldest batch of a partition first and numbers it as it drains.

The failure rule: aiokafka retries a batch that failed retriably by queueing it again
after a backoff. That is safe only when nothing of its partition travels after it, so a
pipelined partition's failed batch is retried so only when it was the one batch of its
partition in flight (and the partition takes nothing new until it is queued again).
Otherwise -- and for every batch of the producer after such a failure -- the batch fails
with `PipelineBroken`: its successors in flight are refused by the broker as out of order
(or were written, if it was), the producer's sequence numbers no longer match the
broker's, and its owner must replace the producer and check the target before sending
those records again (the replicator's flow does; docs/batch-path.md).

Transactional producers are not pipelined (AddPartitionsToTxn muting stays aiokafka's);
nor are producers without idempotence, where nothing would keep a retried batch from
landing after its successor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Any, Final

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.producer.sender import Sender, SendProduceReqHandler

from mirrorline.core.errors import ConfigError

__all__ = ["KEY", "CountingSet", "PipelineBroken", "PipeliningSender", "depth", "install",
           "max_in_flight", "may_retry"]

#: Kafka's producer setting, and its default.
KEY: Final = "max.in.flight.requests.per.connection"
DEFAULT: Final = 5
#: What a broker remembers per producer and partition to tell duplicates (Kafka's limit
#: for idempotent producers).
IDEMPOTENT_MAX: Final = 5


class PipelineBroken(KafkaError):  # type: ignore[misc]
    """A batch of a pipelined producer failed while batches after it were in flight (or
    after such a failure): the producer's sequence numbers no longer match the broker's,
    and only a new producer recovers. The records may or may not be on the target."""

    retriable = True


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
    """A retriable failure may be queued again only when its batch was the partition's
    one batch in flight: a successor already sent would land before it."""
    return batches_in_flight <= 1


class CountingSet:
    """A set whose members were added several times: `x in s` once `x` was added `limit`
    times more than removed, or while it is held. aiokafka's sender uses it as its nodes
    in flight (`ignore_nodes`) and muted partitions."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: Counter[Hashable] = Counter()
        self._held: set[Hashable] = set()

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

    def discard(self, item: Hashable) -> None:
        if self._counts[item] > 0:
            self.remove(item)
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
        return {i for i, n in self._counts.items() if n >= self.limit} | self._held

    def __contains__(self, item: object) -> bool:
        return item in self._held or self._counts.get(item, 0) >= self.limit

    def __bool__(self) -> bool:
        return bool(self._counts) or bool(self._held)

    def __len__(self) -> int:
        return len(self.full())

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.full())

    def __or__(self, other: Iterable[Hashable]) -> set[Hashable]:
        return self.full() | set(other)


class _PipelinedProduce(SendProduceReqHandler):  # type: ignore[misc]
    """aiokafka's produce handler with the failure rule of pipelining (module doc)."""

    def _can_retry(self, error: Any, batch: Any) -> bool:
        if not super()._can_retry(error, batch):
            return False
        sender: PipeliningSender = self._sender
        if sender.broken is None and may_retry(sender.batches_in_flight(batch.tp)):
            # No new batch of this partition may leave before this one is queued again.
            sender._muted_partitions.hold(batch.tp)
            return True
        if sender.broken is None:
            sender.broken = error
        # Failed here so that its partition's owner hears why; aiokafka's own failure of
        # the batch that follows finds it failed already and changes nothing.
        batch.failure(exception=PipelineBroken(
            f"{error!r} on {batch.tp.topic}-{batch.tp.partition} with batches of this "
            f"producer in flight after it ({sender.broken!r} first): its sequence numbers "
            "no longer match the broker's"))
        return False


class PipeliningSender(Sender):  # type: ignore[misc]
    """aiokafka's sender with up to `limit` produce requests per node and batches per
    partition in flight."""

    def __init__(self, client: Any, *, limit: int, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.limit = limit
        self._in_flight = CountingSet(limit)
        self._muted_partitions = CountingSet(limit)
        #: The first failure that broke the pipeline (then every failure fails).
        self.broken: BaseException | None = None

    def batches_in_flight(self, tp: Any) -> int:
        muted: CountingSet = self._muted_partitions
        return muted.count(tp)

    async def _send_produce_req(self, node_id: int, batches: dict[Any, Any]) -> None:
        handler = _PipelinedProduce(self, batches)
        try:
            await handler.do(node_id)
        finally:
            self._in_flight.remove(node_id)
            for tp in batches:
                self._muted_partitions.remove(tp)
                self._muted_partitions.release(tp)


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
