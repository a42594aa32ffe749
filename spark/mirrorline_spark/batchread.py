"""Reading a micro-batch's range on the batch path: source record batches as fetched.

Under `mirrorline.batch.path` auto or on (the default), a read task of the executor's
`chunks` layout fetches its range with raw Fetch requests (`mirrorline.kafka.rawbatches`,
the replicator's batch path) over an aiokafka client on an event loop of its own (a
Spark Python worker is no event-loop service; it blocks on the loop while a fetch is
under way, and the next fetch is already sent while the rows of the last one go to the
writer). Each fetched batch goes where `mirrorline.core.batches.route` and the
partition's `mirrorline.core.copy_path.PathChooser` send it, as on a replicator worker:

- copied as it is: consecutive such batches leave as one raw chunk row (their bytes as
  fetched), which the sink rewrites and forwards;
- left out (control batches, emptied ones, aborted transactions under read_committed):
  nothing, and reading goes on past them;
- the record path (compaction gaps, LogAppendTime, larger than the target producer's
  `max.request.size`, a delete horizon, legacy message sets, small batches under `auto`,
  a range starting or ending inside a batch): its records are decoded as the consumer
  decodes them (`mirrorline.kafka.rawrecords.decode_batch`) into record rows.

Ranges stay those of the micro-batch: a batch that runs past the range's end copies only
its records before the end (as records), and the next micro-batch resumes inside it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.errors import KafkaError

from mirrorline.core.batches import Batch
from mirrorline.core.copy_path import Mode, PathChooser
from mirrorline.kafka.clients import consumer_kwargs
from mirrorline.kafka.fetchroute import route_fetch
from mirrorline.kafka.rawbatches import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchedPartition,
    RawBatchError,
    RawBatches,
)
from mirrorline.runtime import tune_kafka_io
from mirrorline_spark.options import SourceFeed
from mirrorline_spark.records import raw_chunk, records_to_arrow, to_chunk

__all__ = ["ReadCut", "client_kwargs", "cut_range", "read_batches"]

#: Bytes a fetch brings per partition at most, unless `max.partition.fetch.bytes` says
#: otherwise: a chunk row carries up to this much.
PARTITION_FETCH_BYTES = 8 << 20
#: The broker holds a fetch at most this long for records not there yet.
FETCH_WAIT_MS = 500
#: A retriable fetch error is retried after this long (metadata is refreshed meanwhile).
RETRY_S = 0.1

_CLIENT_KEYS = frozenset(inspect.signature(AIOKafkaClient).parameters) - {"loop"}


def client_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a consumer's or producer's aiokafka kwargs an `AIOKafkaClient` takes."""
    return {k: v for k, v in kwargs.items() if k in _CLIENT_KEYS}


@dataclass
class ReadCut:
    """One fetch answer of a range, cut into chunk rows."""

    rows: list[pa.RecordBatch] = field(default_factory=list)
    #: Where reading continues.
    next_offset: int = 0


def cut_range(fetched: FetchedPartition, feed: int, topic: str, partition: int,
              position: int, end: int, chooser: PathChooser, *, read_committed: bool,
              max_batch_bytes: int) -> ReadCut:
    """The chunk rows of the answer to a fetch of `topic`-`partition` at `position`, for a
    range ending before `end` (`mirrorline.kafka.fetchroute.route_fetch`): a raw row per
    run of batches forwarded as they are, a record row per run of the others."""
    routed = route_fetch(fetched, topic, partition, position, chooser,
                         read_committed=read_committed, max_request_size=max_batch_bytes,
                         end=end)
    out = ReadCut([], routed.next_offset)
    raw: list[Batch] = []
    records: list[Any] = []
    why = ""
    for one in [*routed.batches, None]:
        if raw and (one is None or one.records is not None):
            count = sum(b.header.record_count for b in raw if b.header is not None)
            out.rows.append(raw_chunk(b"".join(b.data for b in raw), feed, topic, partition,
                                      raw[0].base_offset, count, reason=why))
            raw.clear()
        if records and (one is None or one.records is None):
            out.rows.append(to_chunk(records_to_arrow(topic, partition, records), feed,
                                     topic, partition, path="records", reason=why))
            records.clear()
        if one is not None:
            why = one.reason
            if one.records is None:
                raw.append(one.batch)
            else:
                records.extend(one.records)
    return out


def read_batches(source: SourceFeed, feed: int, topic: str, partition: int, start: int,
                 end: int, *, stall_s: float) -> Iterator[pa.RecordBatch]:
    """Chunk rows of records [start, end) of one partition, in offset order."""
    tune_kafka_io()  # as the services run: reused buffers, fewer copies
    kwargs, _ = consumer_kwargs(source.client)
    read_committed = kwargs.get("isolation_level") == "read_committed"
    partition_bytes = int(kwargs.get("max_partition_fetch_bytes", PARTITION_FETCH_BYTES))
    mode: Mode = "on" if source.batch_path == "on" else "auto"
    chooser = PathChooser(mode)
    tp = TopicPartition(topic, partition)
    loop = asyncio.new_event_loop()

    async def started() -> AIOKafkaClient:
        client = AIOKafkaClient(**client_kwargs(kwargs))  # takes the running loop
        await client.bootstrap()
        client.set_topics([topic])
        return client

    client = loop.run_until_complete(started())
    raw = RawBatches(client)

    async def fetch(at: int) -> FetchedPartition | BaseException:
        try:
            answer = await raw.fetch({tp: at}, max_wait_ms=FETCH_WAIT_MS,
                                     partition_max_bytes=partition_bytes,
                                     isolation_level=READ_COMMITTED if read_committed
                                     else READ_UNCOMMITTED)
        except (KafkaError, RawBatchError, OSError) as exc:
            return exc
        return answer.get(tp) or RawBatchError(f"fetching {topic}-{partition}: no answer",
                                               -1)

    async def sent(at: int) -> asyncio.Task[FetchedPartition | BaseException]:
        """The fetch from `at`, its request on the wire by the time this returns."""
        task = asyncio.ensure_future(fetch(at))
        for _ in range(3):
            await asyncio.sleep(0)
        return task

    try:
        position = start
        last_progress = time.monotonic()
        pending = loop.run_until_complete(sent(position))
        while position < end:
            answer = loop.run_until_complete(pending)
            part = cut = None
            if isinstance(answer, FetchedPartition) and not answer.error_code:
                part = answer
                cut = cut_range(part, feed, topic, partition, position, end, chooser,
                                read_committed=read_committed,
                                max_batch_bytes=source.max_batch_bytes)
            elif isinstance(answer, FetchedPartition):
                code = answer.error_code
                if not getattr(_error_class(code), "retriable", False):
                    answer.check(tp)  # raises, naming the partition and the error
            if cut is not None and cut.next_offset > position:
                position = cut.next_offset
                last_progress = time.monotonic()
                if position < end:  # the next fetch travels while the rows are written
                    pending = loop.run_until_complete(sent(position))
                yield from cut.rows
                continue
            if time.monotonic() - last_progress > stall_s:
                why = f" ({answer})" if isinstance(answer, BaseException) else ""
                raise RuntimeError(
                    f"no records from {topic!r} partition {partition} at offset {position} "
                    f"for {stall_s:.0f}s although the log reaches {end}{why}")
            if part is None:
                client.force_metadata_update()
                loop.run_until_complete(asyncio.sleep(RETRY_S))
            pending = loop.run_until_complete(sent(position))
    finally:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(client.close())
        loop.close()


def _error_class(code: int) -> Any:
    import aiokafka.errors as kafka_errors

    return kafka_errors.for_code(code)
