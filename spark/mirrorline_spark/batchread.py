"""Reading a micro-batch's ranges on the batch path: raw fetches, routed batch by batch.

Under `mirrorline.batch.path` auto or on (the default), a read task of the executor's
`chunks` layout fetches its ranges with raw Fetch requests (`mirrorline.kafka.rawbatches`,
the replicator's batch path) over one aiokafka client of the feed's source cluster
(`FeedClient`), shared by the task's ranges, on an event loop of the task's own (a Spark
Python worker is no event-loop service: it blocks on the loop, and whatever else runs on
that loop -- the task's produce requests, `mirrorline_spark.copytask` -- goes on
meanwhile). A range's next fetch is on the wire while its last answer is handled. Each
fetched batch goes where `mirrorline.kafka.fetchroute.route_fetch` sends it, as on a
replicator worker: copied as it is, left out (control batches, emptied ones, aborted
transactions under read_committed), or decoded for the record path.

Ranges stay those of the micro-batch: a batch that runs past the range's end yields only
its records before the end (as records), and the next micro-batch resumes inside it.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.errors import KafkaError

from mirrorline.core.copy_path import Mode, PathChooser
from mirrorline.kafka.clients import consumer_kwargs
from mirrorline.kafka.fetchroute import FetchRoute, route_fetch
from mirrorline.kafka.rawbatches import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchedPartition,
    RawBatchError,
    RawBatches,
)
from mirrorline_spark.options import SourceFeed

__all__ = ["FeedClient", "RangeReader", "client_kwargs", "run_down"]

#: Bytes a fetch brings per partition at most, unless `max.partition.fetch.bytes` says
#: otherwise.
PARTITION_FETCH_BYTES = 8 << 20
#: The broker holds a fetch at most this long for records not there yet.
FETCH_WAIT_MS = 500
#: A retriable fetch error is retried after this long (metadata is refreshed meanwhile).
RETRY_S = 0.1

_CLIENT_KEYS = frozenset(inspect.signature(AIOKafkaClient).parameters) - {"loop"}


def client_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a consumer's or producer's aiokafka kwargs an `AIOKafkaClient` takes."""
    return {k: v for k, v in kwargs.items() if k in _CLIENT_KEYS}


class FeedClient:
    """A read task's one client of its feed's source cluster, shared by the task's ranges
    (one bootstrap, one connection per broker, one metadata for all of them)."""

    def __init__(self, source: SourceFeed) -> None:
        kwargs, _ = consumer_kwargs(source.client)
        self.kwargs = kwargs
        self._client: AIOKafkaClient | None = None
        self._raw: RawBatches | None = None
        self._topics: set[str] = set()

    async def raw(self, topic: str) -> RawBatches:
        """The raw batches of the open client (opened on first use), knowing `topic`."""
        if self._client is None:
            client = AIOKafkaClient(**client_kwargs(self.kwargs))  # the running loop
            try:
                await client.bootstrap()
            except BaseException:
                await client.close()
                raise
            self._client, self._raw = client, RawBatches(client)
        if topic not in self._topics:
            self._topics.add(topic)
            self._client.set_topics(sorted(self._topics))
        assert self._raw is not None
        return self._raw

    def refresh(self) -> None:
        if self._client is not None:
            self._client.force_metadata_update()

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


class RangeReader:
    """Records [start, end) of one source partition, fetched over `client` on the running
    loop, one routed fetch answer at a time (`routes`)."""

    def __init__(self, source: SourceFeed, client: FeedClient, topic: str, partition: int,
                 start: int, end: int, *, stall_s: float) -> None:
        self._client = client
        kwargs = client.kwargs
        self.read_committed = kwargs.get("isolation_level") == "read_committed"
        self._partition_bytes = int(kwargs.get("max_partition_fetch_bytes",
                                               PARTITION_FETCH_BYTES))
        mode: Mode = "on" if source.batch_path == "on" else "auto"
        self._chooser = PathChooser(mode)
        self._max_batch_bytes = source.max_batch_bytes
        self.topic, self.partition = topic, partition
        self._tp = TopicPartition(topic, partition)
        #: Where reading continues; the range is read once it reaches `end`.
        self.position = start
        self.end = end
        self._stall_s = stall_s
        self._pending: asyncio.Task[FetchedPartition | BaseException] | None = None

    async def routes(self) -> AsyncGenerator[FetchRoute, None]:
        """Each fetch answer's batches, routed, in offset order, until the range's end."""
        last_progress = time.monotonic()
        if self._pending is None and self.position < self.end:
            self._pending = await self._sent(self.position)
        while self.position < self.end:
            assert self._pending is not None
            answer = await self._pending
            self._pending = None
            routed = None
            if isinstance(answer, FetchedPartition) and not answer.error_code:
                routed = route_fetch(answer, self.topic, self.partition, self.position,
                                     self._chooser, read_committed=self.read_committed,
                                     max_request_size=self._max_batch_bytes, end=self.end)
            elif isinstance(answer, FetchedPartition) and not getattr(
                    _error_class(answer.error_code), "retriable", False):
                answer.check(self._tp)  # raises, naming the partition and the error
            if routed is not None and routed.next_offset > self.position:
                self.position = routed.next_offset
                last_progress = time.monotonic()
                if self.position < self.end:  # the next fetch travels meanwhile
                    self._pending = await self._sent(self.position)
                yield routed
                continue
            if time.monotonic() - last_progress > self._stall_s:
                why = f" ({answer})" if isinstance(answer, BaseException) else ""
                raise RuntimeError(
                    f"no records from {self.topic!r} partition {self.partition} at offset "
                    f"{self.position} for {self._stall_s:.0f}s although the log reaches "
                    f"{self.end}{why}")
            if routed is None:
                self._client.refresh()
                await asyncio.sleep(RETRY_S)
            self._pending = await self._sent(self.position)

    async def _fetch(self, at: int) -> FetchedPartition | BaseException:
        try:
            raw = await self._client.raw(self.topic)
            answer = await raw.fetch(
                {self._tp: at}, max_wait_ms=FETCH_WAIT_MS,
                partition_max_bytes=self._partition_bytes,
                isolation_level=READ_COMMITTED if self.read_committed else READ_UNCOMMITTED)
        except (KafkaError, RawBatchError, OSError) as exc:
            return exc
        return answer.get(self._tp) or RawBatchError(
            f"fetching {self.topic}-{self.partition}: no answer", -1)

    async def _sent(self, at: int) -> asyncio.Task[FetchedPartition | BaseException]:
        """The fetch from `at`, its request on the wire by the time this returns."""
        task = asyncio.ensure_future(self._fetch(at))
        for _ in range(3):
            await asyncio.sleep(0)
        return task


def run_down(loop: asyncio.AbstractEventLoop,
             *closing: Callable[[], Awaitable[None]]) -> None:
    """Cancel what still runs on a task's `loop` (fetches and produces in flight, the
    clients' background tasks), await each of `closing`, and close the loop."""
    async def down() -> None:
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for close in closing:
            await close()

    try:
        loop.run_until_complete(down())
    finally:
        loop.close()


def _error_class(code: int) -> Any:
    import aiokafka.errors as kafka_errors

    return kafka_errors.for_code(code)
