"""Small async helpers for tests against real brokers. Import as `from helpers import ...`.

`tests/` has no `__init__.py`, so pytest puts this directory on `sys.path` when it loads
`tests/conftest.py`. The suite's broker is Apache Kafka, or Tansu with
`MIRRORLINE_TEST_BROKER=tansu` (`broker_kind()`); `start_cluster` starts one of that kind
for a test that needs a cluster of its own. The helpers work on both without weakening
what a test checks: `consume_all` decides where a partition ends from the high watermark
in fetch responses, which is right on Kafka and needed on Tansu, whose ListOffsets(latest)
answers the last batch's base offset + 1 instead of the log end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from aiokafka import (
    AIOKafkaClient,
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRecord,
    TopicPartition,
)
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from mirrorline.core.batches import split
from mirrorline.dev import kafka
from mirrorline.dev.brokers import start_broker, stop_broker_async
from mirrorline.kafka.metadata import partitions_by_topic
from mirrorline.kafka.rawbatches import RawBatches

Headers: TypeAlias = Sequence[tuple[str, bytes]]
#: Explicit TypeAlias: aiokafka ships no type information, so mypy sees it as Any.
Consumed: TypeAlias = ConsumerRecord[bytes, bytes]


BROKER_ENV = "MIRRORLINE_TEST_BROKER"
BROKERS = ("kafka", "tansu")

#: A record timestamp for tests that set them, fixed for the session and an hour in the
#: past: Apache Kafka deletes records older than its retention (7 days by default, judged by
#: their timestamps) within seconds on a dev cluster, before a mirror could read them.
PAST_MS = (int(time.time()) // 3600 - 1) * 3_600_000


def aliases(first: str = "a", second: str = "b") -> tuple[str, str]:
    """Two cluster aliases no other test uses, e.g. `a1b2c3` and `b1b2c3` (no separator
    inside, so remote topic names stay unambiguous)."""
    tag = secrets.token_hex(3)
    return f"{first}{tag}", f"{second}{tag}"


def shape(record: Consumed) -> tuple[object, ...]:
    """What a mirror must keep of a record: key, value, headers and timestamp."""
    return (record.key, record.value, tuple(record.headers), record.timestamp)


def broker_kind() -> str:
    """The broker the suite runs on: `kafka` (the default) or `tansu`."""
    kind = os.environ.get(BROKER_ENV, "kafka").strip().lower() or "kafka"
    if kind not in BROKERS:
        raise ValueError(f"{BROKER_ENV}={kind!r}: expected one of {', '.join(BROKERS)}")
    return kind


async def start_cluster(alias: str, directory: Path, *, port: int | None = None,
                        **options: Any) -> Any:
    """A cluster of the suite's broker kind: a one-node Kafka cluster kept in `directory`
    (a fresh directory starts it empty; Kafka `options` apply to Kafka only), or a Tansu
    broker in memory logging under `directory`. Returns a LocalKafkaCluster or LocalBroker."""
    if broker_kind() == "kafka":
        return await kafka.start_kafka(alias, directory=directory, port=port, **options)
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    return await start_broker(alias, port=port, log_dir=directory)


async def stop_cluster(cluster: Any) -> None:
    """Stop a cluster from `start_cluster` at once (a broker going away, not a clean exit)."""
    if isinstance(cluster, kafka.LocalKafkaCluster):
        await kafka.stop_kafka(cluster, timeout=2.0)
    else:
        await stop_broker_async(cluster.pid)


@dataclass(frozen=True)
class Record:
    """One record to produce; `partition=None` lets the producer's partitioner choose."""

    value: bytes | None
    key: bytes | None = None
    headers: Headers = ()
    timestamp_ms: int | None = None
    partition: int | None = None

    @classmethod
    def of(cls, consumed: Consumed, *, keep_partition: bool = True) -> Record:
        """The record as read, ready to produce again (headers become a list of pairs)."""
        return cls(
            value=consumed.value,
            key=consumed.key,
            headers=list(consumed.headers),
            timestamp_ms=consumed.timestamp,
            partition=consumed.partition if keep_partition else None,
        )


async def create_topic(
    bootstrap: str, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None
) -> None:
    """Create topic `name` (replication factor 1, as local clusters have one broker)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=dict(configs or {}))]
        )
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, records: Iterable[Record], *,
                  compression: str | None = None, linger_ms: int = 5,
                  one_per_batch: bool = False) -> list[Any]:
    """Produce `records` in order and wait for every ack; returns their RecordMetadata.

    `compression` is the producer's `compression.type` (gzip, snappy, lz4, zstd). Records
    are queued all at once, so the producer fills its batches as `linger_ms` lets it;
    `one_per_batch` instead waits for each record's ack before sending the next, as a
    producer without linger that sends one record at a time does (one record per batch).
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=linger_ms,
                                compression_type=compression)
    await producer.start()
    try:
        futures = []
        for record in records:
            future = await producer.send(
                topic,
                value=record.value,
                key=record.key,
                partition=record.partition,
                timestamp_ms=record.timestamp_ms,
                headers=list(record.headers),  # aiokafka's producer wants a list
            )
            if one_per_batch:
                await future
            futures.append(future)
        return list(await asyncio.gather(*futures))
    finally:
        await producer.stop()


async def raw_batches(bootstrap: str, topic: str, partition: int = 0) -> list[bytes]:
    """Every record batch of `topic`-`partition`, from offset 0 to the high watermark, as
    the broker stores it (read_uncommitted: control batches included): what a test reads to
    see how batches were written -- codec, record count, producer fields
    (`mirrorline.core.batches.parse_header`) and the records section after the header."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        source = RawBatches(client)
        tp = TopicPartition(topic, partition)
        out: list[bytes] = []
        position = 0
        while True:
            fetched = (await source.fetch({tp: position}))[tp]
            fetched.check(tp)
            cut = split(fetched.records)
            out.extend(bytes(batch.data) for batch in cut.batches)
            if cut.next_offset is not None:
                position = cut.next_offset
            if position >= fetched.high_watermark:
                return out
            if cut.next_offset is None:
                raise AssertionError(f"{topic}-{partition}: no whole batch at offset "
                                     f"{position}, below the high watermark "
                                     f"{fetched.high_watermark}")
    finally:
        await client.close()


async def consume_all(
    bootstrap: str,
    topic: str,
    *,
    expected: int | None = None,
    timeout: float = 30.0,
) -> dict[int, list[Consumed]]:
    """Every record of every partition of `topic`, from the log start to the true end.

    A partition is read to its end once our position reaches the high watermark of a fetch
    response. With `expected`, also wait until at least that many records were read in total
    (records may still be arriving, e.g. from a mirror). Raises AssertionError on timeout.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:  # a mirror creates the topic in its own time: wait for it
            partitions = (await partitions_by_topic(consumer, [topic])).get(topic)
            if partitions:
                break
            if loop.time() >= deadline:
                raise AssertionError(f"topic {topic!r} does not exist on {bootstrap}")
            await asyncio.sleep(0.2)
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        result: dict[int, list[Consumed]] = {tp.partition: [] for tp in tps}
        while True:
            batches = await consumer.getmany(timeout_ms=200)
            for tp, batch in batches.items():
                result[tp.partition].extend(batch)
            total = sum(len(batch) for batch in result.values())
            if await _at_end(consumer, tps) and (expected is None or total >= expected):
                return result
            if loop.time() >= deadline:
                counts = {p: len(batch) for p, batch in result.items()}
                raise AssertionError(
                    f"consume_all({topic!r}): {total} records after {timeout:g}s "
                    f"(expected {expected}); per partition {counts}"
                )
    finally:
        await consumer.stop()


async def _at_end(consumer: AIOKafkaConsumer, tps: Sequence[TopicPartition]) -> bool:
    for tp in tps:
        highwater = consumer.highwater(tp)
        if highwater is None or await consumer.position(tp) < highwater:
            return False
    return True


async def wait_for(
    predicate: Callable[[], Awaitable[bool]],
    timeout: float,
    message: str,
    *,
    interval: float = 0.1,
) -> None:
    """Poll `predicate()` until it returns True; AssertionError(`message`) after `timeout`s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() >= deadline:
            raise AssertionError(f"{message} (waited {timeout:g}s)")
        await asyncio.sleep(interval)


async def commit_offsets(bootstrap: str, group: str, offsets: Mapping[tuple[str, int], int]
                         ) -> None:
    """Commit `offsets` for `group` as a consumer would after reading up to them (a
    group-less commit: no member joins, so nothing waits for a rebalance)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        tps = {TopicPartition(t, p): o for (t, p), o in offsets.items()}
        consumer.assign(list(tps))
        await consumer.commit(tps)
    finally:
        await consumer.stop()


async def committed_offsets(bootstrap: str, group: str, partitions: Iterable[tuple[str, int]]
                            ) -> dict[tuple[str, int], int | None]:
    """The group's committed offset of each partition (None: nothing committed)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        out: dict[tuple[str, int], int | None] = {}
        for t, p in partitions:
            offset = await consumer.committed(TopicPartition(t, p))
            out[(t, p)] = None if offset is None or offset < 0 else int(offset)
        return out
    finally:
        await consumer.stop()


async def consume_as_group(bootstrap: str, group: str, topics: Sequence[str], *,
                           quiet_s: float = 1.5, timeout: float = 30.0) -> list[Consumed]:
    """Join `group`, read until nothing arrives for `quiet_s`, commit, leave; returns what
    was read. Without a committed offset a partition is read from its start."""
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                session_timeout_ms=6000, heartbeat_interval_ms=500,
                                fetch_max_wait_ms=100)
    await consumer.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not consumer.assignment():
            if loop.time() > deadline:
                raise AssertionError(f"group {group!r} was never assigned {list(topics)}")
            await consumer.getmany(timeout_ms=200)
        read: list[Consumed] = []
        quiet_since = loop.time()
        while loop.time() - quiet_since < quiet_s:
            batches = await consumer.getmany(timeout_ms=200)
            for batch in batches.values():
                read.extend(batch)
            if batches:
                quiet_since = loop.time()
            if loop.time() > deadline:
                break
        await consumer.commit()
        return read
    finally:
        await consumer.stop()


async def read_from_committed(bootstrap: str, group: str, topic: str) -> list[Consumed]:
    """What a consumer of `group` would read next from `topic`: from each partition's
    committed offset (its start when none) to the end -- without joining the group.

    Tansu never forgets a member that left a group (DescribeGroups keeps reporting it and
    offsets can no longer be committed from outside), so tests that must write to a group
    later read "as the group" this way instead of joining it.
    """
    records = await consume_all(bootstrap, topic)
    starts = await committed_offsets(bootstrap, group, [(topic, p) for p in records])
    return [r for p, rs in records.items() for r in rs if r.offset >= (starts[(topic, p)] or 0)]


@contextlib.asynccontextmanager
async def steady(bootstrap: str, topic: str, partitions: int, *, burst: int = 60,
                 pause_s: float = 0.02, value: Callable[[int], bytes] = lambda n: str(n).encode(),
                 key: Callable[[int], bytes | None] = lambda n: None,
                 compression: str | None = None,
                 ) -> AsyncIterator[list[int]]:
    """Produce numbered records round-robin over the partitions until the block exits (in
    bursts of `burst`, each acknowledged, then a short pause); yields `[count sent]`.
    `compression`: the producer's `compression.type`."""
    sent, stop = [0], asyncio.Event()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2,
                                compression_type=compression)
    await producer.start()

    async def run() -> None:
        while not stop.is_set():
            futures = []
            for _ in range(burst):
                n = sent[0]
                futures.append(await producer.send(topic, value(n), key=key(n),
                                                   partition=n % partitions))
                sent[0] += 1
            await asyncio.gather(*futures)
            await asyncio.sleep(pause_s)

    task = asyncio.create_task(run())
    try:
        yield sent
    finally:
        stop.set()
        await task
        await producer.stop()


def assert_monotonic(checkpoints: list[Any]) -> None:
    """Per group and partition, neither offset of a checkpoint ever goes backwards (any
    checkpoint type with group, topic, partition and both offsets: ours or MM2's decoded)."""
    last: dict[tuple[str, str, int], Any] = {}
    for c in checkpoints:
        key = (c.group, c.topic, c.partition)
        before = last.get(key)
        if before is not None:
            assert c.upstream_offset >= before.upstream_offset, (before, c)
            assert c.downstream_offset >= before.downstream_offset, (before, c)
        last[key] = c


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample of `name` whose labels include `labels`, from /metrics."""
    for line in text.splitlines():
        found = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if found and all(f'{k}="{v}"' in found.group(1) for k, v in labels.items()):
            return float(found.group(2))
    return None


async def dev_brokers(state_dir: Path, *args: str, timeout: float = 180.0
                      ) -> tuple[int, str, str]:
    """Run `mirrorline dev brokers ARGS` with `state_dir` as its state dir; (status, stdout,
    stderr)."""
    env = {**os.environ, "MIRRORLINE_STATE_DIR": str(state_dir)}
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("mirrorline")), "dev", "brokers", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
