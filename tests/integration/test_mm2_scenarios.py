"""MirrorConnectorsIntegrationBaseTest's scenarios that need only replication, as black boxes.

Each test gives the two local brokers fresh cluster aliases, so the internal topics whose
names embed an alias (offset syncs, progress) are its own even on shared brokers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from helpers import Record, aliases, consume_all, create_topic, produce, wait_for
from procs import mm2_config, replicator

from mirrorline.core.wire import Heartbeat
from mirrorline.dev.brokers import LocalBroker
from mirrorline.kafka.watermarks import high_watermarks

pytestmark = pytest.mark.integration


async def existing(bootstrap: str, topics: list[str]) -> set[str]:
    return {tp.topic for tp in await high_watermarks({"bootstrap_servers": bootstrap}, topics)}


async def test_active_active_replication_without_loops(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """testReplication (replication part): both directions, remote topics matched by the filter
    too, yet nothing is mirrored back; topics created later appear on the other side."""
    a, b = aliases()
    topic = f"{unique}-test-topic-1"
    for bootstrap, label in ((primary.bootstrap, b"on-a"), (backup.bootstrap, b"on-b")):
        await create_topic(bootstrap, topic, 4)
        await produce(bootstrap, topic, [Record(label + str(i).encode(), partition=i % 4)
                                         for i in range(100)])
    heartbeat = Heartbeat(a, "elsewhere", 1_700_000_000_000)
    await produce(primary.bootstrap, "heartbeats",
                  [Record(heartbeat.encode_value(), key=heartbeat.encode_key())])
    filters = {"topics": f"{unique}-test-topic-.*, {a}\\.{unique}-test-topic-.*, "
                         f"{b}\\.{unique}-test-topic-.*",
               "refresh.topics.interval.seconds": "2"}
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": filters, f"{b}->{a}": filters})
    async with replicator(config, tmp_path):
        on_b = await consume_all(backup.bootstrap, f"{a}.{topic}", expected=100)
        on_a = await consume_all(primary.bootstrap, f"{b}.{topic}", expected=100)
        assert sorted(r.value for rs in on_b.values() for r in rs) == \
            sorted(b"on-a" + str(i).encode() for i in range(100))
        assert sorted(r.value for rs in on_a.values() for r in rs) == \
            sorted(b"on-b" + str(i).encode() for i in range(100))
        # Heartbeats travel even though the topic filter does not name them.
        beats = await consume_all(backup.bootstrap, f"{a}.heartbeats", expected=1)
        assert any(r.key == heartbeat.encode_key() and r.value == heartbeat.encode_value()
                   for rs in beats.values() for r in rs)
        # The offset syncs of flow a->b live on a's cluster, named after b.
        assert await existing(primary.bootstrap, [f"mm2-offset-syncs.{b}.internal"])

        await create_topic(primary.bootstrap, f"{unique}-test-topic-2", 3)
        await produce(primary.bootstrap, f"{unique}-test-topic-2",
                      [Record(b"x", partition=0) for _ in range(10)])
        await create_topic(backup.bootstrap, f"{unique}-test-topic-3", 2)
        await produce(backup.bootstrap, f"{unique}-test-topic-3",
                      [Record(b"y", partition=0) for _ in range(10)])
        later_b = await consume_all(backup.bootstrap, f"{a}.{unique}-test-topic-2", expected=10)
        later_a = await consume_all(primary.bootstrap, f"{b}.{unique}-test-topic-3",
                                    expected=10)
        assert [len(later_b[p]) for p in sorted(later_b)] == [10, 0, 0]
        assert [len(later_a[p]) for p in sorted(later_a)] == [10, 0]
        await asyncio.sleep(3)  # more than a refresh interval: a loop would show by now
    loops = [f"{a}.{b}.{topic}", f"{b}.{a}.{topic}", f"{a}.{b}.{unique}-test-topic-3",
             f"{b}.{a}.{unique}-test-topic-2"]
    assert not await existing(primary.bootstrap, loops)
    assert not await existing(backup.bootstrap, loops)


async def test_without_offset_syncs_no_offset_syncs_topic_is_created(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """testReplicationWithoutOffsetSyncWillNotCreateOffsetSyncsTopic."""
    a, b = aliases()
    topic = f"{unique}-no-syncs"
    await create_topic(primary.bootstrap, topic, 2)
    await produce(primary.bootstrap, topic, [Record(b"v", partition=i % 2) for i in range(100)])
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {
        "topics": topic, "emit.offset-syncs.enabled": "false"}})
    async with replicator(config, tmp_path):
        await consume_all(backup.bootstrap, f"{a}.{topic}", expected=100)
    assert not await existing(primary.bootstrap, [f"mm2-offset-syncs.{b}.internal"])
    assert not await existing(backup.bootstrap, [f"mm2-offset-syncs.{a}.internal"])


async def test_offset_syncs_topic_on_target(primary: LocalBroker, backup: LocalBroker,
                                           unique: str, tmp_path: Path) -> None:
    """testOffsetSyncsTopicsOnTarget (replication part)."""
    a, b = aliases()
    topic = f"{unique}-syncs-on-target"
    await create_topic(primary.bootstrap, topic, 2)
    await produce(primary.bootstrap, topic, [Record(b"v", partition=i % 2) for i in range(100)])
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {
        "topics": topic, "offset-syncs.topic.location": "target"}})
    async with replicator(config, tmp_path):
        await consume_all(backup.bootstrap, f"{a}.{topic}", expected=100)
        synced = await consume_all(backup.bootstrap, f"mm2-offset-syncs.{a}.internal",
                                   expected=2)
        assert sum(len(v) for v in synced.values()) >= 2
    names = [f"mm2-offset-syncs.{a}.internal", f"mm2-offset-syncs.{b}.internal"]
    assert not await existing(primary.bootstrap, names)


async def test_replicate_from_latest(primary: LocalBroker, backup: LocalBroker, unique: str,
                                     tmp_path: Path) -> None:
    """testReplicateFromLatest: with auto.offset.reset=latest only records produced after
    start arrive.

    The records produced before the start go one per batch for the Tansu lane: Tansu
    answers ListOffsets(latest) with the last batch's base offset + 1, which is then the
    true log end, as Apache Kafka's answer always is.
    """
    a, b = aliases()
    topic, sentinel = f"{unique}-latest", f"{unique}-sentinel"
    partitions = 4
    await create_topic(primary.bootstrap, topic, partitions)
    await create_topic(primary.bootstrap, sentinel, 1)
    producer = AIOKafkaProducer(bootstrap_servers=primary.bootstrap)
    await producer.start()
    try:
        for i in range(10 * partitions):
            await producer.send_and_wait(topic, b"before", partition=i % partitions)
        config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {
            "topics": f"{topic}, {sentinel}", "refresh.topics.interval.seconds": "2"}},
            **{f"{a}_consumer_auto_offset_reset": "latest"})
        async with replicator(config, tmp_path):
            async def sentinel_arrived() -> bool:
                await producer.send_and_wait(sentinel, b"sentinel-value")
                found = await existing(backup.bootstrap, [f"{a}.{sentinel}"])
                if not found:
                    return False
                copied = await consume_all(backup.bootstrap, f"{a}.{sentinel}")
                return any(copied.values())
            await wait_for(sentinel_arrived, 30, "the replicator never polled", interval=0.5)
            for i in range(10 * partitions):
                await producer.send_and_wait(topic, b"after", partition=i % partitions)
            mirrored = await consume_all(backup.bootstrap, f"{a}.{topic}",
                                         expected=10 * partitions)
    finally:
        await producer.stop()
    assert {p: [r.value for r in rs] for p, rs in mirrored.items()} == \
        {p: [b"after"] * 10 for p in range(partitions)}
