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

from mirrorline.core.batches import (
    AbortedTransactions,
    Batch,
    Path,
    Reason,
    route,
    split,
)
from mirrorline.core.copy_path import Mode, PathChooser
from mirrorline.kafka.clients import consumer_kwargs
from mirrorline.kafka.rawbatches import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchedPartition,
    RawBatchError,
    RawBatches,
)
from mirrorline.kafka.rawrecords import decode_batch
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
    range ending before `end`: raw rows for runs of batches copied as they are, record
    rows for the others (see the module's docstring)."""
    aborted = AbortedTransactions(fetched.aborted_transactions) if read_committed else None
    out = ReadCut([], position)
    raw: list[Batch] = []
    records: list[Any] = []
    why = ""

    def flush_raw() -> None:
        if raw:
            first = raw[0].header
            assert first is not None
            count = sum(b.header.record_count for b in raw if b.header is not None)
            out.rows.append(raw_chunk(b"".join(b.data for b in raw), feed, topic, partition,
                                      first.base_offset, count, reason=chooser.reason))
            raw.clear()

    def flush_records() -> None:
        if records:
            out.rows.append(to_chunk(records_to_arrow(topic, partition, records), feed,
                                     topic, partition, path="records", reason=why))
            records.clear()

    for batch in split(fetched.records).batches:
        is_aborted = aborted.is_aborted(batch) if aborted is not None else False
        header = batch.header
        if batch.base_offset >= end or out.next_offset >= end:
            break
        if header is not None and header.next_offset <= out.next_offset:
            continue  # before the position (a fetch answers from the batch holding it)
        decision = route(batch, aborted=is_aborted, target_max_message_bytes=max_batch_bytes)
        if decision.path is Path.SKIP:
            assert header is not None
            out.next_offset = max(out.next_offset, header.next_offset)
            continue
        if header is not None:
            chooser.observe(header.record_count, header.size)
        if (decision.path is Path.BATCH and chooser.batches
                and batch.base_offset >= out.next_offset and header is not None
                and header.next_offset <= end):
            flush_records()
            raw.append(batch)
            out.next_offset = header.next_offset
            continue
        flush_raw()
        decoded = [r for r in decode_batch(batch, out.next_offset, topic, partition)
                   if r.offset < end]
        records.extend(decoded)
        why = (decision.reason.value if decision.reason is not Reason.COPY
               else "resuming inside a source batch" if batch.base_offset < out.next_offset
               else "the micro-batch ends inside a source batch"
               if header is not None and header.next_offset > end
               else chooser.reason)
        if header is not None:
            out.next_offset = min(max(out.next_offset, header.next_offset), end)
        elif decoded:
            out.next_offset = max(out.next_offset, decoded[-1].offset + 1)
    flush_raw()
    flush_records()
    return out


def read_batches(source: SourceFeed, feed: int, topic: str, partition: int, start: int,
                 end: int, *, stall_s: float) -> Iterator[pa.RecordBatch]:
    """Chunk rows of records [start, end) of one partition, in offset order."""
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
