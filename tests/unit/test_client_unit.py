"""mirrorline.client without a broker: property parsing, checkpoint folding, guards."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from mirrorline.client import MirrorClient, translate_offsets_sync, upstream_clusters_sync
from mirrorline.client.checkpoints import fold_checkpoints
from mirrorline.client.config import client_properties, policy_from_properties
from mirrorline.core.errors import ConfigError
from mirrorline.core.policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from mirrorline.core.wire import Checkpoint

BOOT = {"bootstrap.servers": "127.0.0.1:1"}


@dataclass(frozen=True)
class FakeRecord:
    key: bytes | None
    value: bytes | None
    topic: str = "a.checkpoints.internal"
    partition: int = 0
    offset: int = 0
    timestamp: int = 0
    headers: Sequence[tuple[str, bytes]] = ()


def checkpoint(group: str, topic: str, partition: int, downstream: int,
               metadata: str = "") -> FakeRecord:
    c = Checkpoint(group, topic, partition, downstream + 100, downstream, metadata)
    return FakeRecord(c.encode_key(), c.encode_value())


# --- policy -------------------------------------------------------------------------------------


def test_policy_defaults_to_default_policy_with_dot() -> None:
    policy = policy_from_properties(BOOT)
    assert type(policy) is DefaultReplicationPolicy
    assert policy.checkpoints_topic("a") == "a.checkpoints.internal"
    assert policy.topic_source("a.orders") == "a"


@pytest.mark.parametrize("name", [
    "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
    " IdentityReplicationPolicy ",
    "identity",
])
def test_identity_policy_by_any_spelling_reads_source_alias(name: str) -> None:
    policy = policy_from_properties({"replication.policy.class": name,
                                     "source.cluster.alias": "primary"})
    assert isinstance(policy, IdentityReplicationPolicy)
    assert policy.topic_source("orders") == "primary"
    assert policy.topic_source("backup.heartbeats") == "backup"


def test_separator_and_internal_flag() -> None:
    on = policy_from_properties({"replication.policy.separator": "__"})
    assert on.checkpoints_topic("C") == "C__checkpoints__internal"
    assert on.topic_source("C__orders") == "C"
    off = policy_from_properties({"replication.policy.separator": "__",
                                  "replication.policy.internal.topic.separator.enabled": "FALSE"})
    assert off.checkpoints_topic("C") == "C.checkpoints.internal"
    assert off.topic_source("C__orders") == "C"
    # Without a separator the flag is never consulted (MM2 reads it only with the key).
    plain = policy_from_properties({"replication.policy.internal.topic.separator.enabled": "false"})
    assert plain.checkpoints_topic("C") == "C.checkpoints.internal"


@pytest.mark.parametrize(("props", "key"), [
    ({"replication.policy.class": "com.example.MyPolicy"}, "replication.policy.class"),
    ({"replication.policy.separator": "__",
      "replication.policy.internal.topic.separator.enabled": "yes"},
     "replication.policy.internal.topic.separator.enabled"),
    # The loader's bounds hold here too: a separator repeated in every topic name.
    ({"replication.policy.separator": "-" * 17}, "replication.policy.separator"),
    ({"replication.policy.separator": "a/b"}, "replication.policy.separator"),
])
def test_bad_policy_properties_name_the_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as e:
        MirrorClient({**BOOT, **props})
    assert e.value.key == key


def test_bad_connection_property_fails_in_constructor() -> None:
    with pytest.raises(ConfigError) as e:
        MirrorClient({"bootstrap.servers": "no-port"})
    assert e.value.key == "bootstrap.servers"


# --- client properties ----------------------------------------------------------------------------


def test_client_properties_keep_connection_keys_with_prefix_override() -> None:
    props = {
        "bootstrap.servers": "a:1",
        "security.protocol": "SSL",
        "ssl.truststore.location": "/t.pem",
        "sasl.mechanism": "PLAIN",
        "max.poll.records": "5",  # tuning: dropped, as MM2 drops it
        "group.id": "g",
        "consumer.bootstrap.servers": "c:2",
        "consumer.max.poll.records": "7",
        "admin.security.protocol": "PLAINTEXT",
        "replication.policy.separator": "_",
    }
    assert client_properties(props, "consumer.") == {
        "bootstrap.servers": "c:2", "security.protocol": "SSL",
        "ssl.truststore.location": "/t.pem", "sasl.mechanism": "PLAIN"}
    assert client_properties(props, "admin.") == {
        "bootstrap.servers": "a:1", "security.protocol": "PLAINTEXT",
        "ssl.truststore.location": "/t.pem", "sasl.mechanism": "PLAIN"}


# --- checkpoint folding ---------------------------------------------------------------------------


def test_fold_keeps_last_checkpoint_per_partition_of_the_group_only() -> None:
    records = [
        checkpoint("g", "a.orders", 0, 9),
        checkpoint("g", "a.orders", 1, 19, "m1"),
        checkpoint("other", "a.orders", 0, 99),
        FakeRecord(b"junk", b"\x00"),
        FakeRecord(checkpoint("g", "a.orders", 0, 1).key, None),  # tombstone
        FakeRecord(None, None),
        checkpoint("g", "a.orders", 0, 29, "é"),
        checkpoint("g", "a.other", 0, 4),
    ]
    assert fold_checkpoints(records, "g") == {
        ("a.orders", 0): (29, "é"),
        ("a.orders", 1): (19, "m1"),
        ("a.other", 0): (4, ""),
    }
    assert fold_checkpoints(records, "other") == {("a.orders", 0): (99, "")}
    assert fold_checkpoints(records, "nobody") == {}


def test_fold_into_existing_result_continues_it() -> None:
    acc = fold_checkpoints([checkpoint("g", "t", 0, 1)], "g")
    fold_checkpoints([checkpoint("g", "t", 0, 2)], "g", acc)
    assert acc == {("t", 0): (2, "")}


# --- lifecycle guards -----------------------------------------------------------------------------


async def test_methods_need_start() -> None:
    client = MirrorClient(BOOT)
    with pytest.raises(RuntimeError, match="not started"):
        await client.heartbeat_topics()
    await client.close()  # harmless before start


async def test_sync_helpers_refuse_a_running_loop() -> None:
    with pytest.raises(RuntimeError, match="event loop"):
        translate_offsets_sync(BOOT, "a", "g")
    with pytest.raises(RuntimeError, match="event loop"):
        upstream_clusters_sync(BOOT)
    # ...but work from a worker thread, where no loop is running (the connection fails
    # here: nothing listens on port 1).
    with pytest.raises(Exception) as e:
        await asyncio.to_thread(upstream_clusters_sync, BOOT)
    assert not isinstance(e.value, RuntimeError) or "event loop" not in str(e.value)
