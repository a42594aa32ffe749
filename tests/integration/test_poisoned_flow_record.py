"""A control-log record that decodes but cannot be applied stops nothing (issue 19).

A `FlowUpdated` of the current epoch whose `topics` nests 3 000 groups deep, written
straight to the control log as anyone with write access to the topic could: it made the
controller's reconciliation fail every round for every flow (new topics of every flow
stopped being mirrored, a 3 000-line traceback each time) and ended the control-log
follower of the checkpointer and config sync without a word, for good, while their
health stayed SERVING. Now that flow alone is in error, the reason is said once, every
other flow goes on, and a corrected definition is picked up. Real brokers and real
processes throughout: a controller, a worker, a managed checkpointer and config sync.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import ServiceProcess, deployment, deployment_config, free_port

from mirrorline.configfile import load_config
from mirrorline.controlplane.home import control_topics
from mirrorline.controlplane.log import ControlLog
from mirrorline.dev.brokers import LocalBroker
from mirrorline.v1 import (
    admin_pb2,
    control_pb2,
    drift_pb2,
    drift_pb2_grpc,
    failover_pb2,
    failover_pb2_grpc,
    flows_pb2,
)

pytestmark = pytest.mark.integration

DEEP = "(" * 3000 + "x" + ")" * 3000
FAST = {"refresh.topics.interval.seconds": "1", "refresh.groups.interval.seconds": "1",
        "emit.checkpoints.interval.seconds": "1", "sync.topic.configs.interval.seconds": "2"}


def _managed(kind: str, name: str, config: Path, tmp: Path) -> ServiceProcess:
    port = free_port()
    return ServiceProcess([kind, "--managed", "--config", str(config), "--instance-id", name,
                           "--grpc-port", str(port), "--metrics-port", "-1"], grpc_port=port,
                          log_path=tmp / f"{name}.log")


async def _poison(bootstrap: str, topic: str, flow: tuple[str, str]) -> None:
    """Append the bad FlowUpdated as the leader would: its epoch and its id."""
    reader = ControlLog(consumer_kwargs={"bootstrap_servers": bootstrap}, topic=topic)
    await reader.start()
    try:
        state = reader.state
        properties = dict(state.flows[f"{flow[0]}->{flow[1]}"].properties, topics=DEEP)
        record = control_pb2.ControlRecord(
            epoch=state.epoch, controller_id=state.leader_id,
            flow_updated=control_pb2.FlowUpdated(spec=flows_pb2.FlowSpec(
                source=flow[0], target=flow[1], properties=properties)))
    finally:
        await reader.stop()
    await produce(bootstrap, topic, [Record(record.SerializeToString())])


async def _answer(proc: ServiceProcess, flow: str) -> str:
    """'runs', 'refused' (with the reason) or 'unknown' (not run, no reason given)."""
    stub = failover_pb2_grpc.CheckpointerStub(proc.channel)
    try:
        await stub.TranslateOffsets(failover_pb2.TranslateOffsetsRequest(flow=flow,
                                                                          group="g"), timeout=10)
    except grpc.aio.AioRpcError as exc:
        details = exc.details() or ""
        if "cannot be checkpointed here" in details:
            assert exc.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert "at most 4096" in details and len(details) < 400
            return "refused"
        if "is not checkpointed here" in details:
            return "unknown"
        if exc.code() is grpc.StatusCode.UNAVAILABLE:
            return "starting"
    return "runs"


async def test_a_poisoned_flow_record_stops_that_flow_only_and_is_said_once(
        clusters: Mapping[str, LocalBroker], unique: str, tmp_path: Path) -> None:
    primary, backup = clusters["primary"], clusters["backup"]
    good, bad = "primary->backup", "backup->primary"
    first, second = f"{unique}-orders", f"{unique}-payments"
    await create_topic(primary.bootstrap, first, 1)
    await produce(primary.bootstrap, first, [Record(f"a{i}".encode()) for i in range(10)])
    config = deployment_config(clusters, {good: {"topics": f"{unique}-.*", **FAST},
                                          bad: {"topics": f"{unique}-back", **FAST}})
    async with deployment(config, tmp_path) as d:
        controller = await d.controller()
        await d.worker("w1")
        checkpointer = await d.checkpointer("k1")
        sync = _managed("configsync", "s1", d.path, tmp_path)
        await sync.start()
        try:
            await checkpointer.wait_serving(60)
            await sync.wait_serving(60)
            await consume_all(backup.bootstrap, f"primary.{first}", expected=10)
            await wait_for(lambda: _is(checkpointer, bad, "runs"), 60,
                           "the checkpointer never ran the second flow")

            # Through the Admin API the same pattern is refused, naming field and limit.
            admin = d.admin()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await admin.UpdateFlow(admin_pb2.UpdateFlowRequest(
                    name=bad, set={"topics": "(" * 600 + "x" + ")" * 600}), timeout=30)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "set.topics" in (refused.value.details() or "")
            assert "at most 32 levels" in (refused.value.details() or "")

            # Written straight to the control log, it is that flow's error only.
            topic = control_topics(load_config(str(d.path)))[0]
            await _poison(backup.bootstrap, topic, ("backup", "primary"))

            async def flow_in_error() -> bool:
                flow = await admin.GetFlow(admin_pb2.FlowRequest(name=bad), timeout=10)
                return (flow.state == flows_pb2.FLOW_STATE_ERROR
                        and "at most 4096" in flow.error)
            await wait_for(flow_in_error, 60, "the controller did not put the flow in error")
            await wait_for(lambda: _is(checkpointer, bad, "refused"),
                           60, "the checkpointer does not say why the flow is not run")

            # The other flow goes on: new records and a new topic are mirrored.
            await produce(primary.bootstrap, first, [Record(f"b{i}".encode()) for i in range(5)])
            await create_topic(primary.bootstrap, second, 1)
            await produce(primary.bootstrap, second, [Record(b"p0"), Record(b"p1")])
            await consume_all(backup.bootstrap, f"primary.{first}", expected=15)
            await consume_all(backup.bootstrap, f"primary.{second}", expected=2)
            for proc in (controller, checkpointer, sync):
                assert await proc.health() == health_pb2.HealthCheckResponse.SERVING

            # The followers keep following: a corrected definition runs again.
            await admin.UpdateFlow(admin_pb2.UpdateFlowRequest(
                name=bad, set={"topics": f"{unique}-back"}), timeout=30)
            await wait_for(lambda: _is(checkpointer, bad, "runs"), 60,
                           "the checkpointer stopped following the control log")

            async def synced_again() -> bool:
                status = await drift_pb2_grpc.ConfigSyncStub(sync.channel).GetSyncStatus(
                    drift_pb2.SyncStatusRequest(), timeout=10)
                return bad in {f.flow for f in status.flows}
            await wait_for(synced_again, 60, "config sync stopped following the control log")

            async def flow_fine() -> bool:
                flow = await admin.GetFlow(admin_pb2.FlowRequest(name=bad), timeout=10)
                return flow.state != flows_pb2.FLOW_STATE_ERROR
            await wait_for(flow_fine, 60, "the corrected flow stayed in error")
        finally:
            await sync.close()

    # Said once, in one line each; no traceback anywhere.
    for name in ("c1", "w1", "k1", "s1"):
        text = (tmp_path / f"{name}.log").read_text(errors="replace")
        assert "Traceback" not in text, f"{name}: {text[-3000:]}"
        assert "((((((((((((((((((((((((((((((((((((((((((((" not in text, name
    for name, line in (("c1", f"flow {bad} is not run"),
                       ("k1", f"flow {bad} cannot be checkpointed here"),
                       ("s1", f"flow {bad} cannot be synced here")):
        text = (tmp_path / f"{name}.log").read_text(errors="replace")
        assert text.count(line) == 1, f"{name}: {text[-3000:]}"


async def _is(proc: ServiceProcess, flow: str, answer: str) -> bool:
    return await _answer(proc, flow) == answer
