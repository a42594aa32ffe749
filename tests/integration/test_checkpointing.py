"""The checkpointer on real brokers: MM2's checkpoint scenarios (from
MirrorConnectorsIntegrationBaseTest, with our own names and counts) and group-offset sync.

Each test runs a real replicator and a real checkpointer process for a flow between fresh
cluster aliases, so every internal topic (offset syncs, progress, offset map, checkpoints)
is its own. Source groups commit with a group-less commit (`commit_offsets`) where a test is
about what was committed, not about how a consumer came to commit it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import struct
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from helpers import (
    Record,
    aliases,
    assert_monotonic,
    commit_offsets,
    committed_offsets,
    consume_all,
    consume_as_group,
    create_topic,
    produce,
    read_from_committed,
    wait_for,
)
from procs import ServiceProcess, checkpointer, mm2_config, replicator

from mirrorline.client import translate_offsets
from mirrorline.core.offset_map import OffsetMap
from mirrorline.core.topics import offset_map_topic
from mirrorline.core.wire import Checkpoint
from mirrorline.dev.brokers import LocalBroker
from mirrorline.v1 import failover_pb2_grpc
from mirrorline.v1.offset_map_pb2 import OffsetMapRecord

pytestmark = pytest.mark.integration

FAST = {
    "emit.checkpoints.interval.seconds": "1",
    "refresh.groups.interval.seconds": "1",
    "sync.group.offsets.interval.seconds": "1",
}


@dataclass
class Mirror:
    """A running flow a->b: its replicator and checkpointer, and what tests need to know."""

    a: str
    b: str
    primary: LocalBroker
    backup: LocalBroker
    replicator: ServiceProcess
    checkpointer: ServiceProcess
    config: str
    tmp: Path

    @property
    def flow(self) -> str:
        return f"{self.a}->{self.b}"

    def remote(self, topic: str) -> str:
        return f"{self.a}.{topic}"

    @property
    def checkpoints_topic(self) -> str:
        return f"{self.a}.checkpoints.internal"

    def api(self) -> failover_pb2_grpc.CheckpointerStub:
        return failover_pb2_grpc.CheckpointerStub(self.checkpointer.channel)

    async def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint record written so far, in order."""
        records = await consume_all(self.backup.bootstrap, self.checkpoints_topic)
        return [Checkpoint.decode(r.key, r.value) for rs in records.values() for r in rs]

    async def latest(self, group: str) -> dict[tuple[str, int], Checkpoint]:
        out: dict[tuple[str, int], Checkpoint] = {}
        for c in await self.checkpoints():
            if c.group == group:
                out[(c.topic, c.partition)] = c
        return out


@contextlib.asynccontextmanager
async def mirror(primary: LocalBroker, backup: LocalBroker, tmp: Path, topics: str,
                 **props: str) -> AsyncIterator[Mirror]:
    a, b = aliases("p", "q")
    config = mm2_config({a: primary, b: backup},
                        {f"{a}->{b}": {"topics": topics, **FAST, **props}})
    async with replicator(config, tmp) as rep, checkpointer(config, tmp) as chk:
        yield Mirror(a, b, primary, backup, rep, chk, config, tmp)


def values(topic: str, partitions: int, per_partition: int, start: int = 0) -> list[Record]:
    return [Record(f"{topic}:{p}:{i}".encode(), partition=p)
            for p in range(partitions) for i in range(start, start + per_partition)]


async def ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Log end per partition (records are never deleted in these tests)."""
    return {p: len(rs) for p, rs in (await consume_all(bootstrap, topic)).items()}



async def wait_checkpoints(m: Mirror, group: str, want: Mapping[tuple[str, int], int],
                           timeout: float = 30,
                           downstream: Mapping[tuple[str, int], int] | None = None,
                           ) -> dict[tuple[str, int], Checkpoint]:
    """Wait until the newest checkpoint of each remote partition records `want`
    (upstream offsets) and, when given, the `downstream` offsets."""
    found: dict[tuple[str, int], Checkpoint] = {}
    down = downstream or {}

    async def there() -> bool:
        nonlocal found
        found = await m.latest(group)
        return all(k in found and found[k].upstream_offset == u
                   and found[k].downstream_offset == down.get(k, found[k].downstream_offset)
                   for k, u in want.items())
    await wait_for(there, timeout, f"checkpoints of {group} never reached {dict(want)} "
                   f"(downstream {dict(down)})", interval=0.5)
    return found


async def target_offset_of(m: Mirror, topic: str, partition: int, source_offset: int) -> int:
    """Where the record at `source_offset` of the source partition landed on the target
    (records carry unique values; the log end when `source_offset` is the source's end)."""
    source = (await consume_all(m.primary.bootstrap, topic))[partition]
    target = (await consume_all(m.backup.bootstrap, m.remote(topic),
                                expected=sum(1 for _ in source)))[partition]
    if source_offset == len(source):
        return len(target)
    value = source[source_offset].value
    return next(r.offset for r in target if r.value == value)


# -- testReplication (checkpoint part) ---------------------------------------------------------
async def test_checkpoints_cover_every_partition_and_a_consumer_resumes_from_them(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, group = f"{unique}-orders", f"{unique}-app"
    await create_topic(primary.bootstrap, topic, 5)
    await produce(primary.bootstrap, topic, values(topic, 5, 20))
    async with mirror(primary, backup, tmp_path, topic) as m:
        await consume_all(backup.bootstrap, m.remote(topic), expected=100)
        await commit_offsets(primary.bootstrap, group, {(topic, p): 20 for p in range(5)})
        latest = await wait_checkpoints(m, group, {(m.remote(topic), p): 20 for p in range(5)})
        # A consumer on the target seeking to the checkpoints has nothing left to read.
        consumer = AIOKafkaConsumer(bootstrap_servers=backup.bootstrap, group_id=None,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(m.remote(topic), p) for p in range(5)]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, latest[(tp.topic, tp.partition)].downstream_offset)
            leftover = await consumer.getmany(timeout_ms=1000)
            assert sum(len(b) for b in leftover.values()) == 0
            positions = [await consumer.position(tp) for tp in tps]
            assert all(0 < position <= 20 for position in positions)
        finally:
            await consumer.stop()
        assert_monotonic(await m.checkpoints())


async def test_checkpoint_records_have_mms_byte_layout(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """Decoded by hand here rather than with our own decoder: key = group, topic (int16
    length + UTF-8), partition (int32); value = version 0 (int16), upstream offset, offset
    (int64), metadata (int16 length + UTF-8)."""
    topic, group = f"{unique}-raw", f"{unique}-raw-app"
    await create_topic(primary.bootstrap, topic, 1)
    await produce(primary.bootstrap, topic, values(topic, 1, 7))
    async with mirror(primary, backup, tmp_path, topic) as m:
        await consume_all(backup.bootstrap, m.remote(topic), expected=7)
        await commit_offsets(primary.bootstrap, group, {(topic, 0): 7})
        await wait_checkpoints(m, group, {(m.remote(topic), 0): 7})
        raw = (await consume_all(backup.bootstrap, m.checkpoints_topic))[0][-1]

    def string(buf: bytes, at: int) -> tuple[str, int]:
        n = struct.unpack_from(">h", buf, at)[0]
        return buf[at + 2:at + 2 + n].decode(), at + 2 + n
    g, at = string(raw.key, 0)
    t, at = string(raw.key, at)
    (p,) = struct.unpack_from(">i", raw.key, at)
    assert (g, t, p, len(raw.key)) == (group, m.remote(topic), 0, at + 4)
    version, upstream, downstream = struct.unpack_from(">hqq", raw.value, 0)
    metadata, end = string(raw.value, 18)
    assert (version, upstream, downstream, metadata, end) == (0, 7, 7, "", len(raw.value))


# -- testReplicationWithEmptyPartition -------------------------------------------------------------
async def test_an_empty_partition_does_not_stop_a_group_failing_over(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, group = f"{unique}-gappy", f"{unique}-gappy-app"
    await create_topic(primary.bootstrap, topic, 4)
    await produce(primary.bootstrap, topic, values(topic, 3, 10))  # partition 3 stays empty
    async with mirror(primary, backup, tmp_path, topic,
                      **{"sync.group.offsets.enabled": "true"}) as m:
        await consume_all(backup.bootstrap, m.remote(topic), expected=30)
        read = await consume_as_group(primary.bootstrap, group, [topic])
        assert len(read) == 30
        remote = [(m.remote(topic), p) for p in range(4)]

        async def synced() -> bool:
            got = await committed_offsets(backup.bootstrap, group, remote)
            return all(got[(m.remote(topic), p)] == 10 for p in range(3))
        await wait_for(synced, 30, "group offsets were not synced to the target", interval=0.5)
        # The group resumes on the target: nothing read twice, and partition 3 starts at 0.
        again = await consume_as_group(backup.bootstrap, group, [m.remote(topic)])
        assert again == []
        assert (await committed_offsets(backup.bootstrap, group, remote))[remote[3]] == 0


# -- testOneWayReplicationWithAutoOffsetSync (group-offset sync) -----------------------------------
async def test_group_offsets_are_synced_for_idle_groups_and_new_topics(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    first, second, group = f"{unique}-one", f"{unique}-two", f"{unique}-synced"
    await create_topic(primary.bootstrap, first, 4)
    await produce(primary.bootstrap, first, values(first, 4, 25))
    async with mirror(primary, backup, tmp_path, f"{unique}-.*",
                      **{"sync.group.offsets.enabled": "true", "offset.lag.max": "10",
                         "refresh.topics.interval.seconds": "1"}) as m:
        await consume_all(backup.bootstrap, m.remote(first), expected=100)
        assert len(await consume_as_group(primary.bootstrap, group, [first])) == 100

        async def synced(topics: list[str], per_partition: int) -> None:
            remote = [(m.remote(t), p) for t in topics for p in range(4)]

            async def done() -> bool:
                got = await committed_offsets(backup.bootstrap, group, remote)
                return all(v == per_partition for v in got.values())
            await wait_for(done, 30, f"{group} not synced for {topics}", interval=0.5)
        await synced([first], 25)
        # With an exact offset map, the group on the target re-reads nothing at all (MM2
        # promises fewer than offset.lag.max per partition).
        assert await read_from_committed(backup.bootstrap, group, m.remote(first)) == []

        await create_topic(primary.bootstrap, second, 4)
        await produce(primary.bootstrap, second, values(second, 4, 25))
        await consume_all(backup.bootstrap, m.remote(second), expected=100, timeout=60)
        assert len(await consume_as_group(primary.bootstrap, group, [first, second])) == 100
        await synced([first, second], 25)
        for t in (first, second):
            assert await read_from_committed(backup.bootstrap, group, m.remote(t)) == []
        assert_monotonic(await m.checkpoints())


async def test_group_offset_sync_leaves_active_groups_alone_and_never_rewinds(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """`idle` shows the sync runs meanwhile. A member that left is not shown to unblock
    the group: Tansu never forgets members that left."""
    topic, busy, ahead = f"{unique}-s", f"{unique}-busy", f"{unique}-ahead"
    idle = f"{unique}-idle"
    await create_topic(primary.bootstrap, topic, 2)
    await produce(primary.bootstrap, topic, values(topic, 2, 50))
    async with mirror(primary, backup, tmp_path, topic,
                      **{"sync.group.offsets.enabled": "true"}) as m:
        remote = [(m.remote(topic), p) for p in range(2)]
        await consume_all(backup.bootstrap, m.remote(topic), expected=100)
        await commit_offsets(backup.bootstrap, ahead, dict.fromkeys(remote, 40))
        # A consumer of `busy` is active on the target (joined, not committing).
        member = AIOKafkaConsumer(m.remote(topic), bootstrap_servers=backup.bootstrap,
                                  group_id=busy, enable_auto_commit=False,
                                  session_timeout_ms=6000, heartbeat_interval_ms=500)
        await member.start()
        try:
            while not member.assignment():
                await member.getmany(timeout_ms=200)
            await commit_offsets(primary.bootstrap, busy, {(topic, p): 30 for p in range(2)})
            await commit_offsets(primary.bootstrap, ahead, {(topic, p): 20 for p in range(2)})
            await commit_offsets(primary.bootstrap, idle, {(topic, p): 10 for p in range(2)})
            await wait_checkpoints(m, busy, dict.fromkeys(remote, 30))
            await wait_checkpoints(m, ahead, dict.fromkeys(remote, 20))

            async def idle_synced() -> bool:
                got = await committed_offsets(backup.bootstrap, idle, remote)
                return set(got.values()) == {10}
            await wait_for(idle_synced, 30, "the idle group was not synced", interval=0.5)
            await asyncio.sleep(3)  # three more sync rounds
            assert set((await committed_offsets(backup.bootstrap, busy, remote)).values()) \
                == {None}
            assert set((await committed_offsets(backup.bootstrap, ahead, remote)).values()) \
                == {40}
        finally:
            await member.stop()


# -- testNoCheckpointsIfNoRecordsAreMirrored -------------------------------------------------------
async def test_no_checkpoint_for_a_partition_until_records_are_mirrored(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    full, empty, group = f"{unique}-full", f"{unique}-empty", f"{unique}-nocp"
    await create_topic(primary.bootstrap, full, 1)
    await create_topic(primary.bootstrap, empty, 1)
    await produce(primary.bootstrap, full, values(full, 1, 100))
    async with mirror(primary, backup, tmp_path, f"{full}, {empty}") as m:
        await consume_all(backup.bootstrap, m.remote(full), expected=100)
        await consume_all(backup.bootstrap, m.remote(empty))  # exists, empty
        await commit_offsets(primary.bootstrap, group, {(full, 0): 100, (empty, 0): 0})
        props = {"bootstrap.servers": backup.bootstrap}

        async def translated(*topics: str) -> bool:
            got = await translate_offsets(props, m.a, group)
            return all((m.remote(t), 0) in got for t in topics)
        await wait_for(lambda: translated(full), 30, "no checkpoint for the full topic",
                       interval=0.5)
        await asyncio.sleep(2)  # two more checkpoint rounds
        got = await translate_offsets(props, m.a, group)
        assert got[(m.remote(full), 0)][0] == 100
        assert (m.remote(empty), 0) not in got

        await produce(primary.bootstrap, empty, values(empty, 1, 100))
        await consume_all(backup.bootstrap, m.remote(empty), expected=100)
        await commit_offsets(primary.bootstrap, group, {(full, 0): 100, (empty, 0): 100})

        # A checkpoint of 0 for `empty` may come first, and rightly: once its records are
        # mirrored, a round that still read the group's earlier commit (0) translates it.
        # Wait for the checkpoint of the commit just made, not for any checkpoint.
        async def translated_to(offset: int) -> bool:
            got = await translate_offsets(props, m.a, group)
            return (m.remote(empty), 0) in got and got[(m.remote(empty), 0)][0] == offset
        await wait_for(lambda: translated_to(100), 30,
                       "no checkpoint once records were mirrored", interval=0.5)
        got = await translate_offsets(props, m.a, group)
        assert got[(m.remote(full), 0)][0] == 100
        assert got[(m.remote(empty), 0)][0] == 100


# -- testRestartReplication ------------------------------------------------------------------------
async def test_checkpoints_never_go_backwards_across_restarts(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, group = f"{unique}-rs", f"{unique}-restart"
    await create_topic(primary.bootstrap, topic, 4)
    await produce(primary.bootstrap, topic, values(topic, 4, 25))
    async with mirror(primary, backup, tmp_path, topic,
                      **{"sync.group.offsets.enabled": "true", "offset.lag.max": "10"}) as m:
        remote = [(m.remote(topic), p) for p in range(4)]
        await consume_all(backup.bootstrap, m.remote(topic), expected=100)
        await commit_offsets(primary.bootstrap, group, {(topic, p): 25 for p in range(4)})

        async def synced(n: int) -> bool:
            return set((await committed_offsets(backup.bootstrap, group, remote)).values()) \
                == {n}
        await wait_for(lambda: synced(25), 30, "first sync", interval=0.5)

        for proc in (m.checkpointer, m.replicator):  # a restart of everything
            await proc.close()
        for proc in (m.replicator, m.checkpointer):
            await proc.start()
            await proc.wait_serving()
        await asyncio.sleep(2)
        assert_monotonic(await m.checkpoints())

        await produce(primary.bootstrap, topic, values(topic, 4, 25, start=25))
        await consume_all(backup.bootstrap, m.remote(topic), expected=200)
        await commit_offsets(primary.bootstrap, group, {(topic, p): 50 for p in range(4)})
        await wait_for(lambda: synced(50), 30, "sync after the restart", interval=0.5)
        assert_monotonic(await m.checkpoints())


async def test_a_killed_checkpointer_reloads_its_checkpoints(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """After SIGKILL, a new checkpointer must not write a checkpoint older than the last one,
    even though the group's committed offsets have not changed."""
    topic, group = f"{unique}-k", f"{unique}-killed"
    await create_topic(primary.bootstrap, topic, 2)
    await produce(primary.bootstrap, topic, values(topic, 2, 40))
    async with mirror(primary, backup, tmp_path, topic) as m:
        await consume_all(backup.bootstrap, m.remote(topic), expected=80)
        await commit_offsets(primary.bootstrap, group, {(topic, p): 40 for p in range(2)})
        await wait_checkpoints(m, group, {(m.remote(topic), p): 40 for p in range(2)})
        await m.checkpointer.signal(signal.SIGKILL)
        await m.checkpointer.wait()
        before = len(await m.checkpoints())
        await m.checkpointer.start()
        await m.checkpointer.wait_serving()
        await asyncio.sleep(3)
        after = await m.checkpoints()
        assert_monotonic(after)
        assert all(c.upstream_offset == 40 and c.downstream_offset == 40
                   for c in after[before:] if c.group == group)


# -- testOffsetTranslationBehindReplicationFlow ----------------------------------------------------
async def test_a_lagging_group_is_translated_exactly_even_after_a_rewind(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, group = f"{unique}-lag", f"{unique}-lagging"
    await create_topic(primary.bootstrap, topic, 4)
    await produce(primary.bootstrap, topic, values(topic, 4, 25))
    async with mirror(primary, backup, tmp_path, topic,
                      **{"sync.group.offsets.enabled": "true", "offset.lag.max": "10"}) as m:
        await consume_all(backup.bootstrap, m.remote(topic), expected=100)
        await commit_offsets(primary.bootstrap, group, {(topic, p): 25 for p in range(4)})
        initial = await wait_checkpoints(m, group, {(m.remote(topic), p): 25 for p in range(4)})

        await produce(primary.bootstrap, topic, values(topic, 4, 1225, start=25))
        await consume_all(backup.bootstrap, m.remote(topic), expected=5000, timeout=60)
        n = 1250
        for fraction, compare in ((0.9, int.__gt__), (0.1, int.__lt__)):
            at = int(fraction * n)
            exact = {p: await target_offset_of(m, topic, p, at) for p in range(4)}
            await commit_offsets(primary.bootstrap, group, {(topic, p): at for p in range(4)})
            # Exact: the checkpoint comes to point at the very record the group would read
            # next. (A checkpoint emitted before the replicator's offset map covers `at` is
            # translated from the sparse offset syncs, as MM2's is, and the next one is exact.)
            latest = await wait_checkpoints(
                m, group, {(m.remote(topic), p): at for p in range(4)},
                downstream={(m.remote(topic), p): exact[p] for p in range(4)})
            for p in range(4):
                key = (m.remote(topic), p)
                assert compare(latest[key].downstream_offset, initial[key].downstream_offset)
            if fraction == 0.9:
                assert_monotonic(await m.checkpoints())
                initial = latest


async def test_the_offset_map_places_every_mirrored_record_exactly(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """The replicator's offset map, read back as the checkpointer reads it, sends every
    source offset to the target offset of that very record -- and stays compact."""
    topic = f"{unique}-map"
    await create_topic(primary.bootstrap, topic, 3)
    async with mirror(primary, backup, tmp_path, topic) as m:
        for round_ in range(5):  # several produce rounds: many replicated batches
            await produce(primary.bootstrap, topic, values(topic, 3, 40, start=40 * round_))
            await asyncio.sleep(0.3)
        target = await consume_all(backup.bootstrap, m.remote(topic), expected=600)
        source = await consume_all(primary.bootstrap, topic)
        offset_map = OffsetMap()
        published = 0

        async def mapped() -> bool:
            nonlocal offset_map, published
            offset_map, records = OffsetMap(), await consume_all(
                backup.bootstrap, offset_map_topic(m.a))
            published = sum(len(rs) for rs in records.values())
            for rs in records.values():
                for r in rs:
                    message = OffsetMapRecord()
                    message.ParseFromString(r.value)
                    offset_map.add_record(message)
            return all(offset_map.mapped_until(topic, p) == 200 for p in range(3))
        await wait_for(mapped, 30, "the offset map never covered every record", interval=0.5)
    for p in range(3):
        landed = {r.value: r.offset for r in target[p]}
        for record in source[p]:
            located = offset_map.locate(topic, p, record.offset)
            assert located is not None and located.exact
            assert located.downstream == landed[record.value]
    assert published <= 3 * 10  # runs are coalesced: far fewer records than batches
