"""Failover and failback on real brokers: planned (drain) and unplanned (now) failover, failover
to a point in time, failover with the source gone, and failback with scraping.

Each test runs its own replicator and checkpointer processes (or a controller-run deployment)
on fresh cluster aliases. What a consumer "reads after failing over" is read by a real
consumer of the group on the target, from the offsets the failover committed.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import grpc
import pytest
from aiokafka import AIOKafkaConsumer
from helpers import (
    PAST_MS,
    Record,
    aliases,
    broker_kind,
    commit_offsets,
    committed_offsets,
    consume_all,
    consume_as_group,
    create_topic,
    produce,
    start_cluster,
    steady,
    stop_cluster,
    wait_for,
)
from procs import (
    admin_cli,
    checkpointer,
    deployment,
    deployment_config,
    mm2_config,
    replicator,
)

from mirrorline.dev.brokers import LocalBroker
from mirrorline.v1 import admin_pb2, failover_pb2, failover_pb2_grpc, flows_pb2

pytestmark = pytest.mark.integration

FAST = {
    "refresh.topics.interval.seconds": "2",
    "emit.checkpoints.interval.seconds": "1",
    "refresh.groups.interval.seconds": "1",
    "admin.timeout.ms": "3000",
}
DRAIN = failover_pb2.FAILOVER_MODE_DRAIN
NOW = failover_pb2.FAILOVER_MODE_NOW


def numbered(topic: str, partitions: int, per_partition: int, start: int = 0) -> list[Record]:
    return [Record(f"{topic}:{p}:{i}".encode(), partition=p)
            for i in range(start, start + per_partition) for p in range(partitions)]


def api(proc: object) -> failover_pb2_grpc.CheckpointerStub:
    return failover_pb2_grpc.CheckpointerStub(proc.channel)  # type: ignore[attr-defined]


async def test_planned_failover_resumes_exactly_where_the_group_stopped(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """The drill: a group reads half a topic on the source; with producers stopped, a drain
    failover commits offsets on the target from which the group reads exactly the rest."""
    topic, group = f"{unique}-drill", f"{unique}-billing"
    a, b = aliases("f", "g")
    await create_topic(primary.bootstrap, topic, 3)
    await produce(primary.bootstrap, topic, numbered(topic, 3, 100))
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {"topics": topic, **FAST}})
    async with replicator(config, tmp_path), checkpointer(config, tmp_path) as chk:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=primary.bootstrap, group_id=group,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    max_poll_records=50, session_timeout_ms=6000)
        await consumer.start()
        read: list[bytes] = []
        try:
            while len(read) < 150:
                for batch in (await consumer.getmany(timeout_ms=500, max_records=10)).values():
                    read.extend(r.value for r in batch)
            await consumer.commit()
        finally:
            await consumer.stop()
        # The last records are written just before the failover: the drain must wait for them.
        await produce(primary.bootstrap, topic, numbered(topic, 3, 400, start=100))
        stub = api(chk)

        async def ready() -> bool:  # the checkpointer has read the group and the map
            try:
                await stub.TranslateOffsets(failover_pb2.TranslateOffsetsRequest(
                    flow=f"{a}->{b}", group=group), timeout=10)
                return True
            except grpc.aio.AioRpcError:
                return False
        await wait_for(ready, 30, "the checkpointer never answered", interval=0.5)
        result = await stub.ExecuteFailover(failover_pb2.ExecuteFailoverRequest(
            flow=f"{a}->{b}", groups=[group], mode=DRAIN, drain_timeout_ms=60_000), timeout=90)
        assert result.committed and all(c.exact and c.max_duplicates == 0
                                        for c in result.committed)
        plan = await stub.PlanFailover(failover_pb2.PlanFailoverRequest(
            flow=f"{a}->{b}", groups=[group]), timeout=30)
        assert plan.safe and plan.replication_lag_records == 0
        assert plan.groups[0].expected_duplicates == 0
        assert plan.groups[0].records_not_mirrored == 0

    source = await consume_all(primary.bootstrap, topic)
    everything = [r.value for rs in source.values() for r in rs]
    rest = await consume_as_group(backup.bootstrap, group, [f"{a}.{topic}"])
    resumed = [r.value for r in rest]
    assert len(resumed) == len(everything) - len(read)  # none repeated ...
    assert set(resumed) | set(read) == set(everything)  # ... and none lost
    assert not set(resumed) & set(read)


async def test_unplanned_failover_loses_nothing_and_repeats_no_more_than_it_says(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """Replication dies while producers go on; the group has read further on the source than
    was mirrored. `now` commits what can be translated and reports the duplicate bound; once
    replication is back, the group on the target has lost nothing and repeats at most that."""
    topic, group = f"{unique}-crash", f"{unique}-orders"
    a, b = aliases("f", "g")
    await create_topic(primary.bootstrap, topic, 2)
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {"topics": topic, **FAST}})
    async with replicator(config, tmp_path) as rep, checkpointer(config, tmp_path) as chk:
        stub = api(chk)
        async with steady(primary.bootstrap, topic, 2, burst=20, pause_s=0.05,
                          value=lambda n: f"live:{n}".encode()):
            await consume_all(backup.bootstrap, f"{a}.{topic}", expected=200, timeout=30)
            await rep.signal(signal.SIGKILL)
            await rep.wait()
            await asyncio.sleep(1)  # the source keeps growing, unmirrored
            ends = {p: len(rs) for p, rs in (await consume_all(primary.bootstrap,
                                                               topic)).items()}
            await commit_offsets(primary.bootstrap, group, {(topic, p): e - 5
                                                            for p, e in ends.items()})
            await asyncio.sleep(1)
            plan = await stub.PlanFailover(failover_pb2.PlanFailoverRequest(
                flow=f"{a}->{b}", groups=[group]), timeout=30)
            result = await stub.ExecuteFailover(failover_pb2.ExecuteFailoverRequest(
                flow=f"{a}->{b}", groups=[group], mode=NOW), timeout=60)
        readiness = plan.groups[0]
        assert not plan.safe and not readiness.safe
        assert readiness.records_not_mirrored > 0 or readiness.expected_duplicates > 0
        assert any("not mirrored yet" in r or "seen twice" in r for r in readiness.reasons)
        bound = sum(c.max_duplicates for c in result.committed)
        # What the plan warned of is what the failover owns up to, partition by partition.
        assert len(result.committed) == 2 and bound == readiness.expected_duplicates
        await rep.start()  # replication comes back and catches up
        await rep.wait_serving()
        source = await consume_all(primary.bootstrap, topic)
        total = sum(len(rs) for rs in source.values())
        await consume_all(backup.bootstrap, f"{a}.{topic}", expected=total, timeout=60)

    consumed = {r.value for p, rs in source.items() for r in rs if r.offset < ends[p] - 5}
    unconsumed = {r.value for p, rs in source.items() for r in rs if r.offset >= ends[p] - 5}
    resumed = [r.value for r in await consume_as_group(backup.bootstrap, group,
                                                       [f"{a}.{topic}"])]
    assert unconsumed <= set(resumed), "records the group had not read were lost"
    repeated = [v for v in resumed if v in consumed]
    assert len(repeated) <= bound, f"{len(repeated)} repeated, bound {bound}"


async def test_failover_to_a_time_starts_every_partition_at_its_first_record_at_or_after_it(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, g1, g2 = f"{unique}-when", f"{unique}-audit", f"{unique}-report"
    a, b = aliases("f", "g")
    t0 = PAST_MS
    cut = t0 + 10_500
    await create_topic(primary.bootstrap, topic, 3)
    records = (
        # partition 0: one record a second
        [Record(f"0:{i}".encode(), partition=0, timestamp_ms=t0 + i * 1000) for i in range(20)]
        # partition 1: out of order around the cut (the first at/after it is not the first
        # whose predecessor is before it)
        + [Record(f"1:{i}".encode(), partition=1, timestamp_ms=t0 + ms)
           for i, ms in enumerate([0, 4000, 12000, 9000, 11000, 15000])]
        # partition 2: everything before the cut -> the log end
        + [Record(f"2:{i}".encode(), partition=2, timestamp_ms=t0 + i) for i in range(5)])
    await produce(primary.bootstrap, topic, records)
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {"topics": topic, **FAST}})
    async with replicator(config, tmp_path), checkpointer(config, tmp_path) as chk:
        target = await consume_all(backup.bootstrap, f"{a}.{topic}", expected=len(records))
        result = await api(chk).FailoverToTime(failover_pb2.FailoverToTimeRequest(
            flow=f"{a}->{b}", groups=[g1, g2], timestamp_ms=cut), timeout=120)
    expected = {}
    for p, rs in target.items():
        expected[(f"{a}.{topic}", p)] = next((r.offset for r in rs if r.timestamp >= cut),
                                             len(rs))
    assert expected == {(f"{a}.{topic}", 0): 11, (f"{a}.{topic}", 1): 2,
                        (f"{a}.{topic}", 2): 5}
    for group in (g1, g2):
        assert await committed_offsets(backup.bootstrap, group, expected) == expected
        assert {(c.target_topic, c.partition): c.offset for c in result.committed
                if c.group == group} == expected
    # Apache Kafka's time index answers right, and is taken. Tansu's answers 0 for every
    # time: the answer was checked and a search over the records used instead.
    index_distrusted = any("time index" in w for w in result.warnings)
    assert index_distrusted == (broker_kind() == "tansu"), list(result.warnings)


async def test_failover_refuses_groups_active_on_the_target_naming_them(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, busy, idle = f"{unique}-busy", f"{unique}-busy-app", f"{unique}-idle-app"
    a, b = aliases("f", "g")
    await create_topic(primary.bootstrap, topic, 1)
    await produce(primary.bootstrap, topic, numbered(topic, 1, 10))
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {"topics": topic, **FAST}})
    async with replicator(config, tmp_path), checkpointer(config, tmp_path) as chk:
        await consume_all(backup.bootstrap, f"{a}.{topic}", expected=10)
        await commit_offsets(primary.bootstrap, busy, {(topic, 0): 4})
        await commit_offsets(primary.bootstrap, idle, {(topic, 0): 4})
        member = AIOKafkaConsumer(f"{a}.{topic}", bootstrap_servers=backup.bootstrap,
                                  group_id=busy, enable_auto_commit=False,
                                  session_timeout_ms=6000)
        await member.start()
        try:
            while not member.assignment():
                await member.getmany(timeout_ms=200)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await api(chk).ExecuteFailover(failover_pb2.ExecuteFailoverRequest(
                    flow=f"{a}->{b}", groups=[idle, busy], mode=NOW), timeout=30)
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert busy in (refused.value.details() or "")
            assert idle not in (refused.value.details() or "")
            plan = await api(chk).PlanFailover(failover_pb2.PlanFailoverRequest(
                flow=f"{a}->{b}", groups=[busy, idle]), timeout=30)
        finally:
            await member.stop()
    busy_plan, idle_plan = plan.groups
    assert busy_plan.active_members_on_target >= 1 and not busy_plan.safe
    assert idle_plan.safe and idle_plan.active_members_on_target == 0
    # Nothing was committed for either group.
    got = await committed_offsets(backup.bootstrap, idle, [(f"{a}.{topic}", 0)])
    assert got == {(f"{a}.{topic}", 0): None}


async def test_with_the_source_gone_groups_fail_over_from_their_checkpoints(
        backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic, group = f"{unique}-lost", f"{unique}-survivor"
    a, b = aliases("f", "g")
    doomed = await start_cluster(a, tmp_path / a)
    try:
        await create_topic(doomed.bootstrap, topic, 2)
        await produce(doomed.bootstrap, topic, numbered(topic, 2, 30))
        config = mm2_config({a: doomed, b: backup}, {f"{a}->{b}": {"topics": topic, **FAST}})
        async with replicator(config, tmp_path), checkpointer(config, tmp_path) as chk:
            await consume_all(backup.bootstrap, f"{a}.{topic}", expected=60)
            await commit_offsets(doomed.bootstrap, group, {(topic, 0): 12, (topic, 1): 30})
            remote = [(f"{a}.{topic}", 0), (f"{a}.{topic}", 1)]

            async def checkpointed() -> bool:
                reply = await api(chk).TranslateOffsets(failover_pb2.TranslateOffsetsRequest(
                    flow=f"{a}->{b}", group=group), timeout=30)
                return len(reply.partitions) == 2
            await wait_for(checkpointed, 30, "no translation", interval=0.5)
            await asyncio.sleep(2)  # a checkpoint round after the commit
            await stop_cluster(doomed)
            # No checkpoint is made without the source: the newest is older than this.
            gone_ms = time.time() * 1000

            translated = await api(chk).TranslateOffsets(failover_pb2.TranslateOffsetsRequest(
                flow=f"{a}->{b}", group=group), timeout=60)
            assert {(p.target_topic, p.partition): (p.target_offset, p.exact)
                    for p in translated.partitions} == {remote[0]: (12, True),
                                                        remote[1]: (30, True)}
            asked_ms = time.time() * 1000
            plan = await api(chk).PlanFailover(failover_pb2.PlanFailoverRequest(
                flow=f"{a}->{b}", groups=[group]), timeout=60)
            assert not plan.source_reachable and not plan.safe
            assert "unreachable" in plan.groups[0].reasons[0]
            assert plan.groups[0].checkpoint_age_ms >= asked_ms - gone_ms > 0, plan
            with pytest.raises(grpc.aio.AioRpcError) as drain:
                await api(chk).ExecuteFailover(failover_pb2.ExecuteFailoverRequest(
                    flow=f"{a}->{b}", groups=[group], mode=DRAIN), timeout=60)
            assert drain.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "mode now" in (drain.value.details() or "")
            result = await api(chk).ExecuteFailover(failover_pb2.ExecuteFailoverRequest(
                flow=f"{a}->{b}", groups=[group], mode=NOW), timeout=60)
            assert any("unreachable" in w for w in result.warnings)
        assert await committed_offsets(backup.bootstrap, group, remote) == {
            remote[0]: 12, remote[1]: 30}
    finally:
        await stop_cluster(doomed)



async def test_failover_and_failback_through_the_admin_api_and_cli(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """The docs' DR drill on a controller-run deployment: fail over with the CLI, then fail
    back, scraping what diverged on the old primary."""
    topic, group = f"{unique}-fb", f"{unique}-fb-app"
    a, b = aliases("f", "g")
    flow = f"{a}->{b}"
    await create_topic(primary.bootstrap, topic, 2)
    await produce(primary.bootstrap, topic, numbered(topic, 2, 15))
    async with deployment(deployment_config({a: primary, b: backup}), tmp_path) as d:
        await d.controller("c1")
        await d.worker("w1")
        await d.checkpointer("k1")
        server = f"127.0.0.1:{d.controllers['c1'].grpc_port}"
        admin = d.admin(await d.leader())
        await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flows_pb2.FlowSpec(
            source=a, target=b, properties={"topics": topic, **FAST})))
        await consume_all(backup.bootstrap, f"{a}.{topic}", expected=30, timeout=40)
        await commit_offsets(primary.bootstrap, group, {(topic, 0): 10, (topic, 1): 15})

        async def planned() -> bool:  # the checkpointer announced itself and knows the group
            code, out, _ = await admin_cli(server, "--output", "json", "failover", "plan", flow,
                                     "--group", group)
            return code == 0 and json.loads(out)["groups"][0].get("safe", False)
        await wait_for(planned, 60, "the failover plan never became safe", interval=1)
        # A mistyped group is not a success with nothing in it.
        code, _, err = await admin_cli(server, "offsets", "translate", flow, "--group",
                                 f"{group}-typo")
        assert code == 1 and "has no committed offsets on the topics" in err
        code, out, err = await admin_cli(server, "failover", "execute", flow, "--group", group,
                                   "--mode", "drain")
        assert code == 0, err
        assert group in out and f"{a}.{topic}" in out
        remote = [(f"{a}.{topic}", 0), (f"{a}.{topic}", 1)]
        assert await committed_offsets(backup.bootstrap, group, remote) == {
            remote[0]: 10, remote[1]: 15}

        # Scraping while the forward flow runs would have it copy the emptied topics again.
        with pytest.raises(grpc.aio.AioRpcError) as running:
            await admin.ExecuteFailback(failover_pb2.ExecuteFailbackRequest(
                flow=flow, scrape=True, confirm=f"scrape {a}"), timeout=60)
        assert running.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"pause flow {flow}" in (running.value.details() or "")

        # The old primary takes writes the new one never sees: they diverge.
        await admin.PauseFlow(admin_pb2.FlowRequest(name=flow))
        await asyncio.sleep(2)
        await produce(primary.bootstrap, topic, numbered(topic, 2, 2, start=15))
        plan = await admin.PlanFailback(failover_pb2.PlanFailbackRequest(flow=flow), timeout=30)
        assert plan.reverse_flow == f"{b}->{a}" and not plan.reverse_exists
        assert sum(p.diverged_records for p in plan.diverged) == 4
        assert group in plan.groups_on_old_primary
        with pytest.raises(grpc.aio.AioRpcError) as unconfirmed:
            await admin.ExecuteFailback(failover_pb2.ExecuteFailbackRequest(
                flow=flow, scrape=True, confirm="yes"), timeout=60)
        assert unconfirmed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert sum(len(rs) for rs in (await consume_all(primary.bootstrap,
                                                        topic)).values()) == 34

        result = await admin.ExecuteFailback(failover_pb2.ExecuteFailbackRequest(
            flow=flow, scrape=True, confirm=plan.confirm), timeout=60)
        assert result.created and list(result.scraped_topics) == [topic]
        assert group in result.deleted_groups
        assert sum(len(rs) for rs in (await consume_all(primary.bootstrap,
                                                        topic)).values()) == 0
        assert set((await committed_offsets(primary.bootstrap, group,
                                            [(topic, 0), (topic, 1)])).values()) == {None}
        flows = await admin.ListFlows(admin_pb2.ListFlowsRequest())
        assert f"{b}->{a}" in {f.name for f in flows.flows}

        async def waiting_says_why() -> bool:  # no topic on the new primary yet
            report = await admin.GetStatus(admin_pb2.GetStatusRequest(flow=f"{b}->{a}"))
            (summary,) = report.flows
            return (summary.state == flows_pb2.FLOW_STATE_STARTING and summary.partitions == 0
                    and f"no topic on {b} matches" in summary.error)
        await wait_for(waiting_says_why, 30, "the waiting reverse flow gave no reason",
                       interval=0.5)
        # The reverse flow mirrors what is written on the new primary back to the old one.
        await create_topic(backup.bootstrap, topic, 2)
        await produce(backup.bootstrap, topic, numbered(topic, 2, 3))
        await consume_all(primary.bootstrap, f"{b}.{topic}", expected=6, timeout=60)
