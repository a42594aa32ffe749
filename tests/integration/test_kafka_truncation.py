"""The source's log start moving past the mirror's position, on Apache Kafka.

DeleteRecords (what retention does, on demand) removes source records the replicator has
not copied yet. The gap must be reported -- in the log, the partition's status and a
metric, with the count and the offsets -- and replication must go on from the new log
start, with every record that still existed copied: nothing else skipped. A source topic
deleted and created again is copied from its new start, and reported. Records the
mirror copied but the source lost before the audit read them make their window
UNVERIFIABLE.
"""

from __future__ import annotations

import re
import secrets
import signal
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.records_to_delete import RecordsToDelete
from helpers import Record, produce, wait_for
from kafka_checks import read_all, ready_topic, values
from procs import (
    ServiceProcess,
    deployment,
    deployment_config,
    free_port,
    mm2_config,
    replicator,
)

from mirrorline.dev.kafka import LocalKafkaCluster
from mirrorline.replicator.pump import PartitionPump, PumpState
from mirrorline.replicator.source_faults import check_truncation
from mirrorline.v1 import admin_pb2, admin_pb2_grpc, flows_pb2, heartbeat_pb2

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


async def delete_topic(cluster: LocalKafkaCluster, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
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
        await delete_topic(primary, topic)

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


AUDIT_WINDOW_MS = 1000


def audit_config(primary: LocalKafkaCluster, backup: LocalKafkaCluster, topic: str,
                 unique: str) -> str:
    """One flow for `topic`, audited in 1 s windows; no heartbeats or canaries (the
    clusters are shared)."""
    return mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": topic, "refresh.topics.interval.seconds": "1"}},
        mirrorline_deployment=unique, emit_heartbeats_enabled="false",
        canary_enabled="false", audit_window_ms=str(AUDIT_WINDOW_MS), audit_grace_ms="2000")


def heartbeat_service(config: Path, tmp: Path, name: str) -> ServiceProcess:
    port = free_port()
    return ServiceProcess(["heartbeat", "--config", str(config), "--grpc-port", str(port),
                           "--metrics-port", "-1"], grpc_port=port, log_path=tmp / f"{name}.log")


async def audited(proc: ServiceProcess, flow: str, topic: str) -> dict[int, str]:
    """Window start -> verdict of partition 0 of `topic`."""
    report = await admin_pb2_grpc.AdminStub(proc.channel).Audit(
        heartbeat_pb2.AuditRequest(flow=flow, topic=topic), timeout=10)
    return {w.window_start_ms: f"{w.verdict} {w.count}" if w.count else w.verdict
            for w in report.windows if w.partition == 0}


def at(start: int, count: int, tag: str) -> list[Record]:
    return [Record(f"{tag}{n}".encode(), timestamp_ms=start + n) for n in range(count)]


async def test_the_audit_calls_a_window_unverifiable_when_the_source_lost_it_unread(
        primary: LocalKafkaCluster, backup: LocalKafkaCluster, unique: str,
        tmp_path: Path) -> None:
    """Records copied by the mirror, then deleted from the source before the audit read
    them: the audit cannot know what the source held, so the window is UNVERIFIABLE --
    neither OK nor a false DUPLICATED alarm."""
    topic, flow = f"{unique}-audit", "primary->backup"
    await ready_topic(primary.bootstrap, topic, 1)
    window = AUDIT_WINDOW_MS
    config = tmp_path / "audit.properties"
    config.write_text(audit_config(primary, backup, topic, unique))

    def heartbeat(name: str) -> ServiceProcess:
        return heartbeat_service(config, tmp_path, name)

    async def audit(proc: ServiceProcess) -> dict[int, str]:
        return await audited(proc, flow, topic)

    async with replicator(config.read_text(), tmp_path, name="mirror"):
        first = heartbeat("heartbeat-1")
        await first.start()
        try:
            await first.wait_serving(60)
            a = (int(time.time() * 1000) // window + 3) * window  # a window the audit covers
            await produce(primary.bootstrap, topic, at(a, 10, "a"))

            async def judged_a() -> bool:
                return a in await audit(first)
            await wait_for(judged_a, 60, "the audit never judged the first window",
                           interval=0.3)
            assert (await audit(first))[a] == "OK"
        finally:
            await first.close()
        # With the audit down: window B is copied, then deleted from the source unread.
        b = a + 2 * window
        await produce(primary.bootstrap, topic, at(b, 10, "b"))
        await produce(primary.bootstrap, topic, at(b + 2 * window, 10, "c"))

        async def mirrored() -> bool:
            got = await read_all(backup.bootstrap, f"primary.{topic}", timeout=10)
            return len(got[0]) >= 30
        await wait_for(mirrored, 60, "the mirror never copied windows B and C", interval=0.3)
        await delete_records(primary, topic, 20)
        second = heartbeat("heartbeat-2")
        await second.start()
        try:
            await second.wait_serving(60)

            async def judged_b() -> bool:
                return {b, b + 2 * window} <= set(await audit(second))
            await wait_for(judged_b, 60, "the audit never judged windows B and C",
                           interval=0.3)
            seen = await audit(second)
        finally:
            await second.close()
    assert seen[b] == "UNVERIFIABLE", seen
    assert seen[b + 2 * window] == "OK", seen


async def test_the_audit_tells_a_duplicate_from_a_gap_on_a_transactional_source(
        primary: LocalKafkaCluster, backup: LocalKafkaCluster, unique: str,
        tmp_path: Path) -> None:
    """Transaction markers take offsets too: the source's offsets have gaps that are not
    records lost to retention. A record repeated on the target is DUPLICATED there,
    not UNVERIFIABLE."""
    topic, flow = f"{unique}-txaudit", "primary->backup"
    remote = f"primary.{topic}"
    await ready_topic(primary.bootstrap, topic, 1)
    config = tmp_path / "audit.properties"
    config.write_text(audit_config(primary, backup, topic, unique))
    async with replicator(config.read_text(), tmp_path, name="mirror"):
        proc = heartbeat_service(config, tmp_path, "heartbeat")
        await proc.start()
        try:
            await proc.wait_serving(60)
            w = (int(time.time() * 1000) // AUDIT_WINDOW_MS + 3) * AUDIT_WINDOW_MS
            producer = AIOKafkaProducer(bootstrap_servers=primary.bootstrap,
                                        transactional_id=f"{unique}-tx")
            await producer.start()
            try:
                for t in range(3):  # three transactions: a marker after each
                    async with producer.transaction():
                        for r in at(w + 10 * t, 5, f"t{t}-"):
                            await producer.send(topic, r.value, timestamp_ms=r.timestamp_ms,
                                                partition=0)
                        await producer.send(topic, b"x", timestamp_ms=w + 2 * AUDIT_WINDOW_MS
                                            + t, partition=0)
            finally:
                await producer.stop()

            async def mirrored() -> bool:
                try:
                    got = await read_all(backup.bootstrap, remote, timeout=10)
                except AssertionError:
                    return False
                return len(got[0]) >= 18
            await wait_for(mirrored, 60, f"{remote} never held the records", interval=0.3)
            repeated = (await read_all(backup.bootstrap, remote))[0][7]
            await produce(backup.bootstrap, remote, [Record(
                repeated.value, timestamp_ms=repeated.timestamp, partition=0)])

            async def judged() -> bool:
                return {w, w + 2 * AUDIT_WINDOW_MS} <= set(await audited(proc, flow, topic))
            await wait_for(judged, 60, "the audit never judged the windows", interval=0.3)
            seen = await audited(proc, flow, topic)
        finally:
            await proc.close()
    assert seen[w] == "DUPLICATED 1", seen
    assert seen[w + 2 * AUDIT_WINDOW_MS] == "OK", seen


async def test_under_a_controller_a_recreated_source_topic_is_copied_from_its_start(
        primary: LocalKafkaCluster, backup: LocalKafkaCluster, unique: str,
        tmp_path: Path) -> None:
    """The same with a controller and a worker (`mirrorline run`'s shape): the worker lets
    the deleted topic's partition go when the controller takes it back, and copies the
    recreated topic from its start when it is assigned again."""
    tag = secrets.token_hex(3)
    a, b = f"a{tag}", f"b{tag}"
    topic, remote = f"{unique}-ctl", f"a{tag}.{unique}-ctl"
    await ready_topic(primary.bootstrap, topic, 1)
    await produce(primary.bootstrap, topic, [Record(f"a{n}".encode()) for n in range(100)])

    async def target_holds(count: int) -> bool:
        try:
            got = await read_all(backup.bootstrap, remote, timeout=10)
        except AssertionError:
            return False
        return sum(map(len, got.values())) >= count

    async with deployment(deployment_config({a: primary, b: backup}), tmp_path) as d:
        await d.controller("c1")
        worker = await d.worker("w1")
        admin = d.admin(await d.leader())
        await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flows_pb2.FlowSpec(
            source=a, target=b, properties={"topics": topic,
                                            "refresh.topics.interval.seconds": "1"})))
        await wait_for(lambda: target_holds(100), 60, f"{remote} never held 100 records",
                       interval=0.3)
        await delete_topic(primary, topic)

        async def let_go() -> bool:
            return f"stopped replicating {topic}-0" in worker.log_path.read_text()
        await wait_for(let_go, 60, "the worker never let go of the deleted topic",
                       interval=0.3)
        await ready_topic(primary.bootstrap, topic, 1)
        await produce(primary.bootstrap, topic, [Record(f"n{n}".encode()) for n in range(150)])
        await wait_for(lambda: target_holds(250), 60, f"{remote} never held the new records",
                       interval=0.3)
        status = await d.status()
    target = values((await read_all(backup.bootstrap, remote))[0])
    assert target == ([f"a{n}".encode() for n in range(100)]
                      + [f"n{n}".encode() for n in range(150)])
    (row,) = [p for p in status.partitions if p.source_topic == topic]
    assert "recreated" in row.error, row


async def test_a_stale_high_watermark_does_not_stop_a_partition_as_truncated(
        primary: LocalKafkaCluster, unique: str) -> None:
    """The consumer's high watermark is that of its last fetch answer; a position that has
    moved past it (a 30-minute soak saw end 1639 against position 1640) is no truncation
    while the leader's own log end is not below it. A real truncation is still stopped."""
    topic = f"{unique}-stale-hw"
    await ready_topic(primary.bootstrap, topic, 1)
    await produce(primary.bootstrap, topic, [Record(b"a", partition=0)] * 3)
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=primary.bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([tp])
        fetched = await consumer.getmany(tp, timeout_ms=10_000)
        assert len(fetched.get(tp, [])) == 3 and consumer.highwater(tp) == 3
        await produce(primary.bootstrap, topic, [Record(b"b", partition=0)] * 2)
        pump = PartitionPump(flow="a->b", source_topic=topic, target_topic=f"a.{topic}",
                             partition=0, next_offset=5)  # the leader holds 5 records
        await check_truncation(consumer, {tp: pump}, consumer.highwater)
        assert pump.state is PumpState.RUNNING, pump.error
        beyond = PartitionPump(flow="a->b", source_topic=topic, target_topic=f"a.{topic}",
                               partition=0, next_offset=6)  # past the leader's end
        await check_truncation(consumer, {tp: beyond}, consumer.highwater)
        assert beyond.state is not PumpState.RUNNING
        assert "source log end offset 5 is below the next offset to copy 6" in str(beyond.error)
    finally:
        await consumer.stop()
