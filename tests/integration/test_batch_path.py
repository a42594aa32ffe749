"""The batch path (docs/batch-path.md) through real replicator processes on Apache Kafka.

One set of source topics is written once for the module: lz4, zstd, snappy, gzip and
uncompressed topics produced with a linger (batches of about a hundred records); an lz4 topic
written one record per batch, as a producer without linger writes; a transactional topic
with committed and aborted transactions between plain records; and a compacted topic that
Kafka's log cleaner has cleaned before any copy starts, so whole batches sit next to
batches with offset gaps. A replicator then mirrors all of them for each value of
`mirrorline.batch.path` (`on`, `auto`, `off`), its source consumer reading
`read_committed`, with `offset.lag.max = 0` (a sync per copied record), and the tests look
at what it left behind: every record as a read_committed reader of the source sees it (key,
value, headers, timestamp, partition, order), the target's batches read raw (codec, record
count, records section), the offset syncs, and each partition's copy path in the
replicator's GetStatus.

Where the batch path is used, the target's batches keep the source's codec and record
count. The record path (`off`) cannot: it re-batches the records with its producer's
`compression.type`, uncompressed by default. So each test's `off` case asserts that instead,
and a test fails when the path is switched off where it says the path is used. A SIGKILL
mid-stream with the path on must still leave every record exactly once on the target.

Nothing is mocked. Apache Kafka only: the compacted topic needs Kafka's log cleaner, and
what the batch path does on Tansu is still to settle (see test_rawbatches.py).
"""

from __future__ import annotations

import contextlib
import random
import secrets
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from helpers import (
    PAST_MS,
    Consumed,
    Record,
    aliases,
    consume_all,
    produce,
    raw_batches,
    shape,
    steady,
    wait_for,
)
from kafka_checks import read_all, ready_topic
from procs import ServiceProcess, mm2_config, replicator

from mirrorline.core.batches import HEADER_SIZE, BatchHeader, parse_header
from mirrorline.core.wire import OffsetSync
from mirrorline.dev.brokers import LocalBroker
from mirrorline.kafka.watermarks import high_watermarks, totals

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

CODECS = ("lz4", "zstd", "snappy", "gzip", "none")
PARTITIONS = 2
PER_TOPIC = 400  # records of each codec topic, over both partitions
SMALL = 100  # records of the one-record-per-batch topic
TRANSACTIONS = 6  # of 80 records per partition; every third one aborted
ROUNDS = 6  # of the compacted topic, one segment each
#: What the record path writes: the target producer's default `compression.type`.
RECORD_PATH_CODEC = "none"
MODES = ("on", "auto", "off")

COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "100",  # rounds carry timestamps a second apart: one segment each
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "100",
}


def record(i: int, tag: str, partitions: int = PARTITIONS) -> Record:
    """Null keys and values now and then, repeated and empty headers, timestamps out of
    order within a batch; values of varied length, partly incompressible."""
    filler = random.Random(i).randbytes(i % 40) + b"x" * (i * 13 % 150)
    return Record(value=None if i % 17 == 0 else f"{tag}-{i}-".encode() + filler,
                  key=None if i % 5 == 0 and i % 17 else f"key-{i % 7}".encode(),
                  headers=[("n", str(i).encode()), ("empty", b""), ("n", b"again")]
                  if i % 3 else [],
                  timestamp_ms=PAST_MS + i * 10 - (i % 4) * 25, partition=i % partitions)


@dataclass(frozen=True)
class Sources:
    """The module's source topics and what a read_committed reader of each one sees."""

    codecs: Mapping[str, str]  # codec -> topic
    small: str
    transactional: str
    compacted: str
    aborted: frozenset[bytes]  # values of the aborted transactions' records
    records: Mapping[str, dict[int, list[Consumed]]]  # topic -> partition -> records

    @property
    def topics(self) -> list[str]:
        return [*self.codecs.values(), self.small, self.transactional, self.compacted]


async def write_transactions(bootstrap: str, topic: str, transactional_id: str
                             ) -> frozenset[bytes]:
    """Transactions of 80 lz4 records per partition, every third one aborted, with 40
    plain zstd records per partition after each (batches of tens of records: under `auto`
    not small); the aborted records' values."""
    txn = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                           enable_idempotence=True, linger_ms=50, compression_type="lz4")
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50,
                             compression_type="zstd")
    await txn.start()
    await plain.start()
    aborted: set[bytes] = set()
    n = 0
    try:
        for t in range(TRANSACTIONS):
            abort = t % 3 == 1
            await txn.begin_transaction()
            futures = []
            for _ in range(80 * PARTITIONS):
                r = record(n, "aborted" if abort else "committed")
                if abort and r.value is not None:
                    aborted.add(r.value)
                futures.append(await txn.send(topic, r.value, key=r.key, partition=r.partition,
                                              timestamp_ms=r.timestamp_ms,
                                              headers=list(r.headers)))
                n += 1
            for future in futures:
                await future
            await (txn.abort_transaction() if abort else txn.commit_transaction())
            futures = []
            for _ in range(40 * PARTITIONS):
                r = record(n, "plain")
                futures.append(await plain.send(topic, r.value, key=r.key,
                                                partition=r.partition,
                                                timestamp_ms=r.timestamp_ms,
                                                headers=list(r.headers)))
                n += 1
            for future in futures:
                await future
    finally:
        await txn.stop()
        await plain.stop()
    return frozenset(aborted)


async def write_compacted(bootstrap: str, topic: str) -> None:
    """ROUNDS rounds, each one segment (timestamps a second apart roll it): a batch of five
    keys every round overwrites and one of the round's own, then a batch of three keys of
    its own. The cleaner leaves the first batch of every round but the last two with one
    record over six offsets (gaps) and the second batch whole."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=100,
                                compression_type="lz4")
    await producer.start()
    try:
        for round_ in range(ROUNDS):
            at = PAST_MS + round_ * 1000
            overwritten = [(f"k{k}", f"r{round_}-k{k}") for k in range(5)]
            own = [(f"own{round_}", f"r{round_}-own")]
            whole = [(f"b{round_}-{j}", f"r{round_}-b{j}") for j in range(3)]
            for batch in (overwritten + own, whole):
                futures = [await producer.send(topic, value.encode(), key=key.encode(),
                                               partition=0, timestamp_ms=at + i,
                                               headers=[("round", str(round_).encode())])
                           for i, (key, value) in enumerate(batch)]
                for future in futures:
                    await future
    finally:
        await producer.stop()


async def cleaned(bootstrap: str, topic: str) -> None:
    """Until the cleaner has removed the overwritten records of every round but the last
    two (the last is the active segment, which is never cleaned; the one before holds the
    newest values of the overwritten keys). Nothing changes the log after that."""
    async def done() -> bool:
        values = [r.value or b"" for r in (await consume_all(bootstrap, topic))[0]]
        return not any(v.startswith(f"r{round_}-k".encode())
                       for v in values for round_ in range(ROUNDS - 2))
    await wait_for(done, 120, f"the log cleaner never cleaned {topic}", interval=0.5)


@pytest.fixture(scope="module")
async def sources(primary: LocalBroker) -> Sources:
    prefix = f"t{secrets.token_hex(4)}"
    compacted = f"{prefix}-compacted"
    await ready_topic(primary.bootstrap, compacted, 1, COMPACTED)
    await write_compacted(primary.bootstrap, compacted)  # cleaned while the rest is written
    codecs = {codec: f"{prefix}-{codec}" for codec in CODECS}
    for codec, topic in codecs.items():
        await ready_topic(primary.bootstrap, topic, PARTITIONS)
        await produce(primary.bootstrap, topic, [record(i, codec) for i in range(PER_TOPIC)],
                      compression=None if codec == "none" else codec, linger_ms=100)
    small = f"{prefix}-small"
    await ready_topic(primary.bootstrap, small, 1)
    await produce(primary.bootstrap, small, [record(i, "small", 1) for i in range(SMALL)],
                  compression="lz4", one_per_batch=True)
    transactional = f"{prefix}-txn"
    await ready_topic(primary.bootstrap, transactional, PARTITIONS)
    aborted = await write_transactions(primary.bootstrap, transactional, f"{prefix}-txn")
    await cleaned(primary.bootstrap, compacted)
    topics = [*codecs.values(), small, transactional, compacted]
    records = {topic: await read_all(primary.bootstrap, topic) for topic in topics}
    return Sources(codecs, small, transactional, compacted, aborted, records)


@dataclass(frozen=True)
class Mirror:
    """A replicator's flow with `mirrorline.batch.path = mode`."""

    mode: str
    source_alias: str
    target_alias: str
    proc: ServiceProcess

    @property
    def flow(self) -> str:
        return f"{self.source_alias}->{self.target_alias}"

    def remote(self, topic: str) -> str:
        return f"{self.source_alias}.{topic}"

    @property
    def batches_used(self) -> bool:
        """Whether the batch path copies the sources written with a linger."""
        return self.mode != "off"


@pytest.fixture(scope="module", params=MODES)
async def mirror(request: pytest.FixtureRequest, sources: Sources,
                 primary: LocalBroker, backup: LocalBroker,
                 tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Mirror]:
    """A replicator of every source topic under `mode`, once it has copied every record
    (aliases of its own: its remote topics and offset-syncs topic are its own).

    One process per mode: one process running all three flows (three pairs of aliases for
    the same two clusters) started copying about 30 s later than each process alone, in
    both runs tried."""
    mode: str = request.param
    a, b = aliases()
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {
        "topics": ",".join(sources.topics), "offset.lag.max": "0",
        "mirrorline.batch.path": mode}}) + f"{a}.consumer.isolation.level = read_committed\n"
    tmp = tmp_path_factory.mktemp(f"batch-path-{mode}")
    async with replicator(config, tmp, name=f"replicator-{mode}") as proc:
        mirror = Mirror(mode, a, b, proc)
        for topic, records in sources.records.items():
            await consume_all(backup.bootstrap, mirror.remote(topic), timeout=60,
                              expected=sum(len(rs) for rs in records.values()))
        yield mirror


def assert_same_records(source: Mapping[int, Sequence[Consumed]],
                        target: Mapping[int, Sequence[Consumed]], what: str) -> None:
    """Same partitions, and in each the same records (key, value, headers, timestamp) in
    the same order."""
    assert sorted(target) == sorted(source), f"{what}: partitions {sorted(target)}"
    for p, records in source.items():
        want, got = [shape(r) for r in records], [shape(r) for r in target[p]]
        if got != want:
            first = next((i for i, (w, g) in enumerate(zip(want, got, strict=False)) if w != g),
                         min(len(want), len(got)))
            raise AssertionError(
                f"{what} partition {p}: {len(got)} records on the target for {len(want)} on "
                f"the source, first difference at record {first}: "
                f"{want[first] if first < len(want) else None!r} != "
                f"{got[first] if first < len(got) else None!r}")


async def headers(bootstrap: str, topic: str, partition: int = 0
                  ) -> list[tuple[BatchHeader, bytes]]:
    """(header, records section) of every batch of the partition, as stored."""
    return [(parse_header(b), b[HEADER_SIZE:])
            for b in await raw_batches(bootstrap, topic, partition)]


def shapes(batches: Sequence[tuple[BatchHeader, bytes]]) -> list[tuple[str, int]]:
    return [(h.codec, h.record_count) for h, _ in batches]


async def copy_paths(proc: ServiceProcess, flow: str, topics: Sequence[str], path: str
                     ) -> dict[tuple[str, int], str]:
    """Wait until the replicator's GetStatus shows `path` ("batches" or "records") for
    every partition of `topics` in `flow`; their reasons by (topic, partition)."""
    seen: dict[tuple[str, int], tuple[str, str]] = {}

    async def shown() -> bool:
        seen.clear()
        seen.update({(p.source_topic, p.partition): (p.copy_path, p.copy_path_reason)
                     for p in (await proc.replicator_status()).partitions
                     if p.flow == flow and p.source_topic in topics})
        return bool(seen) and {t for t, _ in seen} == set(topics) and all(
            copy_path == path for copy_path, _ in seen.values())
    try:
        await wait_for(shown, 15, f"status does not say copy_path {path!r}", interval=0.3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; (copy_path, reason) per partition: {seen}") from None
    return {tp: reason for tp, (_, reason) in seen.items()}


async def assert_synced_exactly(mirror: Mirror, primary: LocalBroker, topic: str,
                                source: Mapping[int, Sequence[Consumed]],
                                target: Mapping[int, Sequence[Consumed]]) -> None:
    """With offset.lag.max = 0: every offset sync of `topic` the flow published pairs a
    source record with the very record it became on the target (across compaction gaps,
    left-out transactions and markers), and each partition's last copied record is synced,
    so a group caught up on the source translates to the target's end."""
    sources = {p: {r.offset: r for r in rs} for p, rs in source.items()}
    targets = {p: {r.offset: r for r in rs} for p, rs in target.items()}
    last = {p: max(records) for p, records in sources.items() if records}
    synced: dict[int, dict[int, int]] = {}

    async def all_synced() -> bool:
        syncs = await consume_all(primary.bootstrap,
                                  f"mm2-offset-syncs.{mirror.target_alias}.internal")
        for r in syncs[0]:
            sync = OffsetSync.decode(r.key, r.value)
            if sync.topic == topic:
                synced.setdefault(sync.partition, {})[sync.upstream_offset] = \
                    sync.downstream_offset
        return all(offset in synced.get(p, {}) for p, offset in last.items())
    await wait_for(all_synced, 30, f"{topic}: the last copied records are not synced",
                   interval=0.5)
    for p, pairs in synced.items():
        for upstream, downstream in pairs.items():
            where = f"{topic}-{p}: offset sync {upstream} -> {downstream}"
            assert upstream in sources[p], f"{where}: no such source record"
            assert downstream in targets[p], f"{where}: no such target record"
            assert shape(targets[p][downstream]) == shape(sources[p][upstream]), (
                f"{where} pairs different records")


async def test_compressed_and_plain_topics_arrive_record_for_record_in_their_codec(
        mirror: Mirror, sources: Sources, primary: LocalBroker,
        backup: LocalBroker) -> None:
    """On the batch path every target batch is the source batch: same codec, same record
    count, the same records section byte for byte. `off` re-batches them uncompressed."""
    for topic in sources.codecs.values():
        copied = await read_all(backup.bootstrap, mirror.remote(topic))
        assert_same_records(sources.records[topic], copied, topic)
        await assert_synced_exactly(mirror, primary, topic, sources.records[topic], copied)
    for codec, topic in sources.codecs.items():
        for p in range(PARTITIONS):
            source = await headers(primary.bootstrap, topic, p)
            target = await headers(backup.bootstrap, mirror.remote(topic), p)
            assert {h.codec for h, _ in source} == {codec}
            if mirror.batches_used:
                assert shapes(target) == shapes(source), f"{topic}-{p}: (codec, records)"
                assert [s for _, s in target] == [s for _, s in source], (
                    f"{topic}-{p}: the records sections differ")
            else:
                assert {h.codec for h, _ in target} == {RECORD_PATH_CODEC}, topic
    await copy_paths(mirror.proc, mirror.flow, list(sources.codecs.values()),
                     "batches" if mirror.batches_used else "records")


async def test_one_record_batches_are_rebatched_under_auto_and_copied_as_they_are_under_on(
        mirror: Mirror, sources: Sources, primary: LocalBroker,
        backup: LocalBroker) -> None:
    """A producer without linger writes a batch per record. `on` copies each one as it is;
    `auto` sees the small batches and re-batches their records (fewer, larger batches on
    the target), and says why in status; `off` re-batches them as every record."""
    topic, remote = sources.small, mirror.remote(sources.small)
    copied = await read_all(backup.bootstrap, remote)
    assert_same_records(sources.records[topic], copied, topic)
    await assert_synced_exactly(mirror, primary, topic, sources.records[topic], copied)
    source = await headers(primary.bootstrap, topic)
    target = await headers(backup.bootstrap, remote)
    assert shapes(source) == [("lz4", 1)] * SMALL
    if mirror.mode == "on":
        assert shapes(target) == shapes(source)
        await copy_paths(mirror.proc, mirror.flow, [topic], "batches")
    else:
        assert len(target) < len(source), f"{len(target)} batches for {SMALL} records"
        reasons = await copy_paths(mirror.proc, mirror.flow, [topic], "records")
        if mirror.mode == "auto":
            assert all(reasons.values()), f"status gives no reason: {reasons}"


async def test_a_transactional_source_arrives_committed_without_markers(
        mirror: Mirror, sources: Sources, primary: LocalBroker,
        backup: LocalBroker) -> None:
    """Read read_committed, the source gives committed and plain records, aborted batches
    and transaction markers: the target holds exactly what a read_committed reader of the
    source sees, no marker copied as a record, and no open transaction (its read_committed
    readers see it all). On the batch path each committed batch lands as it was."""
    topic, remote = sources.transactional, mirror.remote(sources.transactional)
    committed = await read_all(backup.bootstrap, remote)
    everything = await read_all(backup.bootstrap, remote, isolation="read_uncommitted")
    assert_same_records(sources.records[topic], everything, f"{topic} (read_uncommitted)")
    assert_same_records(sources.records[topic], committed, f"{topic} (read_committed)")
    leaked = {r.value for rs in everything.values() for r in rs} & sources.aborted
    assert not leaked, f"{len(leaked)} aborted records reached the target"
    await assert_synced_exactly(mirror, primary, topic, sources.records[topic], committed)
    for p in range(PARTITIONS):
        source = await headers(primary.bootstrap, topic, p)
        target = await headers(backup.bootstrap, remote, p)
        assert not [h for h, _ in target if h.is_control or h.is_transactional], (
            f"{remote}-{p}: control or transactional batches on the target")
        kept = {r.offset for r in sources.records[topic][p]}
        data = [(h, s) for h, s in source if not h.is_control and h.base_offset in kept]
        assert {h.codec for h, _ in data} == {"lz4", "zstd"}
        if mirror.batches_used:
            assert shapes(target) == shapes(data), f"{topic}-{p}: (codec, records)"
            assert [s for _, s in target] == [s for _, s in data]
        else:
            assert {h.codec for h, _ in target} == {RECORD_PATH_CODEC}
    await copy_paths(mirror.proc, mirror.flow, [topic],
                     "batches" if mirror.batches_used else "records")


async def test_a_compacted_source_arrives_survivor_for_survivor(
        mirror: Mirror, sources: Sources, primary: LocalBroker,
        backup: LocalBroker) -> None:
    """The cleaner left batches with offset gaps (which a broker refuses from a producer:
    they go the record path) between whole ones. Every survivor arrives, in order, at
    offsets without gaps; under `on` the whole batches still land as they were."""
    topic, remote = sources.compacted, mirror.remote(sources.compacted)
    target = await read_all(backup.bootstrap, remote)
    assert_same_records(sources.records[topic], target, topic)
    assert [r.offset for r in target[0]] == list(range(len(target[0])))
    await assert_synced_exactly(mirror, primary, topic, sources.records[topic], target)
    source = await headers(primary.bootstrap, topic)
    gapped = [(h, s) for h, s in source if not h.contiguous]
    whole = [(h, s) for h, s in source if h.contiguous]
    assert gapped and whole, [(h.record_count, h.last_offset_delta + 1) for h, _ in source]
    copied = await headers(backup.bootstrap, remote)
    if mirror.mode == "on":
        sections = {s for _, s in whole}
        assert [(h.codec, s) for h, s in copied if s in sections] == [
            (h.codec, s) for h, s in whole], "the whole batches did not land as they were"
    elif mirror.mode == "off":
        assert {h.codec for h, _ in copied} == {RECORD_PATH_CODEC}
        await copy_paths(mirror.proc, mirror.flow, [topic], "records")


async def target_total(backup: LocalBroker, topic: str) -> int:
    return totals(await high_watermarks({"bootstrap_servers": backup.bootstrap}, [topic])
                  ).get(topic, 0)


async def test_sigkill_mid_stream_on_the_batch_path_then_restart_copies_each_record_once(
        primary: LocalBroker, backup: LocalBroker, unique: str,
        tmp_path: Path) -> None:
    """Records keep coming (zstd batches) while the replicator copies batches as they are;
    SIGKILLed mid-stream and restarted, it leaves every record exactly once and in order on
    the target, every target batch still zstd."""
    topic = f"{unique}-crash"
    await ready_topic(primary.bootstrap, topic, PARTITIONS)
    a, b = aliases()
    remote = f"{a}.{topic}"
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {
        "topics": topic, "mirrorline.batch.path": "on"}})

    async def more(than: int) -> bool:
        return await target_total(backup, remote) > than

    async with contextlib.AsyncExitStack() as stack:
        async with steady(primary.bootstrap, topic, PARTITIONS, burst=40, pause_s=0.05,
                          value=lambda n: str(n).encode().rjust(100, b"."),
                          key=lambda n: str(n).encode(), compression="zstd"):
            async with replicator(config, tmp_path, name="first") as first:
                await wait_for(lambda: more(500), 30, "replication never got going")
                await first.signal(signal.SIGKILL)
                assert await first.wait() == -signal.SIGKILL
            killed_at = await target_total(backup, remote)
            second = await stack.enter_async_context(
                replicator(config, tmp_path, name="second"))
            await wait_for(lambda: more(killed_at + 500), 30,
                           "the restarted replicator did not continue")
        source = await read_all(primary.bootstrap, topic)
        target: dict[int, list[Consumed]] = {}

        async def caught_up() -> bool:  # duplicates would make counting lie: the tails
            target.update(await read_all(backup.bootstrap, remote))
            return all(target[p] and target[p][-1].value == source[p][-1].value
                       for p in range(PARTITIONS))
        await wait_for(caught_up, 60, "the target never caught up", interval=0.5)
        assert_same_records(source, target, f"{topic} after SIGKILL")
        for p in range(PARTITIONS):
            codecs = {h.codec for h, _ in await headers(backup.bootstrap, remote, p)}
            assert codecs == {"zstd"}, f"{remote}-{p}: batches in {codecs}"
        await copy_paths(second, f"{a}->{b}", [topic], "batches")
