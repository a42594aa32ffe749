"""Record batches as bytes over the wire: fetch them from a partition's leader, produce them.

The thin Kafka side of the batch path (issue 24; the pure side is `core/batches.py`). Both
calls go through an aiokafka client's `send()` to the partition leader with aiokafka's own
protocol structs, so neither decodes a record: a Fetch response's `records` are returned as
the broker sent them, a Produce request carries the bytes it is given.

- `fetch` asks each partition's leader (one request per leader) from an offset, and returns
  per partition the records bytes, the high watermark, last stable offset, log start and,
  under read_committed, the aborted transactions `core.batches.AbortedTransactions` needs.
- `produce` sends one batch to one partition, acks=-1 by default, and returns the base
  offset the leader gave it. A Produce request (v3 and later, all a Kafka 4 broker accepts)
  carries exactly one batch per partition, so several batches of a partition go in as many
  requests; the batch must already say what the target needs (`core.batches.rewrite`).
- `init_producer_id` gets a producer id and epoch for idempotent (or, with a transactional
  id, transactional) batches.

Retries, metadata refreshes after NOT_LEADER and the like are the caller's
(`replicator/batchfetch.py`); no fetch sessions. Errors name the topic, partition and
Kafka's error.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiokafka.errors as kafka_errors
from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.protocol.transaction import InitProducerIdRequest

from mirrorline.kafka.connio import ViewFetchRequest
from mirrorline.kafka.produce_request import BatchParts, FlatProduceRequest

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "FetchedPartition",
    "RawBatchError",
    "RawBatches",
]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


#: Kafka error codes aiokafka has no class for (it calls them UnknownError).
_NAMES = {87: "INVALID_RECORD"}


def _retriable(error_code: int) -> bool:
    return bool(getattr(kafka_errors.for_code(error_code), "retriable", False))


class RawBatchError(Exception):
    """A broker refused a raw fetch or produce; names the partition and Kafka's error."""

    def __init__(self, what: str, error_code: int, detail: str = "") -> None:
        known = kafka_errors.for_code(error_code)
        name = _NAMES.get(error_code, known.__name__)
        super().__init__(f"{what}: {name} (error code {error_code})"
                         + (f": {detail}" if detail else ""))
        self.error_code = error_code


@dataclass(frozen=True)
class FetchedPartition:
    """What one partition's part of a Fetch response holds, records still as bytes.

    `records` is a read-only view of the received response where the process uses our
    connection I/O (`kafka/connio.py`, the services' default) and it is not short; it
    keeps that response's buffer alive while it lives."""

    records: bytes | memoryview
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...]  # (producer id, first offset)
    error_code: int = 0

    def check(self, tp: TopicPartition) -> None:
        """Raise the partition's error, if the leader answered with one."""
        if self.error_code:
            raise RawBatchError(f"fetching {_where(tp)}", self.error_code)


def _where(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


class RawBatches:
    """Fetch and produce record batches as bytes through a started `AIOKafkaClient`."""

    def __init__(self, client: AIOKafkaClient) -> None:
        self._client = client

    async def _leader(self, tp: TopicPartition) -> int:
        client: Any = self._client
        leader = client.cluster.leader_for_partition(tp)
        if leader is None or leader < 0:
            await client._wait_on_metadata(tp.topic)
            leader = client.cluster.leader_for_partition(tp)
        if leader is None or leader < 0:
            raise RawBatchError(f"{_where(tp)} has no leader", 5)  # LEADER_NOT_AVAILABLE
        return int(leader)

    async def fetch(self, positions: Mapping[TopicPartition, int], *,
                    max_wait_ms: int = 100, min_bytes: int = 1, max_bytes: int = 50 << 20,
                    partition_max_bytes: int = 1 << 20,
                    isolation_level: int = READ_UNCOMMITTED
                    ) -> dict[TopicPartition, FetchedPartition]:
        """Records from `positions` of every partition, as bytes, one request per leader
        (all leaders at once).

        A partition the leader answered with an error carries its `error_code` (the others
        are still good); `FetchedPartition.check` raises it.

        The last batch of a partition may be cut off by `partition_max_bytes` (the broker
        always returns at least one whole batch); `core.batches.split` reports it.
        """
        by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
        for tp, offset in positions.items():
            by_leader[await self._leader(tp)][tp] = offset
        answers = await asyncio.gather(*(
            self.fetch_from(leader, wanted, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                            max_bytes=max_bytes, partition_max_bytes=partition_max_bytes,
                            isolation_level=isolation_level)
            for leader, wanted in by_leader.items()))
        out: dict[TopicPartition, FetchedPartition] = {}
        for answer in answers:
            out.update(answer)
        return out

    async def fetch_from(self, leader: int, positions: Mapping[TopicPartition, int], *,
                         max_wait_ms: int = 100, min_bytes: int = 1,
                         max_bytes: int = 50 << 20, partition_max_bytes: int = 1 << 20,
                         isolation_level: int = READ_UNCOMMITTED
                         ) -> dict[TopicPartition, FetchedPartition]:
        """`fetch` of partitions all led by broker `leader`, in one request."""
        topics: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        for tp, offset in positions.items():
            topics[tp.topic].append((tp.partition, offset, partition_max_bytes))
        request = ViewFetchRequest(max_wait_ms, min_bytes, max_bytes, isolation_level,
                               list(topics.items()))
        response: Any = await self._client.send(leader, request)
        return _fetched(response)

    async def produce(self, tp: TopicPartition, batch: bytes | bytearray | BatchParts, *,
                      acks: int = -1, timeout_ms: int = 30_000,
                      transactional_id: str | None = None) -> int:
        """Write one record batch to `tp` (whole, or in pieces: `BatchParts`); the base
        offset the leader assigned it."""
        leader = await self._leader(tp)
        # Encoded with one copy of the batch (`kafka/produce_request.py`), not six.
        request = FlatProduceRequest(transactional_id, acks, timeout_ms,
                                     [(tp.topic, [(tp.partition, batch)])])
        response: Any = await self._client.send(leader, request)
        for topic, partitions in response.topics:
            for answer in partitions:
                partition, error_code, offset = answer[0], answer[1], answer[2]
                if (topic, partition) != (tp.topic, tp.partition):
                    continue
                if error_code:
                    raise RawBatchError(f"producing a batch to {_where(tp)}", error_code,
                                        _record_errors(answer))
                return int(offset)
        raise RawBatchError(f"producing a batch to {_where(tp)}: no answer for it", -1)

    async def init_producer_id(self, transactional_id: str | None = None,
                               transaction_timeout_ms: int = 60_000,
                               timeout_s: float = 30.0) -> tuple[int, int]:
        """A producer id and epoch from the cluster (idempotent without a transactional id).

        With a transactional id the request must go to its transaction coordinator; that
        lookup is not built yet, so it goes to any broker and fails with NOT_COORDINATOR
        unless that broker happens to be the coordinator (always, on one broker). Retriable
        errors (a coordinator still loading, as on a fresh cluster) are retried for up to
        `timeout_s`.
        """
        client: Any = self._client
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        backoff = 0.05
        while True:
            node = client.get_random_node()
            response: Any = await client.send(
                node, InitProducerIdRequest(transactional_id, transaction_timeout_ms))
            code = int(response.error_code)
            if not code:
                return int(response.producer_id), int(response.producer_epoch)
            if not _retriable(code) or loop.time() + backoff > deadline:
                raise RawBatchError("initialising a producer id", code)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)


def _record_errors(answer: Iterable[Any]) -> str:
    """The per-batch messages a Produce response v8+ carries (empty for older versions)."""
    parts = list(answer)
    return "; ".join(str(p) for p in parts[5:] if p) if len(parts) > 5 else ""


def _fetched(response: Any) -> dict[TopicPartition, FetchedPartition]:
    version = int(response.API_VERSION)
    if version < 4:
        raise RawBatchError(f"Fetch v{version} has no record batches", 35)
    if version >= 7 and response.error_code:
        raise RawBatchError("fetch", response.error_code)
    out: dict[TopicPartition, FetchedPartition] = {}
    for topic, partitions in response.topics:
        for answer in partitions:
            tp = TopicPartition(topic, answer[0])
            log_start = answer[4] if version >= 5 else -1
            aborted = answer[5] if version >= 5 else answer[4]
            out[tp] = FetchedPartition(
                records=answer[-1] if answer[-1] is not None else b"",
                high_watermark=int(answer[2]),
                last_stable_offset=int(answer[3]),
                log_start_offset=int(log_start),
                aborted_transactions=tuple((int(pid), int(first))
                                           for pid, first in (aborted or ())),
                error_code=int(answer[1]))
    return out
