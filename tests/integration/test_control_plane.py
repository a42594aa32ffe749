"""The controller, its workers and the Admin API, as real processes on real brokers."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import grpc
import pytest
from helpers import Record, aliases, consume_all, create_topic, metric, produce, steady, wait_for
from procs import Deployment, deployment, deployment_config, flow_spec

from mirrorline.controlplane.home import control_topics
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.config import parse_config
from mirrorline.dev.brokers import LocalBroker
from mirrorline.v1 import admin_pb2, flows_pb2

pytestmark = pytest.mark.integration

RUNNING = flows_pb2.PARTITION_STATE_RUNNING
PAUSED = flows_pb2.PARTITION_STATE_PAUSED


async def all_running(d: Deployment, count: int, timeout: float = 40.0) -> dict[tuple[str, int],
                                                                                 str]:
    owners: dict[tuple[str, int], str] = {}

    async def ready() -> bool:
        nonlocal owners
        owners = await d.owners()
        return len(owners) == count
    await wait_for(ready, timeout, f"not all {count} partitions reported running", interval=0.5)
    return owners


async def lag_shown(d: Deployment, source: str, topic: str, behind: int,
                    oldest_sent_ms: int = 0) -> bool:
    """Every partition of the flow is `behind` records behind the source, with a time lag
    (> 0 when behind, 0 when caught up), in the controller's status and in the workers'
    `record_lag` / `record_lag_ms` metrics. The time lag is the age of the oldest record
    not copied, produced at or after `oldest_sent_ms`: it cannot exceed the time since."""
    report = await d.status()
    [summary] = report.flows
    parts = report.partitions
    if (len(parts) != 3 or any(p.lag_records != behind for p in parts)
            or summary.lag_records != 3 * behind):
        return False
    if any((p.lag_ms > 0) != (behind > 0) or p.lag_ms < 0 for p in parts) \
            or (summary.max_lag_ms > 0) != (behind > 0):
        return False
    if oldest_sent_ms:
        assert summary.max_lag_ms <= report.generated_at_ms + 1 - oldest_sent_ms, \
            "the time lag is older than the oldest record not copied"
    texts = [await w.scrape() for w in d.workers.values()]
    scraped_ms = time.time() * 1000
    remote = f"{source}.{topic}"
    for partition in range(3):
        lags = [metric(t, "record_lag", topic=remote, partition=str(partition)) for t in texts]
        ages = [metric(t, "record_lag_ms", topic=remote, partition=str(partition))
                for t in texts]
        if [v for v in lags if v is not None] != [behind]:
            return False
        age = next((v for v in ages if v is not None), None)
        if age is None or (age > 0) != (behind > 0):
            return False
        if oldest_sent_ms:
            assert age <= scraped_ms - oldest_sent_ms
    return True



async def test_a_flow_created_through_the_api_replicates_and_pause_resume_loses_nothing(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    a, b = aliases()
    topic = f"{unique}-api"
    await create_topic(primary.bootstrap, topic, 3)
    await produce(primary.bootstrap, topic, [Record(f"one-{i}".encode(), partition=i % 3)
                                             for i in range(30)])
    async with deployment(deployment_config({a: primary, b: backup}), tmp_path) as d:
        await d.controller("c1")
        admin = d.admin(await d.leader())
        flow = await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(a, b, topic)))
        assert flow.name == f"{a}->{b}" and not flow.paused

        async def unassigned_lag() -> bool:  # no worker yet: the controller measures
            report = await d.status()
            return ([(p.state, p.next_offset, p.lag_records, p.lag_ms > 0)
                     for p in report.partitions]
                    == [(flows_pb2.PARTITION_STATE_UNASSIGNED, 0, 10, True)] * 3
                    and report.flows[0].lag_records == 30
                    and "not assigned yet" in report.flows[0].error)
        await wait_for(unassigned_lag, 20, "unassigned partitions did not show their backlog",
                       interval=0.3)
        for name in ("w1", "w2"):
            await d.worker(name, metrics=True)
        pids = {n: w.proc.pid for n, w in d.workers.items() if w.proc}
        await consume_all(backup.bootstrap, f"{a}.{topic}", expected=30, timeout=40)

        await admin.PauseFlow(admin_pb2.FlowRequest(name=flow.name))

        async def paused() -> bool:
            report = await d.status()
            return (report.flows[0].state == flows_pb2.FLOW_STATE_PAUSED
                    and all(p.state == PAUSED for p in report.partitions)
                    and len(report.partitions) == 3)
        await wait_for(paused, 20, "the flow did not report paused", interval=0.3)
        positions = {p.partition: p.next_offset for p in (await d.status()).partitions}
        assert positions == {0: 10, 1: 10, 2: 10}
        # Nobody fetches a paused partition, yet its lag is what the source holds beyond
        # it: status and metrics show the backlog growing and the oldest record's age.
        first_sent_ms = int(time.time() * 1000)
        for behind in (5, 10):
            await produce(primary.bootstrap, topic, [
                Record(f"two-{i}".encode(), partition=i % 3) for i in range(3 * behind - 15,
                                                                            3 * behind)])
            await wait_for(lambda n=behind: lag_shown(d, a, topic, n, first_sent_ms), 20,
                           f"a paused flow did not show {behind} records of lag", interval=0.3)
        held = await consume_all(backup.bootstrap, f"{a}.{topic}")
        assert sum(len(v) for v in held.values()) == 30  # nothing copied while paused
        assert {p.partition: p.next_offset for p in (await d.status()).partitions} == positions

        await admin.ResumeFlow(admin_pb2.FlowRequest(name=flow.name))
        await wait_for(lambda: lag_shown(d, a, topic, 0), 20,
                       "a resumed flow's lag did not return to 0", interval=0.3)
        mirrored = await consume_all(backup.bootstrap, f"{a}.{topic}", expected=60, timeout=40)
        values = sorted(r.value for rs in mirrored.values() for r in rs)
        assert values == sorted([f"one-{i}".encode() for i in range(30)]
                                + [f"two-{i}".encode() for i in range(30)])
        assert {n: w.proc.pid for n, w in d.workers.items() if w.proc} == pids
        assert all(w.proc and w.proc.returncode is None for w in d.workers.values())


async def test_the_control_log_replays_to_the_same_state_and_the_file_seeds_it_once(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    a, b = aliases()
    config = deployment_config({a: primary, b: backup},
                               {f"{a}->{b}": {"topics": f"{unique}-seeded"}})
    settings = parse_config(config)
    async with deployment(config, tmp_path) as d:
        c1 = await d.controller("c1")
        admin = d.admin(await d.leader())
        flows = await admin.ListFlows(admin_pb2.ListFlowsRequest())
        assert [(f.name, dict(f.spec.properties)) for f in flows.flows] == \
            [(f"{a}->{b}", {"topics": f"{unique}-seeded"})]
        await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(b, a, f"{unique}-back")))
        await admin.PauseFlow(admin_pb2.FlowRequest(name=f"{b}->{a}"))
        await admin.UpdateFlow(admin_pb2.UpdateFlowRequest(name=f"{a}->{b}",
                                                           set={"offset.lag.max": "7"}))

        async def read() -> dict[str, object]:
            reader = ControlLog(consumer_kwargs={"bootstrap_servers": backup.bootstrap},
                                topic=control_topics(settings)[0])
            await reader.start()
            await reader.stop()
            return reader.state.snapshot()

        first, second = await read(), await read()
        assert first == second
        assert list(first["flows"]) == [f"{a}->{b}", f"{b}->{a}"]  # type: ignore[call-overload]

        # A restart with a different file: the log stays the truth, and says so.
        await c1.signal(signal.SIGTERM)
        await c1.wait()
        d.path.write_text(config.replace(f"{unique}-seeded", f"{unique}-changed"))
        c2 = await d.controller("c2")
        await d.leader()
        restarted = await read()
        assert restarted["flows"] == first["flows"] and restarted["owners"] == first["owners"]
        assert restarted["epoch"] == 2 and restarted["leader"][0] == "c2"  # type: ignore[index]
        after = await d.admin("c2").ListFlows(admin_pb2.ListFlowsRequest())
        assert {f.name: dict(f.spec.properties).get("topics") for f in after.flows} == \
            {f"{a}->{b}": f"{unique}-seeded", f"{b}->{a}": f"{unique}-back"}
        log = c2.log_path.read_text()
        assert "the control log is the truth" in log and f"{unique}-changed" in log
        assert "mirrorline admin flows import" in log

        imported = await d.admin("c2").ImportFlows(admin_pb2.ImportFlowsRequest(
            properties=d.path.read_text(), source_name="mm2.properties"))
        assert list(imported.updated) == [f"{a}->{b}"]
        flow = await d.admin("c2").GetFlow(admin_pb2.FlowRequest(name=f"{a}->{b}"))
        assert flow.spec.properties["topics"] == f"{unique}-changed"


async def test_a_standby_takes_over_and_a_deposed_controller_cannot_change_anything(
        primary: LocalBroker, backup: LocalBroker, tmp_path: Path) -> None:
    a, b = aliases()
    async with deployment(deployment_config({a: primary, b: backup}), tmp_path,
                          lease_ms=2000) as d:
        await d.controller("c1")
        assert await d.leader() == "c1"
        await d.controller("c2")
        await d.controllers["c1"].signal(signal.SIGKILL)
        started = asyncio.get_running_loop().time()
        assert await d.leader(timeout=20) == "c2"
        took = asyncio.get_running_loop().time() - started
        assert took < 10, f"takeover took {took:.1f}s with a 2s lease"

        # Freeze the leader; a new standby takes over; thaw it and try to change things.
        await d.controller("c3")
        await d.controllers["c2"].signal(signal.SIGSTOP)
        try:
            async def c3_leads() -> bool:
                try:
                    await d.admin("c3").ListFlows(admin_pb2.ListFlowsRequest(), timeout=2)
                    return True
                except grpc.aio.AioRpcError:
                    return False
            await wait_for(c3_leads, 20, "c3 did not take over from a frozen leader",
                           interval=0.3)
        finally:
            await d.controllers["c2"].signal(signal.SIGCONT)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await d.admin("c2").CreateFlow(admin_pb2.CreateFlowRequest(
                spec=flow_spec(a, b, "from-the-deposed")), timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        flows = await d.admin("c3").ListFlows(admin_pb2.ListFlowsRequest())
        assert not flows.flows
        # The deposed controller now points at the leader.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await d.admin("c2").ListFlows(admin_pb2.ListFlowsRequest(), timeout=5)
        assert dict(err.value.trailing_metadata() or ()).get("leader-address") == \
            f"127.0.0.1:{d.controllers['c3'].grpc_port}"


async def test_workers_come_and_go_without_loss_and_only_what_must_move_moves(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    a, b = aliases()
    topic = f"{unique}-many"
    await create_topic(primary.bootstrap, topic, 12)
    async with deployment(deployment_config({a: primary, b: backup}), tmp_path,
                          lease_ms=2000) as d:
        await d.controller("c1")
        for name in ("w1", "w2", "w3"):
            await d.worker(name)
        admin = d.admin(await d.leader())

        # The workers are separate processes: wait until all three have registered, else
        # the flow is split between those that happen to be up (e.g. [0, 6, 6]).
        async def registered() -> bool:
            reply = await admin.ListWorkers(admin_pb2.ListWorkersRequest(), timeout=5)
            return {w.worker_id for w in reply.workers if w.alive} == {"w1", "w2", "w3"}
        await wait_for(registered, 30, "the three workers did not register", interval=0.3)
        async with steady(primary.bootstrap, topic, 12):
            await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(a, b, topic)))
            before = await all_running(d, 12)
            assert sorted(list(before.values()).count(w) for w in ("w1", "w2", "w3")) == [4, 4, 4]
            victim = next(iter(before.values()))
            await d.workers[victim].signal(signal.SIGKILL)
            killed_at = asyncio.get_running_loop().time()

            async def moved() -> bool:
                owners = await d.owners()
                return len(owners) == 12 and victim not in owners.values()
            await wait_for(moved, 30, "the dead worker's partitions were not reassigned",
                           interval=0.3)
            took = asyncio.get_running_loop().time() - killed_at
            after = await d.owners()
            assert all(after[k] == w for k, w in before.items() if w != victim)
        # Every record produced, including while the worker died, reached the target.
        source = await consume_all(primary.bootstrap, topic)
        expected = {r.value for rs in source.values() for r in rs}
        target = await consume_all(backup.bootstrap, f"{a}.{topic}", expected=len(expected),
                                   timeout=60)
        assert {r.value for rs in target.values() for r in rs} == expected
        assert took < 15, f"reassignment took {took:.1f}s with a 2s lease"

        # A new worker takes a share -- sized by measured load, so about a third -- and
        # nothing else moves: a join moves partitions only to the joining worker, and each
        # goes where its move meant it to, however the measured loads shift meanwhile.
        await d.worker("w4")

        async def w4_has_a_share() -> bool:
            owners = await d.owners()
            return len(owners) == 12 and 2 <= list(owners.values()).count("w4") <= 6
        await wait_for(w4_has_a_share, 40, "w4 got no share", interval=0.5)
        await asyncio.sleep(3)  # a few more rounds: nothing else may move
        joined = await d.owners()
        changed = [k for k in joined if joined[k] != after[k]]
        taken = [k for k in joined if joined[k] == "w4"]
        assert taken and set(changed) == set(taken), f"survivors reshuffled: {changed}"

        # A new topic: its partitions are assigned, nothing else moves.
        other = f"{unique}-more"
        await create_topic(primary.bootstrap, other, 4)
        await admin.UpdateFlow(admin_pb2.UpdateFlowRequest(
            name=f"{a}->{b}", set={"topics": f"{topic}, {other}"}))
        grown = await all_running(d, 16)
        assert {k: w for k, w in grown.items() if k[0] == topic} == joined


async def test_every_admin_rpc_rejects_bad_input_with_its_documented_code(
        primary: LocalBroker, backup: LocalBroker, tmp_path: Path) -> None:
    a, b = aliases()
    async with deployment(deployment_config({a: primary, b: backup}), tmp_path) as d:
        await d.controller("c1")
        admin = d.admin(await d.leader())
        flow = f"{a}->{b}"
        await admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(a, b, "x")))
        Code = grpc.StatusCode
        cases = [
            (admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flows_pb2.FlowSpec(target=b))),
             Code.INVALID_ARGUMENT, "spec.source: is required"),
            (admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(a, "nowhere", "x"))),
             Code.INVALID_ARGUMENT, "spec.target: unknown cluster 'nowhere'"),
            (admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(b, a, "orders, ("))),
             Code.INVALID_ARGUMENT, "spec.properties.topics"),
            (admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(
                b, a, "x", **{"offset.lag.max": "lots"}))),
             Code.INVALID_ARGUMENT, "spec.properties.offset.lag.max"),
            (admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(
                b, a, "x", **{"sasl.jaas.config": "secret"}))),
             Code.INVALID_ARGUMENT, "spec.properties.sasl.jaas.config: is not a flow property"),
            (admin.CreateFlow(admin_pb2.CreateFlowRequest(spec=flow_spec(a, b, "y"))),
             Code.ALREADY_EXISTS, f"flow {flow} already exists"),
            (admin.GetFlow(admin_pb2.FlowRequest(name="b->a")), Code.NOT_FOUND,
             "flow b->a does not exist"),
            (admin.GetFlow(admin_pb2.FlowRequest(name="oops")), Code.INVALID_ARGUMENT,
             "name: 'oops' is not a flow name"),
            (admin.UpdateFlow(admin_pb2.UpdateFlowRequest(name=flow)), Code.INVALID_ARGUMENT,
             "set: nothing to change"),
            (admin.UpdateFlow(admin_pb2.UpdateFlowRequest(name=flow, unset=["offset.lag.max"])),
             Code.INVALID_ARGUMENT, "unset.offset.lag.max: is not set on this flow"),
            (admin.UpdateFlow(admin_pb2.UpdateFlowRequest(name=flow, set={"topics": "["})),
             Code.INVALID_ARGUMENT, "set.topics"),
            (admin.UpdateFlow(admin_pb2.UpdateFlowRequest(name="x->y", set={"topics": "a"})),
             Code.NOT_FOUND, "flow x->y does not exist"),
            (admin.ResumeFlow(admin_pb2.FlowRequest(name=flow)), Code.FAILED_PRECONDITION,
             f"flow {flow} is not paused"),
            (admin.PauseFlow(admin_pb2.FlowRequest(name="x->y")), Code.NOT_FOUND,
             "does not exist"),
            (admin.DeleteFlow(admin_pb2.FlowRequest(name="x->y")), Code.NOT_FOUND,
             "does not exist"),
            (admin.GetStatus(admin_pb2.GetStatusRequest(flow="x->y")), Code.NOT_FOUND,
             "does not exist"),
            (admin.ImportFlows(admin_pb2.ImportFlowsRequest(properties="clusters =",
                                                            source_name="f.properties")),
             Code.INVALID_ARGUMENT, "properties: f.properties: no flow is enabled"),
        ]
        for call, code, message in cases:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert (err.value.code(), message in (err.value.details() or "")) == (code, True), \
                f"expected {code.name} containing {message!r}, got {err.value.code().name}: " \
                f"{err.value.details()}"
        await admin.PauseFlow(admin_pb2.FlowRequest(name=flow))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await admin.PauseFlow(admin_pb2.FlowRequest(name=flow))
        assert err.value.code() == Code.FAILED_PRECONDITION
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in admin.WatchStatus(admin_pb2.WatchStatusRequest(interval_ms=50)):
                pass
        assert err.value.code() == Code.INVALID_ARGUMENT
        assert "interval_ms" in (err.value.details() or "")
        # Nothing invalid reached the log.
        flows = await admin.ListFlows(admin_pb2.ListFlowsRequest())
        assert [(f.name, f.spec.properties["topics"], f.paused) for f in flows.flows] == \
            [(flow, "x", True)]
