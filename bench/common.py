"""What every contender shares: the environment it mirrors in, seeding, and the finish line.

A contender is an async callable `(env: BenchEnv) -> float`: it mirrors `env.records`
records from `env.source_topic` on the source cluster into `env.target_topic` on the target
cluster and returns the seconds from its start until the target held all of them, measured
with `env.wait_mirrored(started)`. The finish line is the target's high watermarks as
reported in fetch responses -- not ListOffsets(latest), which Tansu answers with the last
batch's base offset + 1 -- so every contender is timed the same way whatever it runs.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench import cpu

#: Key and value of one record. Both printable, never containing tab or newline, so that
#: line-oriented tools (kcat) can carry them as `key<TAB>value<NL>`.
Payload = tuple[bytes, bytes]


class ContenderUnavailable(Exception):
    """The contender cannot run on this machine (a tool is missing); the harness skips it."""


@dataclass(frozen=True)
class BenchEnv:
    """Where one contender run mirrors from and to. Both topics exist before the run starts.

    The target topic is pre-created with the source's partition count and the source's name
    on the other cluster -- what an identity replication policy produces, so a Mirrorline
    contender runs with `replication.policy.class` set to the identity policy. Every
    contender must write into `target_topic`, partition for partition: the harness checks it.
    """

    source_alias: str
    target_alias: str
    source_bootstrap: str
    target_bootstrap: str
    source_topic: str
    target_topic: str
    partitions: int
    records: int
    record_size: int
    #: A scratch directory for this run (config files, logs); removed after the bench.
    workdir: Path
    #: Filled by `wait_mirrored`: seconds from the contender's start to its first record
    #: on the target (process start, connections, discovery) -- reported, not timed.
    startup: list[float] = field(default_factory=list)
    #: The brokers' kind: "kafka" (Apache Kafka) or "tansu".
    broker_kind: str = "tansu"
    #: Filled by `wait_mirrored`: where the CPU went from the first record to the last.
    usage: list[Usage] = field(default_factory=list)
    #: The source topic's compression codec (Kafka's name; "none" for none). A contender
    #: that compresses what it writes uses the same, as an operator mirroring it would.
    codec: str = "none"
    #: Every broker process of both clusters, whose CPU is read over the timed window.
    broker_pids: tuple[int, ...] = ()
    #: Filled by a Mirrorline replicator run: the copy path its status gave the partitions.
    copy_paths: list[str] = field(default_factory=list)
    #: True in a steady-rate run: the source keeps growing while the contender runs, so
    #: a contender must keep following it rather than stop at the end it first sees.
    follow: bool = False

    async def wait_mirrored(
        self,
        started: float,
        *,
        watch: Sequence[asyncio.Future[Any]] = (),
        limit: float | None = None,
        cost: ProcessCost | None = None,
    ) -> float:
        """Seconds from the first record on the target until the target holds all of them.

        Every contender is timed over the same window -- copying, not starting up -- so a
        contender that is a separate OS process (kcat, the Mirrorline replicator) is not
        charged for interpreter or process start; the start-up latency (from `started`, a
        `time.perf_counter()` value, to the first record) is recorded in `startup`.
        Polls ListOffsets(latest) every 10 ms -- exact on Kafka and never above the truth on
        Tansu -- and confirms through a fetch's high watermarks once the offsets stop moving,
        so the watcher costs the contender next to nothing while records flow.
        `watch` holds the contender's own tasks: if one fails, its error is raised at once
        instead of waiting for `limit` (default: generous for the record count).
        `cost` names the contender's own processes. Over the same window the CPU time of
        those, of the brokers, of the bench process and of the whole machine go to `usage`,
        with the contender's peak resident memory.
        """
        topic = self.target_topic
        limit = limit if limit is not None else max(120.0, self.records / 2_000)
        previous: dict[int, int] | None = None
        first: float | None = None
        harness = cpu.Group((os.getpid(),), children=False)
        inside = cost is not None and cost.group == harness
        at_first: cpu.Sample | None = None

        def groups() -> list[cpu.Group]:
            return [cost.group if cost is not None else cpu.Group(()),
                    cpu.Group(self.broker_pids), harness]

        def done() -> float:
            assert first is not None and at_first is not None
            self.startup.append(first - started)
            seconds = time.perf_counter() - first
            used = cpu.used(at_first, cpu.Sample.take(groups()))
            mine, brokers, bench = used.groups
            self.usage.append(Usage(
                seconds=seconds, contender=mine if cost is not None else None,
                brokers=brokers, harness=None if inside else bench,
                busy=used.busy, capacity=used.total,
                peak_rss=cost.peak_rss() if cost is not None else None))
            return seconds

        async with HighWatermarks(self.target_bootstrap, topic, self.partitions) as marks:
            while True:
                ends = await marks.log_ends()
                if first is None and sum(ends.values()) > 0:
                    first = time.perf_counter()
                    at_first = cpu.Sample.take(groups())
                if sum(ends.values()) >= self.records:
                    return done()
                if ends == previous and first is not None:
                    confirmed = await marks.confirm(ends)
                    if sum(confirmed.values()) >= self.records:
                        return done()
                previous = ends
                for task in watch:
                    if task.done() and not task.cancelled() and task.exception() is not None:
                        raise RuntimeError(f"contender failed: {task.exception()!r}")
                if time.perf_counter() - started > limit:
                    raise TimeoutError(
                        f"target {topic} holds {await marks.total()} of {self.records} records"
                        f" after {limit:g}s"
                    )
                await asyncio.sleep(0.01)


Contender = Callable[[BenchEnv], Awaitable[float]]


def free_port() -> int:
    """A loopback TCP port free right now, for a contender's gRPC server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ProcessCost:
    """A contender's own processes, and by default what they started, for the cost figures.

    `children=False` counts the processes alone: for a contender that runs inside the bench
    process (the raw loop), whose children are the brokers and the other contenders.
    """

    def __init__(self, pids: Sequence[int] = (), *, children: bool = True,
                 reaped_here: bool = False) -> None:
        #: May grow while the contender starts its processes (kcat's pipes).
        self.pids = list(pids)
        self.children = children
        self.reaped_here = reaped_here

    @property
    def group(self) -> cpu.Group:
        return cpu.Group(tuple(self.pids), self.children, self.reaped_here)

    def peak_rss(self) -> int:
        """The sum of the processes' peak resident set sizes (VmHWM), in bytes."""
        return cpu.peak_rss(self.pids)


@dataclass(frozen=True)
class Usage:
    """Where the machine's CPU went during one timed window (first record to last)."""

    seconds: float
    #: CPU seconds of the contender's processes and their children; None when it is not a
    #: process of its own.
    contender: float | None
    #: CPU seconds of both clusters' broker processes.
    brokers: float
    #: CPU seconds of the bench process itself (its finish-line watcher); None when the
    #: contender runs inside it (the raw loop), whose figure then includes the watcher.
    harness: float | None
    #: Busy CPU seconds of the whole machine, and the CPU seconds it had (cores x seconds).
    busy: float
    capacity: float
    peak_rss: int | None

    @property
    def others(self) -> float:
        """Busy CPU seconds nobody above accounts for: other processes on the machine."""
        return max(0.0, self.busy - (self.contender or 0.0) - self.brokers
                   - (self.harness or 0.0))


class HighWatermarks:
    """A topic's per-partition log ends, read so that Tansu cannot fool us.

    `log_ends` asks ListOffsets(latest): exact on Kafka, the last batch's base offset + 1 on
    Tansu (so never above the truth). `confirm` seeks each partition to that answer - 1 and
    fetches: only the last batch travels, and the fetch response carries the true high
    watermark. Records are not parsed beyond the first one.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._tps = [TopicPartition(topic, p) for p in range(partitions)]
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=10,
            max_partition_fetch_bytes=64 * 1024,
            check_crcs=False,
        )

    async def __aenter__(self) -> HighWatermarks:
        await self._consumer.start()
        self._consumer.assign(self._tps)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def log_ends(self) -> dict[int, int]:
        ends = await self._consumer.end_offsets(self._tps)
        return {tp.partition: ends[tp] for tp in self._tps}

    async def confirm(self, ends: dict[int, int], limit: float = 5.0) -> dict[int, int]:
        since_ms = int(time.time() * 1000)
        for tp in self._tps:
            self._consumer.seek(tp, max(0, ends[tp.partition] - 1))
        deadline = time.perf_counter() + limit
        while time.perf_counter() < deadline:
            await self._consumer.getmany(timeout_ms=20, max_records=1)
            stamps = [self._consumer.last_poll_timestamp(tp) for tp in self._tps]
            if all(stamp is not None and stamp >= since_ms for stamp in stamps):
                break
        return {tp.partition: self._consumer.highwater(tp) or 0 for tp in self._tps}

    async def per_partition(self) -> dict[int, int]:
        return await self.confirm(await self.log_ends())

    async def total(self) -> int:
        return sum((await self.per_partition()).values())


# --------------------------------------------------------------------------- data


def make_payloads(records: int, size: int, seed: int = 7) -> list[Payload]:
    """`records` distinct printable (key, value) pairs with `size`-byte values.

    Values are slices of one base64 stream (no tab, no newline); keys are 10-digit numbers.
    Generated up front so that seeding measures the producer, not the generator.
    """
    rng = random.Random(seed)
    # In pieces: `randbytes` of more than 256 MiB overflows (it draws n * 8 bits at once).
    raw, piece = records * size * 3 // 4 + 3, 3 << 26
    blob = b"".join(base64.b64encode(rng.randbytes(min(piece, raw - at)))
                    for at in range(0, raw, piece))
    return [
        (b"%010d" % i, blob[i * size:(i + 1) * size])
        for i in range(records)
    ]


def make_text_payloads(records: int, size: int, seed: int = 7) -> list[Payload]:
    """As `make_payloads`, with values that compress as text does (for compressed topics).

    Random bytes do not compress, and nobody compresses a topic of them. These values are
    slices of a 4 MiB text of words from a 500-word vocabulary with numbers between them,
    taken at scattered places, so that a batch's neighbouring records share words but not
    whole passages (which would flatter the codecs). Printable, no tab or newline.
    """
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocabulary = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(500)]
    words = rng.choices(vocabulary, k=700_000)
    for i in range(0, len(words), 7):
        words[i] = str(rng.randrange(100_000))
    text = " ".join(words).encode()
    span = len(text) - size
    stride = 1_000_003  # a prime: consecutive records start far apart
    return [
        (b"%010d" % i, text[(i * stride) % span:(i * stride) % span + size])
        for i in range(records)
    ]


def _seed_blocking(bootstrap: str, topic: str, partitions: int, payloads: list[Payload],
                   codec: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 20,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 2_097_151,
        "enable.idempotence": False,
        "acks": 1,
        "compression.type": codec,
    })
    produce = producer.produce
    for i, (key, value) in enumerate(payloads):
        while True:
            try:
                produce(topic, value, key, i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"seeding {topic}: {remaining} records not delivered")


async def seed(bootstrap: str, topic: str, partitions: int, payloads: list[Payload],
               codec: str = "none") -> float:
    """Produce `payloads` round-robin over the partitions with confluent-kafka; returns seconds.

    Batches of up to 1 MB (before compression), compressed with `codec` (Kafka's name).
    Verifies through the high watermarks that every record landed.
    """
    started = time.perf_counter()
    await asyncio.to_thread(_seed_blocking, bootstrap, topic, partitions, payloads, codec)
    async with HighWatermarks(bootstrap, topic, partitions) as marks:
        landed = await marks.total()
    if landed != len(payloads):
        raise RuntimeError(f"seeding {topic}: {landed} of {len(payloads)} records landed")
    return time.perf_counter() - started


# --------------------------------------------------------------------------- topics


async def create_topics(bootstrap: str, names: Iterable[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1) for name in names])
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, names: Iterable[str]) -> None:
    """Drop a finished run's topics, so memory brokers do not grow across runs."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics(list(names))
    finally:
        await admin.close()


async def sample(bootstrap: str, topic: str, partitions: int, count: int) -> list[list[Payload]]:
    """The first `count` (key, value) pairs of each partition, to check a mirror's output."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        found: list[list[Payload]] = [[] for _ in tps]
        deadline = time.perf_counter() + 30
        while any(len(part) < count for part in found) and time.perf_counter() < deadline:
            for tp, batch in (await consumer.getmany(timeout_ms=200)).items():
                found[tp.partition].extend((r.key or b"", r.value or b"") for r in batch)
        return [part[:count] for part in found]
    finally:
        await consumer.stop()


async def verify_mirror(env: BenchEnv) -> str | None:
    """None if the target partitions match the source's in count and leading records."""
    topic = env.target_topic
    async with HighWatermarks(env.source_bootstrap, env.source_topic, env.partitions) as marks:
        source_counts = await marks.per_partition()
    async with HighWatermarks(env.target_bootstrap, topic, env.partitions) as marks:
        target_counts = await marks.per_partition()
    if source_counts != target_counts:
        return f"per-partition counts differ: source {source_counts}, target {target_counts}"
    source_head, target_head = await asyncio.gather(
        sample(env.source_bootstrap, env.source_topic, env.partitions, 100),
        sample(env.target_bootstrap, topic, env.partitions, 100),
    )
    if source_head != target_head:
        return "the first records of the target partitions differ from the source's"
    return None
