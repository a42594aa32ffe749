"""The replicator against two real local clusters: what arrives, where, and how exactly."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

import pytest
from helpers import (
    PAST_MS,
    Record,
    aliases,
    consume_all,
    create_topic,
    produce,
    shape,
    wait_for,
)
from procs import mm2_config, replicator

from mirrorline.core.wire import OffsetSync
from mirrorline.dev.brokers import LocalBroker
from mirrorline.kafka.reader import read_topic
from mirrorline.kafka.watermarks import high_watermarks, totals

pytestmark = pytest.mark.integration

FAST = {"refresh.topics.interval.seconds": "2"}


def sample(topic_index: int, partitions: int, per_partition: int) -> list[Record]:
    """Records exercising everything a mirror must keep: keys, null keys and values,
    repeated and ordered headers, and explicit timestamps."""
    out = []
    for p in range(partitions):
        for i in range(per_partition):
            n = topic_index * 1000 + p * 100 + i
            out.append(Record(
                key=None if i % 7 == 3 else f"key-{n}".encode(),
                # Tombstones (null values) need a key: the test producer refuses null/null.
                value=None if i % 5 == 4 and i % 7 != 3 else f"value-{n}".encode() * (1 + i % 3),
                headers=[("h", b"1"), ("dup", b"a"), ("dup", b"b"), ("n", str(n).encode())]
                if i % 2 else [],
                timestamp_ms=PAST_MS + n,
                partition=p,
            ))
    return out


async def test_topics_are_mirrored_record_for_record(primary: LocalBroker, backup: LocalBroker,
                                                     unique: str, tmp_path: Path) -> None:
    """Three flows of one process between the same two clusters under three pairs of
    aliases, each listing the topics once at start (`refresh.topics.enabled = false`):
    every flow copies every record. Flows that create their remote topics together load
    the target, whose next metadata answer may not show a topic just created; such a flow
    used to leave the topic for the next refresh (30 s later by default; with refresh off,
    never)."""
    topics = {f"{unique}.orders": 3, f"{unique}.payments": 2, f"{unique}.clicks": 4}
    sent = {}
    for index, (topic, partitions) in enumerate(topics.items()):
        await create_topic(primary.bootstrap, topic, partitions)
        sent[topic] = sample(index, partitions, 40)
        await produce(primary.bootstrap, topic, sent[topic])
    pairs = [("primary", "backup"), aliases("a1", "b1"), aliases("a2", "b2")]
    config = mm2_config({alias: cluster for a, b in pairs
                         for alias, cluster in ((a, primary), (b, backup))},
                        {f"{a}->{b}": {"topics": f"{unique}\\..*",
                                       "refresh.topics.enabled": "false"} for a, b in pairs})
    async with replicator(config, tmp_path):
        for (source, _), (topic, partitions) in itertools.product(pairs, topics.items()):
            mirrored = await consume_all(backup.bootstrap, f"{source}.{topic}",
                                         expected=len(sent[topic]))
            assert sorted(mirrored) == list(range(partitions))
            for p in range(partitions):
                expected = [(r.key, r.value, tuple(r.headers), r.timestamp_ms)
                            for r in sent[topic] if r.partition == p]
                assert [shape(r) for r in mirrored[p]] == expected, (
                    f"{source}.{topic}-{p} differs")


async def test_new_source_topic_is_mirrored_within_the_refresh_interval(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    config = mm2_config({"primary": primary, "backup": backup},
                        {"primary->backup": {"topics": f"{unique}-.*", **FAST}})
    async with replicator(config, tmp_path):
        topic = f"{unique}-late"
        await create_topic(primary.bootstrap, topic, 2)
        await produce(primary.bootstrap, topic, [Record(b"v", partition=i % 2) for i in range(10)])
        # Refresh every 2 s: the copy must be complete well within a few intervals.
        mirrored = await consume_all(backup.bootstrap, f"primary.{topic}", expected=10,
                                     timeout=10)
        assert sum(len(v) for v in mirrored.values()) == 10


async def test_excluded_and_internal_topics_are_not_mirrored(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    names = {
        "kept": f"{unique}-kept",
        "excluded": f"{unique}-skip-me",
        "mm2 internal": f"{unique}-offsets.internal",
        "dash internal": f"{unique}-changelog-internal",
        "double underscore": f"__{unique}",
        "hidden": f".{unique}",
    }
    for topic in names.values():
        await create_topic(primary.bootstrap, topic, 1)
        await produce(primary.bootstrap, topic, [Record(b"x")])
    # The include list names every one of them, and the exclude list is replaced (so MM2's
    # default excludes are gone): internal topics must still never be mirrored.
    config = mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": f"{unique}-.*, __{unique}, \\.{unique}",
        "topics.exclude": f"{unique}-skip-.*", **FAST}})
    async with replicator(config, tmp_path):
        await consume_all(backup.bootstrap, f"primary.{names['kept']}", expected=1)
        present = await high_watermarks({"bootstrap_servers": backup.bootstrap},
                                         [f"primary.{t}" for t in names.values()])
        assert {tp.topic for tp in present} == {f"primary.{names['kept']}"}


async def test_identity_policy_keeps_topic_names(primary: LocalBroker, backup: LocalBroker,
                                                 unique: str, tmp_path: Path) -> None:
    topic = f"{unique}.same-name"
    await create_topic(primary.bootstrap, topic, 2)
    await produce(primary.bootstrap, topic, [Record(f"{i}".encode(), partition=i % 2)
                                             for i in range(20)])
    config = mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": f"{unique}\\..*", "replication.policy.class": "IdentityReplicationPolicy",
        **FAST}})
    async with replicator(config, tmp_path):
        mirrored = await consume_all(backup.bootstrap, topic, expected=20)
        assert [r.value for r in mirrored[0]] == [f"{i}".encode() for i in range(0, 20, 2)]
        renamed = await high_watermarks({"bootstrap_servers": backup.bootstrap},
                                         [f"primary.{topic}"])
        assert not renamed


async def test_offset_syncs_map_each_source_offset_to_where_that_record_landed(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, remote = f"{unique}-synced", f"primary.{unique}-synced"
    await create_topic(primary.bootstrap, topic, 2)
    # Records already in the remote topic shift downstream offsets away from upstream ones,
    # so a sync that merely echoed the source offset would be caught.
    await create_topic(backup.bootstrap, remote, 2)
    await produce(backup.bootstrap, remote, [Record(b"local", partition=p)
                                             for p in (0, 0, 0, 1)])
    await produce(primary.bootstrap, topic, [Record(f"r{p}-{i}".encode(), partition=p)
                                             for i in range(120) for p in (0, 1)])
    config = mm2_config({"primary": primary, "backup": backup}, {"primary->backup": {
        "topics": f"{unique}-synced", "offset.lag.max": "10", **FAST}})
    async with replicator(config, tmp_path):
        mirrored = await consume_all(backup.bootstrap, remote, expected=244)
        source = await consume_all(primary.bootstrap, topic)
        records = await read_topic({"bootstrap_servers": primary.bootstrap},
                                   "mm2-offset-syncs.backup.internal")
    syncs = [s for s in (OffsetSync.decode(r.key, r.value) for r in records)
             if s.topic == topic]
    assert {s.partition for s in syncs} == {0, 1}
    for p in (0, 1):
        ours = [s for s in syncs if s.partition == p]
        # offset.lag.max=10: the 120 records of a partition need many syncs, not one.
        assert len(ours) >= 120 // 11
        by_offset = {r.offset: r.value for r in mirrored[p]}
        for sync in ours:
            assert by_offset[sync.downstream_offset] == source[p][sync.upstream_offset].value


async def test_status_reports_partitions_and_lag(primary: LocalBroker, backup: LocalBroker,
                                                 unique: str, tmp_path: Path) -> None:
    topic = f"{unique}-status"
    await create_topic(primary.bootstrap, topic, 3)
    sent = await produce(primary.bootstrap, topic,
                         [Record(b"v", partition=i % 3) for i in range(30)])
    config = mm2_config({"primary": primary, "backup": backup},
                        {"primary->backup": {"topics": topic, **FAST}})
    # Every record was written before the replicator started, so none can have been
    # copied sooner after its timestamp than this (a latency never measured reads 0).
    waited_ms = time.time() * 1000 - max(m.timestamp for m in sent)
    async with replicator(config, tmp_path) as proc:
        async def caught_up() -> bool:
            status = await proc.replicator_status()
            mine = [p for p in status.partitions if p.source_topic == topic]
            return len(mine) == 3 and all(p.lag_records == 0 and p.next_offset == 10
                                          for p in mine)
        await wait_for(caught_up, 20, "partitions never reported caught up")
        status = await proc.replicator_status()
        assert status.serving
        assert {(c.alias, c.reachable) for c in status.clusters} == {("primary", True),
                                                                     ("backup", True)}
        mine = sorted((p for p in status.partitions if p.source_topic == topic),
                      key=lambda p: p.partition)
        assert [(p.target_topic, p.source_end_offset, p.records_replicated) for p in mine] == \
            [(f"primary.{topic}", 10, 10)] * 3
        assert all(p.last_replication_latency_ms >= waited_ms > 0 for p in mine), mine

        # The same facts as metrics, under MM2's names and tags.
        text = await proc.scrape()
        for partition in range(3):
            tags = (f'partition="{partition}",source="primary",target="backup",'
                    f'topic="primary.{topic}"')
            assert f"record_count_total{{{tags}}} 10.0" in _without_scope(text)
            assert f"record_lag{{{tags}}} 0.0" in _without_scope(text)
            assert f"record_lag_ms{{{tags}}} 0.0" in _without_scope(text)  # caught up
        for name in ("record_age_ms_max", "replication_latency_ms_avg", "byte_count_total",
                     "record_rate", "byte_rate"):
            assert f"\n{name}{{" in text, f"{name} missing from /metrics"


def _without_scope(text: str) -> str:
    """Drop OTel's scope labels so assertions can spell out just MM2's tags."""
    return re.sub(r'otel_scope_[a-z_]+="[^"]*",?', "", text)


async def count(bootstrap: str, topic: str) -> int:
    return totals(await high_watermarks({"bootstrap_servers": bootstrap}, [topic])).get(topic, 0)


async def test_a_record_above_max_request_size_stops_its_partition_only_named_exactly(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """The Java producer refuses a record above `max.request.size` before sending it; so
    does the replicator now (aiokafka's batch builder would take it), and the Spark path.
    The local broker itself refuses no size, so the producer's limit is what refuses."""
    topic = f"{unique}-big"
    await create_topic(primary.bootstrap, topic, 2)
    before = [Record(f"a{i}".encode(), key=b"k", partition=i % 2) for i in range(20)]
    big = Record(b"x" * 40_000, key=b"big", partition=1)
    after = [Record(f"b{i}".encode(), key=b"k", partition=i % 2) for i in range(20)]
    await produce(primary.bootstrap, topic, before)
    await produce(primary.bootstrap, topic, [big])
    await produce(primary.bootstrap, topic, after)
    config = mm2_config({"primary": primary, "backup": backup},
                        {"primary->backup": {"topics": topic, **FAST}},
                        backup_producer_max_request_size="20000")
    async with replicator(config, tmp_path) as proc:
        async def settled() -> bool:
            status = await proc.replicator_status()
            mine = {p.partition: p for p in status.partitions if p.source_topic == topic}
            return (len(mine) == 2 and mine[0].next_offset == 20 and bool(mine[1].error)
                    and mine[1].next_offset == 10)
        await wait_for(settled, 40, "partition 0 did not finish or partition 1 did not stop")
        status = await proc.replicator_status()
        stopped = next(p for p in status.partitions
                       if p.source_topic == topic and p.partition == 1)
    assert "above max.request.size (20000)" in stopped.error
    assert f"(flow primary->backup, topic '{topic}', partition 1, offset 10 -> " \
           f"'primary.{topic}')" in stopped.error
    mirrored = await consume_all(backup.bootstrap, f"primary.{topic}", expected=30)
    assert [r.value for r in mirrored[0]] == [r.value for r in before + after
                                              if r.partition == 0]
    # Partition 1 holds exactly what came before the refused record, nothing after it.
    assert [r.value for r in mirrored[1]] == [r.value for r in before if r.partition == 1]
