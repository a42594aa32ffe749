"""Moving between Apache Kafka's MirrorMaker 2 and Mirrorline, both ways, on one file.

Real MM2 4.3.1 processes (dedicated mode, `mirrorline.dev.mm2`) and real Mirrorline
processes take turns on one flow, from one properties file, on the suite's Apache Kafka
clusters. What a team switching needs: nothing copied twice, nothing lost, the remote
topics left as they are, the checkpoints of every group continuing (never backwards), and
each side reading what the other wrote (progress, offset syncs, checkpoints).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_monotonic, commit_offsets, consume_all, produce, wait_for
from mm2_peer import (
    aliases,
    checkpoints,
    create_ready,
    latest,
    numbered,
    offset_syncs,
    progress,
    running_mm2,
    shared_config,
    sync_rule,
    trim,
    values_by_partition,
    wait_checkpoints,
)
from procs import checkpointer, deployment

from mirrorline.client import translate_offsets
from mirrorline.dev import mm2
from mirrorline.v1 import admin_pb2, flows_pb2

#: MM2's JVM and Mirrorline's processes taking turns on a 2-core machine take minutes.
pytestmark = [pytest.mark.integration, pytest.mark.kafka_only, pytest.mark.timeout(600)]

PARTITIONS = 2


#: Every source partition starts here (the records below were deleted before mirroring),
#: so target offsets are source offsets - TRIMMED and a misread offset cannot pass.
TRIMMED = 20


def expected_values(topic: str, upto: int) -> dict[int, list[bytes | None]]:
    """What the remote topic holds once source offsets below `upto` were mirrored."""
    return {p: [f"{topic}:{p}:{i}".encode() for i in range(TRIMMED, upto)]
            for p in range(PARTITIONS)}


def mirrored_count(count_per_partition: int) -> int:
    """Records on the target once source offsets below `count_per_partition` are mirrored."""
    return PARTITIONS * (count_per_partition - TRIMMED)


async def flow_partitions(d: Any, flow: str, topic: str) -> list[flows_pb2.PartitionStatus]:
    """The status of `topic`'s partitions (the source cluster is shared with other tests,
    whose `heartbeats` topic both mirrors copy as well)."""
    report = await d.admin(await d.leader()).GetStatus(
        admin_pb2.GetStatusRequest(flow=flow), timeout=10)
    return sorted((p for p in report.partitions if p.source_topic == topic),
                  key=lambda p: p.partition)


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
async def test_from_mm2_to_mirrorline(primary: Any, backup: Any, unique: str, tmp_path: Path,
                                      stop: str) -> None:
    """Item 3 of issue 21: MM2 mirrors, stops (SIGTERM, or SIGKILL with its progress a
    minute stale), Mirrorline starts from the same file and carries on.

    Fails if Mirrorline misreads MM2's progress (copies again or skips), ignores MM2's
    offset syncs (copies again after SIGKILL; no translation of an offset MM2 mirrored),
    or writes checkpoints MM2's format and order do not continue."""
    a, b = aliases()
    topic, group, late = f"{unique}-orders", f"{unique}-app", f"{unique}-late"
    remote, flow = f"{a}.{topic}", f"{a}->{b}"
    await create_ready(primary.bootstrap, topic, PARTITIONS)
    await produce(primary.bootstrap, topic, numbered(topic, 100, 0))
    await trim(primary.bootstrap, topic, PARTITIONS, TRIMMED)
    # SIGKILL: MM2 commits its progress every offset.flush.interval.ms; ten minutes mean
    # the kill leaves none, and only the target and MM2's offset syncs tell the truth.
    flush = "1000" if stop == "sigterm" else "600000"
    config = shared_config(a, primary, b, backup, {"topics": topic, "groups": f"{unique}-.*"},
                           offset_flush_interval_ms=flush)

    async with running_mm2(config, tmp_path, b) as process:
        assert await values_by_partition(backup.bootstrap, remote, mirrored_count(100)) == \
            expected_values(topic, 100)
        await produce(primary.bootstrap, topic, numbered(topic, 50, 100))
        assert await values_by_partition(backup.bootstrap, remote, mirrored_count(150)) == \
            expected_values(topic, 150)
        await commit_offsets(primary.bootstrap, group, {(topic, 0): 120, (topic, 1): 90})
        await wait_checkpoints(backup, a, group, {(remote, 0): 120, (remote, 1): 90})
        code = await mm2.stop_mm2(process, kill=stop == "sigkill")
        assert code == (-signal.SIGKILL if stop == "sigkill" else 128 + signal.SIGTERM)
    on_target = await consume_all(backup.bootstrap, remote)
    before = {p: [(r.offset, r.value) for r in rs] for p, rs in on_target.items()}
    mm2_checkpoints = latest(await checkpoints(backup, a), group)
    # Mirrorline's client reads MM2's checkpoints as MM2's RemoteClusterUtils would.
    assert await translate_offsets({"bootstrap.servers": backup.bootstrap}, a, group) == {
        key: (c.downstream_offset, "") for key, c in mm2_checkpoints.items()}
    mm2_progress = await progress(backup, a, topic)
    if stop == "sigterm":  # a clean stop commits where MM2 stood
        assert mm2_progress == {(topic, 0): 150, (topic, 1): 150}
    else:  # killed before its first offset flush: MM2 recorded no progress
        assert mm2_progress == {}
    syncs = await offset_syncs(primary, b)
    assert syncs, "MM2 wrote no offset syncs"

    async with deployment(config, tmp_path) as d:
        await d.controller("c1")
        await d.worker("w1")
        await d.checkpointer("k1")

        async def resumed() -> bool:
            parts = await flow_partitions(d, flow, topic)
            return len(parts) == PARTITIONS and all(
                p.state == flows_pb2.PARTITION_STATE_RUNNING and p.next_offset == 150
                for p in parts)
        await wait_for(resumed, 90, "the flow never resumed where MM2 stood", interval=0.5)
        # Resumed where MM2 stood: nothing copied on the way there.
        assert [p.records_replicated for p in await flow_partitions(d, flow, topic)] == [0, 0]

        await produce(primary.bootstrap, topic, numbered(topic, 50, 150))
        assert await values_by_partition(backup.bootstrap, remote, mirrored_count(200)) == \
            expected_values(topic, 200)

        async def caught_up() -> bool:
            return [(p.next_offset, p.records_replicated)
                    for p in await flow_partitions(d, flow, topic)] == [(200, 50), (200, 50)]
        await wait_for(caught_up, 30, "status does not show the 50 new records per partition",
                       interval=0.5)

        # The group moves on; a group first seen now committed inside what MM2 copied,
        # which only MM2's offset syncs can translate (Mirrorline's offset map starts at 150).
        await commit_offsets(primary.bootstrap, group, {(topic, 0): 180, (topic, 1): 160})
        await commit_offsets(primary.bootstrap, late, {(topic, 0): 40})
        # Exact (once the offset map of the new records is out): Mirrorline copied these.
        ours = await wait_checkpoints(backup, a, group, {(remote, 0): 180, (remote, 1): 160},
                                      downstream={(remote, 0): 160, (remote, 1): 140})
        late_found = await wait_checkpoints(backup, a, late, {(remote, 0): 40})
        assert late_found[(remote, 0)].downstream_offset == sync_rule(syncs, topic, 0, 40)

    # The remote topic is as MM2 left it, continued: same partitions, same records where
    # they were, every source record once.
    after = await consume_all(backup.bootstrap, remote)
    assert sorted(after) == sorted(before)
    for p, rows in before.items():
        assert [(r.offset, r.value) for r in after[p][:len(rows)]] == rows
    assert {p: [r.value for r in rs] for p, rs in after.items()} == expected_values(topic, 200)
    found = await checkpoints(backup, a)
    assert_monotonic(found)
    for key, c in mm2_checkpoints.items():  # MM2's checkpoints are where ours continued
        assert c.downstream_offset <= ours[key].downstream_offset


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
async def test_from_mirrorline_back_to_mm2(primary: Any, backup: Any, unique: str,
                                           tmp_path: Path, stop: str) -> None:
    """Item 4 of issue 21: Mirrorline mirrors and stops (SIGTERM, or SIGKILL of every
    process once its progress is recorded), MM2 starts from the same file and carries on.

    Fails if Mirrorline's progress records are not what MM2 reads (MM2 copies again or
    skips), or its checkpoints or offset syncs are not what MM2 continues from. (Killed
    in the middle of copying, MM2 would copy again what Mirrorline's progress had not
    recorded yet: MM2 resumes from progress alone, it does not match the target's tail.)"""
    a, b = aliases()
    topic, group = f"{unique}-orders", f"{unique}-app"
    remote = f"{a}.{topic}"
    await create_ready(primary.bootstrap, topic, PARTITIONS)
    await produce(primary.bootstrap, topic, numbered(topic, 100, 0))
    await trim(primary.bootstrap, topic, PARTITIONS, TRIMMED)
    config = shared_config(a, primary, b, backup, {"topics": topic, "groups": f"{unique}-.*"})

    async with deployment(config, tmp_path) as d:
        await d.controller("c1")
        await d.worker("w1")
        await d.checkpointer("k1")
        assert await values_by_partition(backup.bootstrap, remote, mirrored_count(100)) == \
            expected_values(topic, 100)
        await commit_offsets(primary.bootstrap, group, {(topic, 0): 70, (topic, 1): 100})
        ours = await wait_checkpoints(backup, a, group, {(remote, 0): 70, (remote, 1): 100},
                                      downstream={(remote, 0): 50, (remote, 1): 80})

        async def recorded() -> bool:
            return await progress(backup, a, topic) == {(topic, 0): 100, (topic, 1): 100}
        await wait_for(recorded, 30, "Mirrorline's progress never reached the end",
                       interval=0.5)
        if stop == "sigkill":
            for proc in [*d.workers.values(), *d.checkpointers.values(),
                         *d.controllers.values()]:
                await proc.signal(signal.SIGKILL)
                await proc.wait()
    on_target = await consume_all(backup.bootstrap, remote)
    before = {p: [(r.offset, r.value) for r in rs] for p, rs in on_target.items()}

    await produce(primary.bootstrap, topic, numbered(topic, 50, 100))
    async with running_mm2(config, tmp_path, b) as process:
        assert await values_by_partition(backup.bootstrap, remote, mirrored_count(150)) == \
            expected_values(topic, 150)
        await commit_offsets(primary.bootstrap, group, {(topic, 0): 130, (topic, 1): 150})
        theirs = await wait_checkpoints(backup, a, group, {(remote, 0): 130, (remote, 1): 150})
        await mm2.stop_mm2(process)
    after = await consume_all(backup.bootstrap, remote)
    for p, rows in before.items():
        assert [(r.offset, r.value) for r in after[p][:len(rows)]] == rows
    assert {p: [r.value for r in rs] for p, rs in after.items()} == expected_values(topic, 150)
    assert await progress(backup, a, topic) == {(topic, 0): 150, (topic, 1): 150}
    found = await checkpoints(backup, a)
    assert_monotonic(found)
    for key, c in ours.items():
        assert theirs[key].downstream_offset >= c.downstream_offset


async def test_mirrorline_checkpointer_beside_mm2_replication(
        primary: Any, backup: Any, unique: str, tmp_path: Path) -> None:
    """Item 6 of issue 21, one mixture: MM2 replicates (its checkpoint connector off) and
    Mirrorline's checkpointer runs beside it, translating from MM2's offset syncs.

    Fails if Mirrorline cannot read MM2's offset syncs (no checkpoint at all) or
    translates them differently from MM2's rule, or if the checkpoint would make a
    consumer failing over skip a record."""
    a, b = aliases()
    topic, group = f"{unique}-orders", f"{unique}-app"
    remote = f"{a}.{topic}"
    await create_ready(primary.bootstrap, topic, PARTITIONS)
    await produce(primary.bootstrap, topic, numbered(topic, 100, 0))
    await trim(primary.bootstrap, topic, PARTITIONS, TRIMMED)
    flow = {"topics": topic, "groups": f"{unique}-.*"}
    ours = shared_config(a, primary, b, backup, flow)
    theirs = shared_config(a, primary, b, backup, {**flow, "emit.checkpoints.enabled": "false"})
    async with running_mm2(theirs, tmp_path, b), checkpointer(ours, tmp_path):
        assert await values_by_partition(backup.bootstrap, remote, mirrored_count(100)) == \
            expected_values(topic, 100)
        await produce(primary.bootstrap, topic, numbered(topic, 30, 100))
        await values_by_partition(backup.bootstrap, remote, mirrored_count(130))
        committed = {(topic, 0): 55, (topic, 1): 130}
        await commit_offsets(primary.bootstrap, group, committed)
        found = await wait_checkpoints(
            backup, a, group, {(remote, p): o for (_, p), o in committed.items()})
        syncs = await offset_syncs(primary, b)
        for (_, p), offset in committed.items():
            translated = found[(remote, p)].downstream_offset
            assert translated == sync_rule(syncs, topic, p, offset)
            # The record at source offset o is at o - TRIMMED on the target: a consumer
            # starting at the translation reads records again at worst, never skips one.
            assert translated <= offset - TRIMMED
