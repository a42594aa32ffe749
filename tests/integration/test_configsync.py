"""The config-sync service as a real process against the suite's shared clusters.

A hand-set override on a remote topic that its source does not have is drift the sync
deletes; a remote topic with fewer partitions than its source is grown (Apache Kafka) or
reported unavailable (Tansu has no CreatePartitions); ACL sync reports itself unavailable
(the shared clusters run no authorizer; Tansu has only part of the ACL API) while config
sync keeps working. Tansu lists only the configs set on a topic, each flagged as a default.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import grpc
import pytest
from helpers import broker_kind, create_topic, wait_for
from procs import (
    ServiceProcess,
    configsync,
    deployment,
    deployment_config,
    free_port,
    mm2_config,
)

from mirrorline.core.filters import ConfigOp, ConfigSource
from mirrorline.dev.brokers import LocalBroker
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.kafka.syncadmin import alter_topic_configs
from mirrorline.v1 import drift_pb2, drift_pb2_grpc

pytestmark = pytest.mark.integration

FAST = {"sync.topic.configs.interval.seconds": "1", "sync.topic.acls.interval.seconds": "1",
        "refresh.topics.interval.seconds": "1"}


async def overrides(broker: LocalBroker, topic: str) -> dict[str, str | None]:
    """The configs set on `topic` (Kafka: its dynamic topic configs; Tansu lists only
    those, each flagged as a default)."""
    async with ClusterAdmin("check", {"bootstrap_servers": broker.bootstrap}) as admin:
        described = await admin.topic_configs([topic])
    return {e.name: e.value for e in described.get(topic, [])
            if broker_kind() == "tansu" or e.source is ConfigSource.DYNAMIC_TOPIC_CONFIG}


async def set_by_hand(broker: LocalBroker, topic: str, key: str, value: str) -> None:
    """What an operator does with kafka-configs.sh --alter (an incremental SET)."""
    async with ClusterAdmin("hand", {"bootstrap_servers": broker.bootstrap}) as admin:
        errors = await alter_topic_configs(admin, {topic: [ConfigOp(key, "set", value)]}, 10)
    assert errors == {topic: None}
    assert (await overrides(broker, topic)).get(key) == value



async def plan_of(proc: ServiceProcess, flow: str) -> drift_pb2.DriftPlan:
    reply: drift_pb2.DriftPlan = await drift_pb2_grpc.ConfigSyncStub(proc.channel).GetDrift(
        drift_pb2.DriftRequest(flow=flow), timeout=30)
    return reply


def topic_of(plan: drift_pb2.DriftPlan, source_topic: str) -> drift_pb2.TopicDrift | None:
    return next((t for t in plan.topics if t.source_topic == source_topic), None)


async def test_sync_reverts_a_hand_set_override_and_reports_what_the_broker_lacks(
        clusters: Mapping[str, LocalBroker], unique: str, tmp_path: Path) -> None:
    primary, backup = clusters["primary"], clusters["backup"]
    orders, wide, gone = f"{unique}-orders", f"{unique}-wide", f"{unique}-gone"
    await create_topic(primary.bootstrap, orders)
    await create_topic(backup.bootstrap, f"primary.{orders}")
    await create_topic(primary.bootstrap, wide, partitions=3)
    await create_topic(backup.bootstrap, f"primary.{wide}", partitions=1)
    await create_topic(backup.bootstrap, f"primary.{gone}")  # its source never existed
    await set_by_hand(backup, f"primary.{orders}", "retention.ms", "12345")

    flow = "primary->backup"
    proc = configsync(mm2_config(clusters, {flow: {"topics": f"{unique}-.*", **FAST}}),
                      tmp_path, metrics=True)
    await proc.start()
    try:
        await proc.wait_serving()

        async def reverted() -> bool:
            return "retention.ms" not in await overrides(backup, f"primary.{orders}")
        await wait_for(reverted, 60, "the hand-set retention.ms was not reverted")

        plan = await plan_of(proc, flow)
        assert topic_of(plan, orders) is None  # nothing left to do
        kafka = broker_kind() == "kafka"
        if kafka:  # CreatePartitions grows the remote topic to its source's count
            async def grown() -> bool:
                return (await _topics(backup)).get(f"primary.{wide}") == 3
            await wait_for(grown, 30, "the remote topic was not grown to 3 partitions")
        else:
            widened = topic_of(plan, wide)
            assert widened is not None
            p = widened.partitions
            assert (p.source_partitions, p.target_partitions, p.action) == (3, 1, "none")
            assert p.reason.startswith("unavailable on backup:")
            assert "CreatePartitions" in p.reason
        vanished = topic_of(plan, gone)
        assert vanished is not None and "no longer exists" in vanished.problem
        # The shared clusters have no authorizer (Kafka) or only part of the ACL API (Tansu).
        acls = plan.unavailable["acls"]
        if kafka:
            assert acls.startswith("unavailable on primary:") and "SECURITY_DISABLED" in acls
        else:
            assert acls.startswith("unavailable on backup:") and "DeleteAcls" in acls
        assert plan.error == ""

        history = await drift_pb2_grpc.ConfigSyncStub(proc.channel).GetDriftHistory(
            drift_pb2.DriftHistoryRequest(flow=flow), timeout=10)
        changes = [(e.who, e.kind, e.subject, e.ok) for e in history.entries]
        assert ("configsync", "config", f"primary.{orders} retention.ms", True) in changes
        assert all(e.subject != f"primary.{gone}" for e in history.entries)

        status = await drift_pb2_grpc.ConfigSyncStub(proc.channel).GetSyncStatus(
            drift_pb2.SyncStatusRequest(), timeout=10)
        (row,) = status.flows
        assert (row.flow, row.mode, row.started, row.error) == (flow, "apply", True, "")
        if kafka:
            assert "partitions" not in row.unavailable
            assert any(subject.startswith(f"primary.{wide}") and ok
                       for _who, _kind, subject, ok in changes), changes
        else:
            assert row.unavailable["partitions"].startswith("unavailable on backup:")
        assert row.rounds >= 1
        metrics = await proc.scrape()
        assert "configsync_drift_changes" in metrics
        assert "configsync_unavailable_features" in metrics
        assert "configsync_rounds_total" in metrics
        await proc.signal(15)
        assert await proc.wait(15) == 0
    finally:
        await proc.close()


async def test_plan_mode_reports_and_drift_apply_fixes_it_through_the_admin_api(
        clusters: Mapping[str, LocalBroker], unique: str, tmp_path: Path) -> None:
    primary, backup = clusters["primary"], clusters["backup"]
    topic = f"{unique}-orders"
    remote = f"primary.{topic}"
    await create_topic(primary.bootstrap, topic)
    await create_topic(backup.bootstrap, remote)
    await set_by_hand(backup, remote, "retention.ms", "4242")
    flow = "primary->backup"
    config = deployment_config(clusters, {flow: {"topics": f"{unique}-.*", "sync.mode": "plan",
                                                 **FAST}})
    async with deployment(config, tmp_path) as d:
        controller = await d.controller()
        port = free_port()
        sync = ServiceProcess(["configsync", "--managed", "--config", str(d.path),
                               "--instance-id", "s1", "--grpc-port", str(port),
                               "--metrics-port", "-1"], grpc_port=port,
                              log_path=tmp_path / "s1.log")
        await sync.start()
        try:
            await sync.wait_serving()
            stub = d.admin()

            async def reported() -> bool:
                try:
                    plan = await stub.GetDrift(drift_pb2.DriftRequest(flow=flow), timeout=30)
                except grpc.aio.AioRpcError:
                    return False  # not announced yet
                return plan.last_sync_ms > 0 and topic_of(plan, topic) is not None
            await wait_for(reported, 60, "the controller never showed the drift")

            plan = await stub.GetDrift(drift_pb2.DriftRequest(flow=flow, topic=topic),
                                       timeout=30)
            assert plan.mode == "plan" and plan.changes == 1
            drift = topic_of(plan, topic)
            assert drift is not None
            assert [(c.key, c.target_value, c.action) for c in drift.configs] == [
                ("retention.ms", "4242", "delete")]
            # A later round still leaves it: plan mode changes nothing.
            seen = plan.last_sync_ms

            async def another_round() -> bool:
                again = await stub.GetDrift(drift_pb2.DriftRequest(flow=flow), timeout=30)
                return again.last_sync_ms > seen
            await wait_for(another_round, 30, "no further sync round ran")
            assert (await overrides(backup, remote)).get("retention.ms") == "4242"
            # The drift is an event in the flow's history: once, not once per round.
            recorded = await stub.GetDriftHistory(drift_pb2.DriftHistoryRequest(flow=flow),
                                                  timeout=30)
            events = [e for e in recorded.entries
                      if e.kind == "drift" and f"{remote} retention.ms" in e.detail]
            assert len(events) == 1, recorded
            assert "target 4242 -> delete" in events[0].detail

            cli = [sys.executable, "-m", "mirrorline", "admin", "--server",
                   f"127.0.0.1:{controller.grpc_port}", "drift"]
            shown = await _run([*cli, flow, "--topic", topic])
            assert shown[0] == 0, shown
            assert "retention.ms" in shown[1] and "delete" in shown[1]
            applied = await _run([*cli, "apply", flow])
            assert applied[0] == 0, applied
            assert "applied 1 change(s)" in applied[1]
            assert "retention.ms" not in await overrides(backup, remote)
            history = await _run([*cli, "history", flow])
            assert history[0] == 0, history
            assert "operator" in history[1] and f"{remote} retention.ms" in history[1]
            assert "drift" in history[1] and "difference(s) detected" in history[1]
        finally:
            await sync.close()


async def _run(argv: list[str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "MIRRORLINE_SERVER": ""})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_unreachable_cluster_is_retried_in_one_line_and_sigterm_stops_it(
        clusters: Mapping[str, LocalBroker], tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    proc = configsync(mm2_config({"primary": clusters["primary"], "gone": dead},
                                 {"primary->gone": {}}), tmp_path, "unreachable")
    await proc.start()
    try:
        async def complained() -> bool:
            return "cluster 'gone' unreachable" in proc.log_path.read_text()
        await wait_for(complained, 60, "no one-line reason for the unreachable cluster")
        assert await proc.health() != 1  # not SERVING while it cannot work
        status = await drift_pb2_grpc.ConfigSyncStub(proc.channel).GetSyncStatus(
            drift_pb2.SyncStatusRequest(), timeout=10)
        assert not status.flows[0].started
        assert "cluster 'gone' unreachable" in status.flows[0].error
        await proc.signal(15)
        assert await proc.wait(15) == 0
        assert "Traceback" not in proc.log_path.read_text()
    finally:
        await proc.close()



async def test_with_identity_policy_only_topics_seen_replicated_count_as_vanished(
        clusters: Mapping[str, LocalBroker], unique: str, tmp_path: Path) -> None:
    """Without renaming, a target topic carries no trace of its source: only a topic an
    earlier round saw replicated is reported when its source goes; the target's own
    topics are not mistaken for copies."""
    primary, backup = clusters["primary"], clusters["backup"]
    kept, local = f"{unique}-kept", f"{unique}-local"
    await create_topic(primary.bootstrap, kept)
    await create_topic(backup.bootstrap, kept)
    await create_topic(backup.bootstrap, local)  # the target's own topic
    flow = "primary->backup"
    proc = configsync(mm2_config(clusters, {flow: {
        "topics": f"{unique}-.*", "replication.policy.class": "identity", **FAST}}),
        tmp_path, "identity")
    await proc.start()
    try:
        await proc.wait_serving()
        stub = drift_pb2_grpc.ConfigSyncStub(proc.channel)

        async def rounds() -> int:
            status = await stub.GetSyncStatus(drift_pb2.SyncStatusRequest(), timeout=10)
            return int(status.flows[0].rounds)
        await wait_for(lambda: _at_least(rounds, 1), 30, "no sync round ran")
        assert topic_of(await plan_of(proc, flow), local) is None
        async with ClusterAdmin("hand", {"bootstrap_servers": primary.bootstrap}) as admin:
            assert await admin.delete_topics([kept]) == {kept: None}

        async def reported() -> bool:
            drift = topic_of(await plan_of(proc, flow), kept)
            return drift is not None and "no longer exists" in drift.problem
        await wait_for(reported, 30, "the vanished source topic was not reported")
        # Still reported after later rounds: a round does not forget what it reported.
        after = await rounds()
        await wait_for(lambda: _at_least(rounds, after + 2), 30, "the rounds stopped")
        assert await reported(), "the vanished topic was forgotten by a later round"
        assert topic_of(await plan_of(proc, flow), local) is None
        assert kept in await _topics(backup)  # left alone
    finally:
        await proc.close()


async def _at_least(read: Callable[[], Awaitable[int]], value: int) -> bool:
    return await read() >= value


async def _topics(broker: LocalBroker) -> dict[str, int]:
    async with ClusterAdmin("check", {"bootstrap_servers": broker.bootstrap}) as admin:
        return await admin.topic_partitions()
