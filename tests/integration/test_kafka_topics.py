"""Partition growth and topic-config sync on Apache Kafka, with real Mirrorline processes.

Kafka's DescribeConfigs lists every config of a topic with where its value comes from, so
these tests show what the local Tansu broker cannot: only a source topic's overrides
(`DYNAMIC_TOPIC_CONFIG`) reach the remote topic, never defaults, and never a key matched
by `config.properties.exclude`; drift set by hand on the remote topic is shown in the
plan, left alone in `plan` mode, and reverted by applying it; and a source topic grown
through CreatePartitions is followed by its remote topic, whose new partitions are copied.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from helpers import Record, produce, wait_for
from kafka_checks import read_all, ready_topic, wait_for_leaders
from procs import configsync, mm2_config, replicator

from mirrorline.core.filters import ConfigOp, ConfigSource
from mirrorline.dev.kafka import LocalKafkaCluster
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.kafka.syncadmin import alter_topic_configs
from mirrorline.v1 import drift_pb2, drift_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

FAST = {"sync.topic.configs.interval.seconds": "1", "sync.topic.acls.enabled": "false",
        "refresh.topics.interval.seconds": "1"}
#: Overrides of the source topic; segment.bytes is excluded by the flows below.
SOURCE_OVERRIDES = {"retention.ms": "7200000", "max.message.bytes": "300000",
                    "segment.bytes": "20971520"}
#: MM2's default list (min.insync.replicas is a cluster-wide dynamic default on Kafka 4,
#: which MM2's rule copies unless excluded) plus segment.bytes.
EXCLUDE = r"unclean\.leader\.election\.enable, min\.insync\.replicas, segment\.bytes"


async def overrides(cluster: LocalKafkaCluster, topic: str) -> dict[str, str | None]:
    """The configs set on the topic itself (DescribeConfigs source DYNAMIC_TOPIC_CONFIG)."""
    async with ClusterAdmin("check", {"bootstrap_servers": cluster.bootstrap}) as admin:
        described = await admin.topic_configs([topic])
    return {e.name: e.value for e in described.get(topic, [])
            if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG}


async def alter_by_hand(cluster: LocalKafkaCluster, topic: str, *ops: ConfigOp) -> None:
    """What an operator does with kafka-configs.sh --alter (incremental changes)."""
    async with ClusterAdmin("hand", {"bootstrap_servers": cluster.bootstrap}) as admin:
        errors = await alter_topic_configs(admin, {topic: list(ops)}, 10)
    assert errors == {topic: None}



async def test_a_grown_source_topic_is_followed_and_only_its_overrides_are_copied(
        primary: LocalKafkaCluster, backup: LocalKafkaCluster, unique: str,
        tmp_path: Path) -> None:
    topic, remote = f"{unique}-grow", f"primary.{unique}-grow"
    await ready_topic(primary.bootstrap, topic, 1, SOURCE_OVERRIDES)
    config = mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": topic, "config.properties.exclude": EXCLUDE, **FAST}})
    first = [Record(f"a{n}".encode(), partition=0) for n in range(50)]
    await produce(primary.bootstrap, topic, first)
    sync = configsync(config, tmp_path)
    await sync.start()
    try:
        async with replicator(config, tmp_path):
            await sync.wait_serving()

            async def copied(count: int, partitions: int) -> bool:
                try:
                    records = await read_all(backup.bootstrap, remote, timeout=10)
                except AssertionError:
                    return False  # not created yet
                return len(records) == partitions and sum(map(len, records.values())) >= count
            await wait_for(lambda: copied(50, 1), 60, f"{remote} never held the first records",
                           interval=0.3)
            # Created with the source's overrides, less the excluded key, and nothing else.
            assert await overrides(backup, remote) == {
                "retention.ms": "7200000", "max.message.bytes": "300000"}

            admin = AIOKafkaAdminClient(bootstrap_servers=primary.bootstrap)
            await admin.start()
            try:
                await admin.create_partitions({topic: NewPartitions(total_count=3)})
            finally:
                await admin.close()
            await wait_for_leaders(primary.bootstrap, topic, 3)
            more = [Record(f"b{p}-{n}".encode(), partition=p)
                    for p in range(3) for n in range(30)]
            await produce(primary.bootstrap, topic, more)
            await wait_for(lambda: copied(50 + 90, 3), 60,
                           f"{remote} never grew to 3 partitions with every record",
                           interval=0.3)
        source = await read_all(primary.bootstrap, topic)
        target = await read_all(backup.bootstrap, remote)
        assert {p: [r.value for r in rs] for p, rs in target.items()} == {
            p: [r.value for r in rs] for p, rs in source.items()}
        log = sync.log_path.read_text()
        assert "Traceback" not in log
    finally:
        await sync.close()


async def test_drift_is_shown_left_alone_in_plan_mode_and_reverted_by_applying_it(
        primary: LocalKafkaCluster, backup: LocalKafkaCluster, unique: str,
        tmp_path: Path) -> None:
    topic, remote = f"{unique}-drift", f"primary.{unique}-drift"
    await ready_topic(primary.bootstrap, topic, 1, SOURCE_OVERRIDES)
    # The remote topic as someone left it: one override changed, one the source lacks,
    # and the excluded key differing too.
    await ready_topic(backup.bootstrap, remote, 1, {
        "retention.ms": "1000000", "retention.bytes": "5000000", "segment.bytes": "10485760"})
    flow = "primary->backup"
    config = mm2_config({"primary": primary, "backup": backup}, {flow: {
        "topics": topic, "config.properties.exclude": EXCLUDE, "sync.mode": "plan", **FAST}})
    sync = configsync(config, tmp_path)
    await sync.start()
    try:
        await sync.wait_serving()
        stub = drift_pb2_grpc.ConfigSyncStub(sync.channel)

        async def plan() -> drift_pb2.DriftPlan:
            reply: drift_pb2.DriftPlan = await stub.GetDrift(
                drift_pb2.DriftRequest(flow=flow, topic=topic), timeout=30)
            return reply

        async def shown() -> bool:
            return (await plan()).last_sync_ms > 0
        await wait_for(shown, 30, "no drift plan was made")
        drift = next(t for t in (await plan()).topics if t.source_topic == topic)
        rows = {c.key: (c.source_value if c.source_present else None, c.target_value
                        if c.target_present else None, c.action) for c in drift.configs}
        assert rows["retention.ms"] == ("7200000", "1000000", "set")
        assert rows["max.message.bytes"][0] == "300000" and rows["max.message.bytes"][2] == "set"
        assert rows["retention.bytes"][1:] == ("5000000", "delete")
        assert rows["segment.bytes"][2] == "none"
        assert "config.properties.exclude" in next(
            c.reason for c in drift.configs if c.key == "segment.bytes")
        # Every other key is a default on both sides: no row, no change.
        assert set(rows) == {"retention.ms", "max.message.bytes", "retention.bytes",
                             "segment.bytes"}, rows
        assert (await plan()).changes == 3

        # Plan mode changes nothing, round after round.
        seen = (await plan()).last_sync_ms

        async def another_round() -> bool:
            return (await plan()).last_sync_ms > seen
        await wait_for(another_round, 30, "no further sync round ran")
        assert await overrides(backup, remote) == {
            "retention.ms": "1000000", "retention.bytes": "5000000",
            "segment.bytes": "10485760"}

        applied = await stub.ApplyDrift(drift_pb2.ApplyDriftRequest(
            flow=flow, requested_by="test"), timeout=30)
        assert applied is not None
        assert await overrides(backup, remote) == {
            "retention.ms": "7200000", "max.message.bytes": "300000",
            "segment.bytes": "10485760"}  # the excluded key is left as it was

        # A change on the source is drift like any other.
        await alter_by_hand(primary, topic, ConfigOp("retention.ms", "set", "3600000"))

        async def source_change_shown() -> bool:
            drift = [t for t in (await plan()).topics if t.source_topic == topic]
            return bool(drift) and any(c.key == "retention.ms" and c.action == "set"
                                       and c.source_value == "3600000"
                                       for c in drift[0].configs)
        await wait_for(source_change_shown, 30, "the source's change was not shown")
        await stub.ApplyDrift(drift_pb2.ApplyDriftRequest(flow=flow, requested_by="test"),
                              timeout=30)
        assert (await overrides(backup, remote))["retention.ms"] == "3600000"
        history = await stub.GetDriftHistory(drift_pb2.DriftHistoryRequest(flow=flow),
                                             timeout=10)
        subjects = {e.subject for e in history.entries if e.kind == "config" and e.ok}
        assert {f"{remote} retention.ms", f"{remote} retention.bytes",
                f"{remote} max.message.bytes"} <= subjects, history
    finally:
        await sync.close()
