"""ACL sync on Apache Kafka with the StandardAuthorizer and SASL/PLAIN principals.

Two clusters of their own (module scope): a PLAINTEXT listener for the test itself
(`User:ANONYMOUS`, a super user, plays the operator) and a SASL_PLAINTEXT listener where
Mirrorline logs in as `User:mirror`. The mirror holds exactly the ACLs docs/config-sync.md lists
under "ACLs Mirrorline needs" (`mirror_acls_source` / `mirror_acls_target` below, kept
identical to it) and nothing more: replication (in exactly-once mode), checkpoints,
config sync and ACL sync must all work with them. The ACL rules are MM2's
(`sync.topic.acls.mode = mm2`) -- literal topic ACLs copied to the remote topic, WRITE
never, ALL as READ -- and the `full` mode's prefixed and group ACLs and safe removal.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path

import pytest
from helpers import Record, commit_offsets, produce, wait_for
from kafka_checks import read_all, ready_topic, values
from procs import ServiceProcess, checkpointer, configsync, replicator

from mirrorline.core.aclsync import AclBinding
from mirrorline.dev import kafka
from mirrorline.dev.kafka import LocalKafkaCluster
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.kafka.syncadmin import create_acls, delete_acls, describe_acls
from mirrorline.v1 import drift_pb2, drift_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

SASL = "SASL_PLAINTEXT"
MIRROR_PASSWORD = "mirror-secret-0"
USERS = {"mirror": MIRROR_PASSWORD, "admin": "admin-secret-0"}
MIRROR = "User:mirror"


def secured_overrides() -> dict[str, str]:
    users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    return {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        "allow.everyone.if.no.acl.found": "false",
        "sasl.enabled.mechanisms": "PLAIN",
        f"listener.name.{SASL.lower()}.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="{USERS["admin"]}" {users};',
    }


@pytest.fixture(scope="module")
async def secured(tmp_path_factory: pytest.TempPathFactory
                  ) -> AsyncIterator[Mapping[str, LocalKafkaCluster]]:
    directory = tmp_path_factory.mktemp("secured")
    started = await asyncio.gather(*(
        kafka.start_kafka(alias, directory=directory / alias, overrides=secured_overrides(),
                          extra_listeners={SASL: SASL})
        for alias in ("src", "dst")), return_exceptions=True)
    clusters = [c for c in started if isinstance(c, LocalKafkaCluster)]
    try:
        for result in started:
            if isinstance(result, BaseException):
                raise result
        yield {c.alias: c for c in clusters}
    finally:
        await asyncio.gather(*(kafka.stop_kafka(c, timeout=2.0) for c in clusters))


def acl(name: str, principal: str, operation: str, *, pattern: str = "LITERAL",
        resource: str = "TOPIC", permission: str = "ALLOW") -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, permission)


def grants(resource: str, name: str, pattern: str, operations: str) -> list[AclBinding]:
    return [acl(name, MIRROR, op, pattern=pattern, resource=resource)
            for op in operations.split()]


def mirror_acls_source(source: str, target: str, topics_prefix: str) -> list[AclBinding]:
    """What the mirror needs on the source cluster `source` (docs/config-sync.md,
    "ACLs Mirrorline needs"); `topics_prefix` stands for the mirrored topics and groups."""
    return [*grants("TOPIC", topics_prefix, "PREFIXED", "READ DESCRIBE DESCRIBE_CONFIGS"),
            *grants("GROUP", topics_prefix, "PREFIXED", "DESCRIBE"),
            *grants("TOPIC", f"mm2-offset-syncs.{target}.internal", "LITERAL",
                    "CREATE READ WRITE DESCRIBE"),
            *grants("CLUSTER", "kafka-cluster", "LITERAL", "DESCRIBE DESCRIBE_CONFIGS")]


def mirror_acls_target(source: str) -> list[AclBinding]:
    """What the mirror needs on the target cluster (docs/config-sync.md)."""
    return [*grants("TOPIC", f"{source}.", "PREFIXED",
                    "CREATE WRITE READ DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS ALTER"),
            *(g for topic in (f"mm2-offsets.{source}.internal",
                              f"mirrorline-offset-map.{source}.internal",
                              f"mirrorline.drift-history.{source}.internal",
                              f"mirrorline.acl-owned.{source}.internal")
              for g in grants("TOPIC", topic, "LITERAL", "CREATE READ WRITE DESCRIBE")),
            *grants("TRANSACTIONAL_ID", "mirrorline-", "PREFIXED", "WRITE DESCRIBE"),
            *grants("CLUSTER", "kafka-cluster", "LITERAL", "DESCRIBE DESCRIBE_CONFIGS ALTER")]


async def add_acls(cluster: LocalKafkaCluster, bindings: Iterable[AclBinding]) -> None:
    async with ClusterAdmin("operator", {"bootstrap_servers": cluster.bootstrap}) as admin:
        errors = await create_acls(admin, bindings, 10)
    assert not [e for e in errors.values() if e], errors


async def remove_acls(cluster: LocalKafkaCluster, bindings: Iterable[AclBinding]) -> None:
    async with ClusterAdmin("operator", {"bootstrap_servers": cluster.bootstrap}) as admin:
        errors = await delete_acls(admin, bindings, 10)
    assert not [e for e in errors.values() if e], errors


async def acls_on(cluster: LocalKafkaCluster, prefix: str) -> set[AclBinding]:
    """The ACLs of the cluster on resources named `prefix`..., the mirror's own left out."""
    async with ClusterAdmin("operator", {"bootstrap_servers": cluster.bootstrap}) as admin:
        found = await describe_acls(admin, 10)
    return {b for b in found if b.name.startswith(prefix) and b.principal != MIRROR}


def mirror_config(clusters: Mapping[str, LocalKafkaCluster], topics: str, **flow: str) -> str:
    """An MM2 file whose clients log in as User:mirror on the SASL listener."""
    lines = ["clusters = src, dst"]
    for alias, cluster in clusters.items():
        lines += [f"{alias}.bootstrap.servers = {cluster.bootstrap_for(SASL)}",
                  f"{alias}.security.protocol = {SASL}",
                  f"{alias}.sasl.mechanism = PLAIN",
                  f"{alias}.sasl.jaas.config = org.apache.kafka.common.security.plain."
                  f'PlainLoginModule required username="mirror" password="{MIRROR_PASSWORD}";']
    settings = {"topics": topics, "refresh.topics.interval.seconds": "1",
                "sync.topic.configs.interval.seconds": "1",
                "sync.topic.acls.interval.seconds": "1", **flow}
    lines += ["src->dst.enabled = true", *(f"src->dst.{k} = {v}" for k, v in settings.items())]
    return "\n".join(lines) + "\n"



async def rounds(sync: ServiceProcess) -> int:
    status = await drift_pb2_grpc.ConfigSyncStub(sync.channel).GetSyncStatus(
        drift_pb2.SyncStatusRequest(), timeout=10)
    return int(status.flows[0].rounds)


async def more_rounds(sync: ServiceProcess, count: int) -> None:
    """Until `count` more sync rounds (each one with ACLs, at 1 s intervals) ran."""
    target = await rounds(sync) + count

    async def done() -> bool:
        return await rounds(sync) >= target
    await wait_for(done, 30, f"{count} more sync rounds did not run", interval=0.3)


async def test_mm2_rules_with_the_mirror_holding_only_the_acls_it_needs(
        secured: Mapping[str, LocalKafkaCluster], unique: str, tmp_path: Path) -> None:
    src, dst = secured["src"], secured["dst"]
    orders, remote = f"{unique}-orders", f"src.{unique}-orders"
    await ready_topic(src.bootstrap, orders, 1, {"retention.ms": "7200000"})
    await add_acls(src, mirror_acls_source("src", "dst", unique))
    await add_acls(dst, mirror_acls_target("src"))
    await add_acls(src, [
        acl(orders, "User:alice", "READ"),
        acl(orders, "User:bob", "WRITE"),              # never copied
        acl(orders, "User:carol", "ALL"),              # copied as READ
        acl(orders, "User:erin", "DESCRIBE", permission="DENY"),
        acl(f"{unique}-ord", "User:dave", "READ", pattern="PREFIXED"),  # mm2: not copied
    ])
    await produce(src.bootstrap, orders, [Record(f"r{n}".encode()) for n in range(50)])
    group = f"{unique}-readers"
    await commit_offsets(src.bootstrap, group, {(orders, 0): 40})
    # Exactly-once mode and the checkpointer too: their ACLs are in the list as well.
    config = mirror_config(secured, f"{unique}-.*", **{
        "exactly.once.support": "required", "groups": f"{unique}-.*",
        "refresh.groups.interval.seconds": "1", "emit.checkpoints.interval.seconds": "1"})
    sync = configsync(config, tmp_path, "configsync")
    await sync.start()
    try:
        async with replicator(config, tmp_path), checkpointer(config, tmp_path) as checker:
            await sync.wait_serving()

            async def copied() -> bool:
                try:
                    got = await read_all(dst.bootstrap, remote, timeout=10)
                except AssertionError:
                    return False
                return sum(map(len, got.values())) >= 50
            await wait_for(copied, 60, f"{remote} never held the records", interval=0.3)
            expected = {acl(remote, "User:alice", "READ"), acl(remote, "User:carol", "READ"),
                        acl(remote, "User:erin", "DESCRIBE", permission="DENY")}

            async def synced() -> bool:
                return await acls_on(dst, f"src.{unique}") >= expected
            await wait_for(synced, 60, "the source's topic ACLs never reached the target",
                           interval=0.3)
            assert values((await read_all(dst.bootstrap, remote))[0]) == [
                f"r{n}".encode() for n in range(50)]
            # Later rounds change nothing: no WRITE, no prefixed ACL, nothing else.
            await more_rounds(sync, 2)

            async def checkpointed() -> bool:
                try:
                    got = await read_all(dst.bootstrap, "src.checkpoints.internal",
                                         timeout=10)
                except AssertionError:
                    return False
                return any(r.key is not None and group.encode() in r.key
                           for rs in got.values() for r in rs)
            await wait_for(checkpointed, 60, f"no checkpoint of {group} reached the target",
                           interval=0.3)
            log = sync.log_path.read_text() + checker.log_path.read_text()
        assert await acls_on(dst, f"src.{unique}") == expected
        assert "Authorization" not in log and "Traceback" not in log, log[-3000:]
        assert MIRROR_PASSWORD not in log
    finally:
        await sync.close()


async def test_full_mode_copies_prefixed_and_group_acls_and_removes_only_its_own(
        secured: Mapping[str, LocalKafkaCluster], unique: str, tmp_path: Path) -> None:
    src, dst = secured["src"], secured["dst"]
    pay, remote = f"{unique}-pay", f"src.{unique}-pay"
    group = f"{unique}-billing"
    await ready_topic(src.bootstrap, pay, 1)
    await add_acls(src, mirror_acls_source("src", "dst", unique))
    await add_acls(dst, mirror_acls_target("src"))
    alice, frank = acl(pay, "User:alice", "READ"), acl(pay, "User:frank", "READ")
    await add_acls(src, [
        alice, frank,
        acl(f"{unique}-pa", "User:dave", "ALL", pattern="PREFIXED"),  # as READ on src.<prefix>
        acl(f"{unique}-pa", "User:bob", "WRITE", pattern="PREFIXED"),  # never copied
        acl(group, "User:alice", "READ", resource="GROUP"),
    ])
    # The target already had frank's ACL: the mirror did not create it, so it never
    # removes it.
    frank_remote = acl(remote, "User:frank", "READ")
    await add_acls(dst, [frank_remote])
    config = mirror_config(secured, f"{unique}-.*", **{"sync.topic.acls.mode": "full"})
    sync = configsync(config, tmp_path, "full")
    await sync.start()
    try:
        await sync.wait_serving()
        expected = {acl(remote, "User:alice", "READ"), frank_remote,
                    acl(f"src.{unique}-pa", "User:dave", "READ", pattern="PREFIXED"),
                    acl(group, "User:alice", "READ", resource="GROUP")}

        async def synced() -> bool:
            found = await acls_on(dst, f"src.{unique}") | await acls_on(dst, group)
            return found == expected
        await wait_for(synced, 60, "the target's ACLs never matched the source's",
                       interval=0.3)
        # Both source ACLs go: the one the mirror created goes downstream too; the one
        # that was there before stays.
        await remove_acls(src, [alice, frank])

        async def removed() -> bool:
            return acl(remote, "User:alice", "READ") not in await acls_on(dst, remote)
        await wait_for(removed, 60, "an ACL gone from the source stayed on the target",
                       interval=0.3)
        await more_rounds(sync, 2)
        assert await acls_on(dst, remote) == {frank_remote}
        assert acl(group, "User:alice", "READ", resource="GROUP") in await acls_on(dst, group)
        log = sync.log_path.read_text()
        assert "Traceback" not in log and MIRROR_PASSWORD not in log
    finally:
        await sync.close()
