"""A follower of the control log survives any failure to apply one flow (issue 19).

`FlowService` (the checkpointer's, config sync's and the heartbeat service's follower)
caught only ConfigError: anything else ended the follower without a word, for good,
while health stayed SERVING. The failing runner here is a stand-in for a bug -- since
patterns are bounded no record known to us raises anything but ConfigError -- and the
control log is a replayed `ControlState` (no broker needed to decide what to run).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

import pytest

from mirrorline.core.config import parse_config
from mirrorline.core.control import ControlState
from mirrorline.core.settings import FlowSettings
from mirrorline.flowservice import FlowService
from mirrorline.grpcserver import ServiceServer
from mirrorline.v1 import control_pb2, flows_pb2

CONFIG = """\
clusters = a, b, c
a.bootstrap.servers = 127.0.0.1:1
b.bootstrap.servers = 127.0.0.1:2
c.bootstrap.servers = 127.0.0.1:3
"""


@dataclass
class Runner:
    flow: FlowSettings
    started: bool = False

    def start(self) -> None:
        if self.flow.source == "c":
            raise RecursionError("maximum recursion depth exceeded\n" + "  frame\n" * 3000)
        self.started = True

    async def stop(self) -> None:
        self.started = False


class Service(FlowService[Runner]):
    kind: ClassVar[str] = "testing"
    nothing_to_do: ClassVar[str] = "nothing"
    verb: ClassVar[str] = "tested"

    def new_runner(self, flow: FlowSettings) -> Runner:
        return Runner(flow)

    def add_servicers(self, server: ServiceServer) -> None:
        pass

    def serving(self) -> bool:
        return True


class Log:
    def __init__(self) -> None:
        self.state = ControlState()
        self.failed: str | None = None
        self.offset = 0

    def record(self, **event: object) -> None:
        self.offset += 1
        self.state.apply(self.offset, control_pb2.ControlRecord(
            epoch=1, controller_id="c1", **event))  # type: ignore[arg-type]

    def flow(self, source: str, target: str, topics: str) -> None:
        self.record(flow_created=control_pb2.FlowCreated(spec=flows_pb2.FlowSpec(
            source=source, target=target, properties={"topics": topics})))


async def test_a_flow_that_fails_to_start_is_its_own_error_said_once(
        caplog: pytest.LogCaptureFixture) -> None:
    log = Log()
    log.record(leader_claimed=control_pb2.LeaderClaimed(address="x"))
    log.flow("a", "b", "orders")
    log.flow("c", "b", "payments")
    service = Service(parse_config(CONFIG), managed=True)
    with caplog.at_level(logging.INFO):
        for _ in range(3):  # every round of following
            await service._follow_once(log)  # type: ignore[arg-type]
    assert service.runners["a->b"].started
    assert "c->b" not in service.runners
    reason = service.rejected["c->b"][1]
    assert reason.startswith("RecursionError: maximum recursion depth exceeded")
    assert "\n" not in reason
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert lines == [f"flow c->b cannot be tested here: {reason}"]
    assert not any(r.exc_info for r in caplog.records if r.levelno >= logging.INFO)
    assert service.stopped_following() is None

    # Following goes on: a new flow is run, and the broken one once it is redefined.
    log.flow("b", "a", "more")
    log.record(flow_updated=control_pb2.FlowUpdated(spec=flows_pb2.FlowSpec(
        source="c", target="b", properties={"topics": "other"})))
    await service._follow_once(log)  # type: ignore[arg-type]
    assert service.runners["b->a"].started
    assert "c->b" in service.rejected  # still failing, and said again: it changed
    assert sum("cannot be tested here" in r.getMessage() for r in caplog.records) == 2


async def test_health_reports_a_follower_that_stopped() -> None:
    log = Log()
    service = Service(parse_config(CONFIG), managed=True)
    service._control = log  # type: ignore[assignment]
    assert service.stopped_following() is None
    log.failed = "following the control log stopped: RuntimeError: boom"
    assert service.stopped_following() == log.failed
