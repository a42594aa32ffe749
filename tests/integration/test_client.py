"""MirrorClient / RemoteClusterUtils against a real local cluster.

The internal topics are written here byte for byte as MM2 writes them (`mirrorline.core.wire`),
so these tests pin compatibility with Java MM2 deployments, not just with Mirrorline.  The
brokers are shared by the whole suite: every test uses fresh cluster aliases, and the shared
``heartbeats`` topic is never part of an asserted exact set.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator

import pytest
from helpers import Record, create_topic, produce, start_cluster, stop_cluster

from mirrorline.client import (
    MirrorClient,
    checkpoint_topics,
    heartbeat_topics,
    replication_hops,
    replication_hops_sync,
    translate_offsets,
    translate_offsets_sync,
    upstream_clusters,
    upstream_clusters_sync,
)
from mirrorline.core.wire import Checkpoint, Heartbeat
from mirrorline.dev.brokers import LocalBroker

pytestmark = pytest.mark.integration


# Clusters of this module's own: its heartbeat topics (including `heartbeats` itself) would
# otherwise be mirrored by every flow other tests run on the shared clusters.
@pytest.fixture(scope="module")
async def own_clusters(tmp_path_factory: pytest.TempPathFactory
                       ) -> AsyncIterator[tuple[LocalBroker, LocalBroker]]:
    directory = tmp_path_factory.mktemp("client")
    results = await asyncio.gather(
        *(start_cluster(f"client-{name}", directory / name) for name in ("primary", "backup")),
        return_exceptions=True)
    started = [r for r in results if not isinstance(r, BaseException)]
    try:
        for result in results:
            if isinstance(result, BaseException):
                raise result
        yield started[0], started[1]
    finally:
        await asyncio.gather(*(stop_cluster(c) for c in started))


@pytest.fixture(scope="module")
def primary(own_clusters: tuple[LocalBroker, LocalBroker]) -> LocalBroker:
    return own_clusters[0]


@pytest.fixture(scope="module")
def backup(own_clusters: tuple[LocalBroker, LocalBroker]) -> LocalBroker:
    return own_clusters[1]


IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def alias() -> str:
    """A cluster alias no other test uses (no separator inside)."""
    return f"s{secrets.token_hex(4)}"


def props(broker: LocalBroker, **extra: str) -> dict[str, str]:
    # Tuning keys are accepted and ignored, as MM2's MirrorClientConfig ignores them.
    return {"bootstrap.servers": broker.bootstrap, "max.poll.records": "3", **extra}


async def heartbeat_topic(broker: LocalBroker, topic: str, source: str, target: str) -> None:
    await create_topic(broker.bootstrap, topic)
    beat = Heartbeat(source, target, 1_700_000_000_000)
    await produce(broker.bootstrap, topic, [Record(beat.encode_value(), beat.encode_key())])


def cp(group: str, topic: str, partition: int, downstream: int, metadata: str = "",
       *, on: int = 0) -> Record:
    c = Checkpoint(group, topic, partition, downstream + 1000, downstream, metadata)
    return Record(c.encode_value(), c.encode_key(), partition=on)


async def test_hops_and_upstream_clusters_of_a_multi_hop_chain(primary: LocalBroker) -> None:
    a1, a2, a3, a4, stranger = alias(), alias(), alias(), alias(), alias()
    async with MirrorClient(props(primary)) as client:
        # Created after start: a long-lived client must see new topics.
        await heartbeat_topic(primary, f"{a1}.heartbeats", a1, "primary")
        await heartbeat_topic(primary, f"{a2}.{a1}.heartbeats", a1, a2)
        await heartbeat_topic(primary, f"{a3}.{a4}.heartbeats", a4, a3)
        await create_topic(primary.bootstrap, f"{stranger}.orders")  # not a heartbeats topic

        beats = await client.heartbeat_topics()
        assert {f"{a1}.heartbeats", f"{a2}.{a1}.heartbeats", f"{a3}.{a4}.heartbeats"} <= beats
        assert f"{stranger}.orders" not in beats

        upstream = await client.upstream_clusters()
        assert {a1, a2, a3, a4} <= upstream
        assert stranger not in upstream
        assert "" not in upstream

        assert await client.replication_hops(a1) == 1  # min(1 direct, 2 via a2)
        assert await client.replication_hops(a2) == 1
        assert await client.replication_hops(a3) == 1
        assert await client.replication_hops(a4) == 2
        assert await client.replication_hops(stranger) == -1

    # The one-call helpers give the same answers.
    p = props(primary)
    assert await replication_hops(p, a4) == 2
    assert {a1, a2, a3, a4} <= await upstream_clusters(p)
    assert f"{a2}.{a1}.heartbeats" in await heartbeat_topics(p)


async def test_checkpoint_topics(primary: LocalBroker, unique: str) -> None:
    a, b = alias(), alias()
    await create_topic(primary.bootstrap, f"{a}.checkpoints.internal")
    await create_topic(primary.bootstrap, f"{b}__checkpoints__internal")
    await create_topic(primary.bootstrap, f"{unique}-checkpoints.internal")  # no separator

    found = await checkpoint_topics(props(primary))
    assert f"{a}.checkpoints.internal" in found
    assert f"{b}__checkpoints__internal" not in found
    assert f"{unique}-checkpoints.internal" not in found

    custom = await checkpoint_topics(props(primary, **{"replication.policy.separator": "__"}))
    assert f"{b}__checkpoints__internal" in custom
    assert f"{a}.checkpoints.internal" not in custom


async def test_remote_topics_default_policy(primary: LocalBroker, unique: str) -> None:
    a, b = alias(), alias()
    for topic in (f"{a}.{unique}-orders", f"{a}.{b}.{unique}-orders", f"{a}.heartbeats",
                  f"{a}.checkpoints.internal", f"{unique}-local", f"{b}.{unique}-orders"):
        await create_topic(primary.bootstrap, topic)

    async with MirrorClient(props(primary)) as client:
        # Heartbeats are remote topics too (MM2 only excludes internal ones).
        assert await client.remote_topics(a) == {
            f"{a}.{unique}-orders", f"{a}.{b}.{unique}-orders", f"{a}.heartbeats"}
        assert await client.remote_topics(b) == {f"{b}.{unique}-orders"}
        everything = await client.remote_topics()
        assert {f"{a}.{unique}-orders", f"{b}.{unique}-orders"} <= everything
        assert f"{unique}-local" not in everything
        assert f"{a}.checkpoints.internal" not in everything


async def test_remote_topics_identity_policy(primary: LocalBroker, unique: str) -> None:
    a, b = alias(), alias()
    await create_topic(primary.bootstrap, "heartbeats")  # may exist already: fine
    for topic in (f"{unique}-orders", f"{b}.heartbeats", f"{a}.checkpoints.internal"):
        await create_topic(primary.bootstrap, topic)

    identity = props(primary, **{"replication.policy.class": IDENTITY,
                                 "source.cluster.alias": a})
    async with MirrorClient(identity) as client:
        from_a = await client.remote_topics(a)
        # Without renaming, every non-internal, non-heartbeat topic counts as from `a`.
        assert f"{unique}-orders" in from_a
        assert f"{b}.heartbeats" not in from_a
        assert f"{a}.checkpoints.internal" not in from_a
        assert await client.remote_topics(b) == {f"{b}.heartbeats"}
        assert "heartbeats" not in await client.remote_topics()
        # Heartbeats stay renamed under identity, so topology discovery still works.
        upstream = await client.upstream_clusters()
        assert b in upstream
        assert a not in upstream
        assert await client.replication_hops(b) == 1

    # Without source.cluster.alias an identity policy sees no remote data topics at all.
    anonymous = props(primary, **{"replication.policy.class": IDENTITY})
    async with MirrorClient(anonymous) as client:
        remote = await client.remote_topics()
        assert f"{unique}-orders" not in remote
        assert f"{b}.heartbeats" in remote


async def test_translate_offsets_keeps_last_checkpoint_of_the_group(
        backup: LocalBroker, unique: str) -> None:
    remote = alias()
    topic = f"{remote}.checkpoints.internal"
    orders, other = f"{remote}.{unique}-orders", f"{remote}.{unique}-other"
    group = f"{unique}-app"
    # Two partitions: MM2 reads partition 0 only, so the checkpoint on partition 1 must not
    # show up in the answer.
    await create_topic(backup.bootstrap, topic, partitions=2)
    tombstone_key = Checkpoint(group, orders, 0, 1, 1).encode_key()
    await produce(backup.bootstrap, topic, [
        cp(group, orders, 0, 9),
        cp(group, orders, 1, 19, "m1"),
        cp("someone-else", orders, 0, 99),
        Record(b"\x00", b"junk-key"),  # not a checkpoint: skipped
        Record(None, tombstone_key),  # tombstone: skipped
        cp(group, orders, 0, 29, "é"),  # later checkpoint wins
        cp(group, other, 3, 4),
        cp(group, orders, 2, 777, on=1),  # partition 1 of the checkpoints topic
    ])
    expected = {(orders, 0): (29, "é"), (orders, 1): (19, "m1"), (other, 3): (4, "")}

    async with MirrorClient(props(backup)) as client:
        assert await client.remote_consumer_offsets(group, remote, timeout=30) == expected
        assert await client.remote_consumer_offsets("someone-else", remote, timeout=30) == {
            (orders, 0): (99, "")}
        assert await client.remote_consumer_offsets("nobody", remote, timeout=30) == {}
        # Out of time before the first poll: whatever was read (nothing), no exception.
        assert await client.remote_consumer_offsets(group, remote, timeout=0) == {}

    assert await translate_offsets(props(backup), remote, group, timeout=30) == expected


async def test_translate_offsets_without_checkpoints_topic(backup: LocalBroker) -> None:
    remote = alias()
    started = time.monotonic()
    assert await translate_offsets(props(backup), remote, "any-group", timeout=30) == {}
    assert time.monotonic() - started < 10, "a missing topic must not wait for the timeout"
    # ...and asking must not have created it.
    assert f"{remote}.checkpoints.internal" not in await checkpoint_topics(props(backup))


async def test_translate_offsets_from_an_empty_checkpoints_topic(backup: LocalBroker) -> None:
    remote = alias()
    await create_topic(backup.bootstrap, f"{remote}.checkpoints.internal")
    started = time.monotonic()
    assert await translate_offsets(props(backup), remote, "any-group", timeout=30) == {}
    assert time.monotonic() - started < 10, "an empty topic is read to its end at once"


async def test_sync_wrappers_outside_the_event_loop(backup: LocalBroker, unique: str) -> None:
    remote, hop = alias(), alias()
    topic = f"{remote}.checkpoints.internal"
    await create_topic(backup.bootstrap, topic)
    await produce(backup.bootstrap, topic, [cp(unique, f"{remote}.t", 0, 5, "x"),
                                            cp(unique, f"{remote}.t", 0, 6, "y")])
    await heartbeat_topic(backup, f"{hop}.{remote}.heartbeats", remote, hop)
    p = props(backup)

    offsets = await asyncio.to_thread(translate_offsets_sync, p, remote, unique, 30.0)
    assert offsets == {(f"{remote}.t", 0): (6, "y")}
    assert await asyncio.to_thread(replication_hops_sync, p, remote) == 2
    assert {remote, hop} <= await asyncio.to_thread(upstream_clusters_sync, p)
    with pytest.raises(RuntimeError, match="event loop"):
        translate_offsets_sync(p, remote, unique)
