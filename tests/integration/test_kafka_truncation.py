"""The source's log start moving past the mirror's position, on Apache Kafka.

DeleteRecords (what retention does, on demand) removes source records the replicator has
not copied yet. The gap must be reported -- in the log, the partition's status and a
metric, with the count and the offsets -- and replication must go on from the new log
start, with every record that still existed copied: nothing else skipped.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.records_to_delete import RecordsToDelete
from helpers import Record, produce, wait_for
from kafka_checks import read_all, ready_topic, values
from procs import mm2_config, replicator

from mirrorline.dev.kafka import LocalKafkaCluster

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]


async def delete_records(cluster: LocalKafkaCluster, topic: str, before: int) -> None:
    """What kafka-delete-records.sh does: move partition 0's log start to `before`."""
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    await admin.start()
    try:
        low = await admin.delete_records({TopicPartition(topic, 0): RecordsToDelete(before)})
        assert low[TopicPartition(topic, 0)] == before
    finally:
        await admin.close()


async def test_records_deleted_before_they_were_copied_are_reported_and_copying_goes_on(
        primary: LocalKafkaCluster, backup: LocalKafkaCluster, unique: str,
        tmp_path: Path) -> None:
    topic, remote = f"{unique}-trunc", f"primary.{unique}-trunc"
    await ready_topic(primary.bootstrap, topic, 1)
    config = mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": topic, "refresh.topics.interval.seconds": "2"}})
    await produce(primary.bootstrap, topic, [Record(f"a{n}".encode()) for n in range(100)])

    async def target_holds(count: int) -> bool:
        try:
            got = await read_all(backup.bootstrap, remote, timeout=10)
        except AssertionError:
            return False
        return sum(map(len, got.values())) >= count

    async with replicator(config, tmp_path, name="first") as proc:
        await wait_for(lambda: target_holds(100), 60, f"{remote} never held 100 records",
                       interval=0.3)
        await proc.signal(signal.SIGTERM)
        assert await proc.wait() == 0
    # While the mirror is down: 100 more, of which the first 50 are deleted uncopied.
    await produce(primary.bootstrap, topic, [Record(f"b{n}".encode()) for n in range(100)])
    await delete_records(primary, topic, 150)
    async with replicator(config, tmp_path, name="second") as proc:
        await wait_for(lambda: target_holds(150), 60, f"{remote} never went on", interval=0.3)
        # Replication goes on past the gap.
        await produce(primary.bootstrap, topic, [Record(f"c{n}".encode()) for n in range(10)])
        await wait_for(lambda: target_holds(160), 60, f"{remote} stopped after the gap",
                       interval=0.3)
        status = await proc.replicator_status()
        metrics = await proc.scrape()
        log = proc.log_path.read_text()
    target = values((await read_all(backup.bootstrap, remote))[0])
    assert target == ([f"a{n}".encode() for n in range(100)]
                      + [f"b{n}".encode() for n in range(50, 100)]
                      + [f"c{n}".encode() for n in range(10)])
    said = "50 records (offsets 100..149) were removed from the source"
    assert said in log
    (row,) = [p for p in status.partitions if p.source_topic == topic]
    assert said in row.error and "continuing at offset 150" in row.error, row
    lost = [line for line in metrics.splitlines()
            if line.startswith("record_lost_count") and f'topic="{remote}"' in line]
    assert lost and re.search(r"} 50(\.0)?$", lost[0]), lost


async def test_a_source_topic_deleted_and_recreated_is_reported_and_copied_from_its_start(
        primary: LocalKafkaCluster, backup: LocalKafkaCluster, unique: str,
        tmp_path: Path) -> None:
    topic, remote = f"{unique}-again", f"primary.{unique}-again"
    await ready_topic(primary.bootstrap, topic, 1)
    config = mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": topic, "refresh.topics.interval.seconds": "1"}})
    await produce(primary.bootstrap, topic, [Record(f"a{n}".encode()) for n in range(100)])

    async def target_holds(count: int) -> bool:
        try:
            got = await read_all(backup.bootstrap, remote, timeout=10)
        except AssertionError:
            return False
        return sum(map(len, got.values())) >= count

    async with replicator(config, tmp_path, name="again") as proc:
        await wait_for(lambda: target_holds(100), 60, f"{remote} never held 100 records",
                       interval=0.3)
        admin = AIOKafkaAdminClient(bootstrap_servers=primary.bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()

        async def let_go() -> bool:
            return f"stopped replicating {topic}-0" in proc.log_path.read_text()
        await wait_for(let_go, 60, "the replicator never let go of the deleted topic",
                       interval=0.3)
        await ready_topic(primary.bootstrap, topic, 1)
        # More records than the old topic had: a mirror resuming at the old offset would
        # skip the first 100 without a word.
        await produce(primary.bootstrap, topic, [Record(f"n{n}".encode()) for n in range(150)])
        await wait_for(lambda: target_holds(250), 60, f"{remote} never held the new records",
                       interval=0.3)
        status = await proc.replicator_status()
        log = proc.log_path.read_text()
    target = values((await read_all(backup.bootstrap, remote))[0])
    assert target == ([f"a{n}".encode() for n in range(100)]
                      + [f"n{n}".encode() for n in range(150)])
    (row,) = [p for p in status.partitions if p.source_topic == topic]
    assert "recreated" in row.error, row
    assert "recreated" in log
