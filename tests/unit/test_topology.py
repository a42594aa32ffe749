"""Topology discovery from topic names, pinned by MM2's MirrorClientTest."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirrorline.core.policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from mirrorline.core.topology import (
    checkpoint_topics,
    count_hops,
    heartbeat_topics,
    remote_topics,
    replication_hops,
    upstream_clusters,
)

DEFAULT = DefaultReplicationPolicy()


@pytest.mark.parametrize(("topic", "alias", "hops"), [
    ("topic", "source", -1),
    ("source", "source", -1),
    ("sourcetopic", "source", -1),
    ("source1.topic", "source2", -1),
    ("source1.topic", "source1", 1),
    ("source2.source1.topic", "source2", 1),
    ("source2.source1.topic", "source1", 2),
    ("source3.source2.source1.topic", "source1", 3),
    ("source3.source2.source1.topic", "source4", -1),
])
def test_count_hops(topic: str, alias: str, hops: int) -> None:
    assert count_hops(DEFAULT, topic, alias) == hops


def test_count_hops_stops_on_identity_loops() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="primary")
    assert count_hops(policy, "orders", "primary") == 1
    assert count_hops(policy, "orders", "other") == -1


HOPS_TOPICS = ["topic1", "topic2", "heartbeats", "source1.heartbeats",
               "source1.source2.heartbeats", "source3.heartbeats"]


@pytest.mark.parametrize(("alias", "hops"), [
    ("source1", 1), ("source2", 2), ("source3", 1), ("source4", -1),
])
def test_replication_hops(alias: str, hops: int) -> None:
    assert replication_hops(DEFAULT, HOPS_TOPICS, alias) == hops


def test_replication_hops_takes_the_shortest_path() -> None:
    topics = ["b.a.heartbeats", "a.heartbeats", "c.b.a.heartbeats"]
    assert replication_hops(DEFAULT, topics, "a") == 1
    assert replication_hops(DEFAULT, topics, "b") == 1
    assert replication_hops(DEFAULT, topics, "c") == 1
    assert replication_hops(DEFAULT, ["c.b.a.heartbeats"], "a") == 3


def test_replication_hops_ignores_non_heartbeat_topics() -> None:
    assert replication_hops(DEFAULT, ["source9.orders"], "source9") == -1


def test_heartbeat_topics_include_local_one() -> None:
    assert heartbeat_topics(DEFAULT, HOPS_TOPICS) == {
        "heartbeats", "source1.heartbeats", "source1.source2.heartbeats", "source3.heartbeats"}


UPSTREAM_TOPICS = ["topic1", "topic2", "heartbeats", "source1.heartbeats",
                   "source1.source2.heartbeats", "source3.source4.source5.heartbeats"]


def test_upstream_clusters() -> None:
    assert upstream_clusters(DEFAULT, UPSTREAM_TOPICS) == {
        "source1", "source2", "source3", "source4", "source5"}


def test_upstream_clusters_identity() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="source")
    assert upstream_clusters(policy, UPSTREAM_TOPICS) == {
        "source1", "source2", "source3", "source4", "source5"}


def test_upstream_clusters_never_reports_the_empty_alias() -> None:
    # ".heartbeats" parses as coming from "" under Java split semantics.
    assert upstream_clusters(DEFAULT, [".heartbeats", "a..heartbeats"]) == {"a"}


def test_checkpoint_topics() -> None:
    topics = ["topic1", "checkpoints.internal", "source1.checkpoints.internal",
              "source2.source1.checkpoints.internal", "source3.checkpoints.internal",
              "heartbeats"]
    assert checkpoint_topics(DEFAULT, topics) == {
        "source1.checkpoints.internal", "source2.source1.checkpoints.internal",
        "source3.checkpoints.internal"}


def test_remote_topics_default() -> None:
    topics = ["topic1", "topic2", "topic3", "source1.topic4", "source1.source2.topic5",
              "source3.source4.source5.topic6", "source1.heartbeats", "heartbeats",
              "source1.checkpoints.internal", "__consumer_offsets", "mm2-offsets.x.internal"]
    assert remote_topics(DEFAULT, topics) == {
        "source1.topic4", "source1.source2.topic5", "source3.source4.source5.topic6",
        "source1.heartbeats"}
    assert remote_topics(DEFAULT, topics, "source1") == {
        "source1.topic4", "source1.source2.topic5", "source1.heartbeats"}
    assert remote_topics(DEFAULT, topics, "source2") == set()


def test_remote_topics_custom_separator() -> None:
    policy = DefaultReplicationPolicy("__")
    topics = ["topic1", "source1__topic4", "source1__source2__topic5", "source1.topic6"]
    assert remote_topics(policy, topics) == {"source1__topic4", "source1__source2__topic5"}
    assert remote_topics(policy, topics, "source1") == {
        "source1__topic4", "source1__source2__topic5"}


def test_remote_topics_identity() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="source")
    topics = ["topic1", "topic2", "topic3", "heartbeats", "backup.heartbeats",
              "source.checkpoints.internal"]
    assert remote_topics(policy, topics) == {"topic1", "topic2", "topic3", "backup.heartbeats"}
    assert remote_topics(policy, topics, "backup") == {"backup.heartbeats"}


def test_remote_topics_identity_without_alias() -> None:
    policy = IdentityReplicationPolicy()
    assert remote_topics(policy, ["topic1", "backup.heartbeats"]) == {"backup.heartbeats"}


_ALIAS = st.text(alphabet="abcxyz019-", min_size=1, max_size=5)


@given(chain=st.lists(_ALIAS, min_size=1, max_size=6, unique=True))
def test_hops_follow_the_chain(chain: list[str]) -> None:
    # chain[0] is the nearest hop: chain[0].chain[1]....heartbeats
    topic = ".".join([*chain, "heartbeats"])
    for index, alias in enumerate(chain):
        assert count_hops(DEFAULT, topic, alias) == index + 1
    assert upstream_clusters(DEFAULT, [topic]) == set(chain)
