"""Record batches copied as bytes between two Apache Kafka clusters (issue 24's foundation).

No replicator yet: the test itself drives the pieces the batch path will be made of --
`kafka.rawbatches` fetches a source partition's batches as bytes, `core.batches` splits them,
routes them and rewrites their headers for an idempotent target producer, and
`kafka.rawbatches` produces each one (acks=-1). Sources are written by librdkafka (lz4, zstd,
snappy: aiokafka has no library for those here) and by aiokafka (uncompressed); every record
is then read back from both sides by librdkafka, which decompresses them all, and compared.
The target's batches are fetched raw too: same codec, same records section, byte for byte.
A transactional topic read under read_committed loses exactly its aborted batches and markers.

Apache Kafka only, for now: the embedded Tansu broker answers an idempotent InitProducerId
with error -1 (UNKNOWN_SERVER_ERROR) and accepts a batch with compaction gaps that Kafka
refuses; what the batch path does on Tansu is still to settle.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaClient, TopicPartition
from helpers import Record, create_topic, produce

from mirrorline.core.batches import (
    AbortedTransactions,
    Path,
    Reason,
    next_sequence,
    parse_header,
    rewrite,
    route,
    split,
)
from mirrorline.dev.brokers import LocalBroker
from mirrorline.kafka.rawbatches import READ_COMMITTED, RawBatchError, RawBatches

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

CODECS = ("lz4", "zstd", "snappy")
ROUNDS = 4  # flushes per compressed source: at least as many batches
PER_ROUND = 15
#: The records carry fixed timestamps from 2023: time-based retention would delete them.
KEEP = {"retention.ms": "-1"}


def _record(i: int) -> Record:
    headers = [("n", b"%d" % i), ("empty", b"")] if i % 3 else []
    return Record(value=b"value-%d-" % i + b"x" * (i * 13 % 200),
                  key=None if i % 5 == 0 else b"key-%d" % (i % 7), headers=headers,
                  timestamp_ms=1_700_000_000_000 + i * 1000 - (i % 4) * 1500)


def _write_librdkafka(bootstrap: str, topic: str, codec: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                         "linger.ms": 1000, "enable.idempotence": True})
    for round_ in range(ROUNDS):
        for i in range(round_ * PER_ROUND, (round_ + 1) * PER_ROUND):
            record = _record(i)
            producer.produce(topic, value=record.value, key=record.key, partition=0,
                             headers=list(record.headers), timestamp=record.timestamp_ms)
        assert producer.flush(30) == 0


def _read_all(bootstrap: str, topic: str, count: int) -> list[tuple[Any, ...]]:
    """Every record of partition 0, as librdkafka reads it (decompressed)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as RdPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False})
    consumer.assign([RdPartition(topic, 0, 0)])
    out: list[tuple[Any, ...]] = []
    try:
        while len(out) < count:
            message = consumer.poll(30)
            assert message is not None, f"{topic}: {len(out)} of {count} records read"
            assert message.error() is None, message.error()
            out.append((message.offset(), message.timestamp(), message.key(), message.value(),
                        message.headers() or []))
    finally:
        consumer.close()
    return out


@pytest.fixture
async def raw(primary: LocalBroker, backup: LocalBroker
              ) -> AsyncIterator[tuple[RawBatches, RawBatches]]:
    clients = [AIOKafkaClient(bootstrap_servers=c.bootstrap) for c in (primary, backup)]
    for client in clients:
        await client.bootstrap()
    try:
        yield RawBatches(clients[0]), RawBatches(clients[1])
    finally:
        for client in clients:
            await client.close()


async def _raw_batches(side: RawBatches, tp: TopicPartition) -> list[bytes]:
    """Every batch of `tp`, raw, fetched in small pieces (so fetches end mid-batch)."""
    out: list[bytes] = []
    position = 0
    while True:
        fetched = (await side.fetch({tp: position}, partition_max_bytes=700))[tp]
        fetched.check(tp)
        cut = split(fetched.records)
        out.extend(bytes(b.data) for b in cut.batches)
        if cut.next_offset is None:
            assert position >= fetched.high_watermark
            return out
        position = cut.next_offset


async def test_batches_copied_as_bytes_keep_every_record_and_the_codec(
        primary: LocalBroker, backup: LocalBroker, unique: str,
        raw: tuple[RawBatches, RawBatches]) -> None:
    source, target = raw
    topics = {codec: f"{unique}-{codec}" for codec in (*CODECS, "none")}
    for topic in topics.values():
        await create_topic(primary.bootstrap, topic, configs=KEEP)
        await create_topic(backup.bootstrap, topic, configs=KEEP)
    for codec in CODECS:
        await asyncio.to_thread(_write_librdkafka, primary.bootstrap, topics[codec], codec)
    total = ROUNDS * PER_ROUND
    for round_ in range(ROUNDS):  # each call waits for its acks: a batch (or more) each
        await produce(primary.bootstrap, topics["none"],
                      [_record(i) for i in range(round_ * PER_ROUND, (round_ + 1) * PER_ROUND)])

    producer_id, epoch = await target.init_producer_id()
    for codec, topic in topics.items():
        tp = TopicPartition(topic, 0)
        batches = await _raw_batches(source, tp)
        assert len(batches) >= ROUNDS, codec
        sequence = 0
        for data in batches:
            batch = split(data).batches[0]
            assert batch.header is not None and batch.header.codec == codec
            assert route(batch, target_max_message_bytes=1 << 20).path is Path.BATCH
            out = rewrite(batch, producer_id=producer_id, producer_epoch=epoch,
                          base_sequence=sequence)
            assert await target.produce(tp, out) == batch.base_offset
            sequence = next_sequence(sequence, batch.header.record_count)

        copied = await _raw_batches(target, tp)
        assert [(h.codec, h.producer_id, h.record_count) for h in map(parse_header, copied)] == [
            (codec, producer_id, parse_header(b).record_count) for b in batches]
        assert [b[61:] for b in copied] == [b[61:] for b in batches], (
            f"{codec}: the records sections differ")
        expected = await asyncio.to_thread(_read_all, primary.bootstrap, topic, total)
        assert await asyncio.to_thread(_read_all, backup.bootstrap, topic, total) == expected
        assert [(r[2], r[3], r[4]) for r in expected[:3]] == [
            (r.key, r.value, list(r.headers) or []) for r in map(_record, range(3))]


async def test_a_batch_with_compaction_gaps_is_refused_as_it_is(
        backup: LocalBroker, unique: str, raw: tuple[RawBatches, RawBatches]) -> None:
    """Why `route` sends gapped batches to the record path and `rewrite` refuses them: Kafka's
    own log cleaner made this batch (tests/java/BatchFixtures.java), and a broker refuses it
    from a producer."""
    import json
    from pathlib import Path as FilePath

    fixtures = json.loads((FilePath(__file__).parent.parent / "unit" / "data"
                           / "kafka_batches.json").read_text())
    case = next(c for c in fixtures["cases"] if c["name"] == "compacted-gaps-none")
    batch = split(bytes.fromhex(case["bytes"])).batches[0]
    tp = TopicPartition(f"{unique}-gaps", 0)
    await create_topic(backup.bootstrap, tp.topic, configs=KEEP)
    _, target = raw
    # As the cleaner left it: no producer id, a CRC that holds (base offset and leader epoch
    # lie outside it). `rewrite` itself refuses such a batch; the broker is asked here.
    with pytest.raises(RawBatchError, match=f"{tp.topic}-0: INVALID_RECORD"):
        await target.produce(tp, bytes(batch.data))
    plain = split(bytes.fromhex(next(c for c in fixtures["cases"]
                                     if c["name"] == "plain-none")["bytes"])).batches[0]
    assert await target.produce(tp, rewrite(plain)) == 0


def _write_transactions(bootstrap: str, topic: str, transactional_id: str) -> list[bytes]:
    """Three transactions, the middle one aborted, and plain records between; the values
    a read_committed reader sees, in order."""
    from confluent_kafka import Producer

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                    "compression.type": "lz4"})
    plain = Producer({"bootstrap.servers": bootstrap})
    txn.init_transactions(30)
    committed: list[bytes] = []
    for round_, outcome in enumerate(("commit", "abort", "commit")):
        txn.begin_transaction()
        for i in range(5):
            value = b"txn-%d-%d" % (round_, i)
            txn.produce(topic, value=value, key=b"k%d" % i, partition=0)
            if outcome == "commit":
                committed.append(value)
        assert txn.flush(30) == 0
        (txn.commit_transaction if outcome == "commit" else txn.abort_transaction)(30)
        plain.produce(topic, value=b"plain-%d" % round_, partition=0)
        assert plain.flush(30) == 0
        committed.append(b"plain-%d" % round_)
    return committed


async def test_read_committed_leaves_out_aborted_batches_and_markers(
        primary: LocalBroker, backup: LocalBroker, unique: str,
        raw: tuple[RawBatches, RawBatches]) -> None:
    """A fetch under read_committed still carries the aborted transaction's batches and every
    transaction marker; `AbortedTransactions` and `route` leave exactly those out, and the
    target holds what a read_committed reader of the source sees."""
    source, target = raw
    tp = TopicPartition(f"{unique}-txn", 0)
    await create_topic(primary.bootstrap, tp.topic, configs=KEEP)
    await create_topic(backup.bootstrap, tp.topic, configs=KEEP)
    committed = await asyncio.to_thread(_write_transactions, primary.bootstrap, tp.topic,
                                        f"{unique}-txn")
    producer_id, epoch = await target.init_producer_id()
    sequence = 0
    position = 0
    reasons: list[Reason] = []
    while True:
        fetched = (await source.fetch({tp: position}, isolation_level=READ_COMMITTED))[tp]
        fetched.check(tp)
        cut = split(fetched.records)
        if cut.next_offset is None:
            break
        aborted = AbortedTransactions(fetched.aborted_transactions)
        for batch in cut.batches:
            way = route(batch, aborted=aborted.is_aborted(batch),
                        target_max_message_bytes=1 << 20)
            reasons.append(way.reason)
            if way.path is Path.BATCH:
                assert batch.header is not None
                await target.produce(tp, rewrite(batch, producer_id=producer_id,
                                                 producer_epoch=epoch, base_sequence=sequence))
                sequence = next_sequence(sequence, batch.header.record_count)
        position = cut.next_offset
    assert reasons.count(Reason.CONTROL) == 3
    assert Reason.ABORTED in reasons
    copied = await asyncio.to_thread(_read_all, backup.bootstrap, tp.topic, len(committed))
    assert [value for _, _, _, value, _ in copied] == committed
