"""A worker's lease: heartbeats to the controller, and fencing before the lease can run out.

The controller here is a real gRPC server in this process answering (or not) the
Coordinator's Heartbeat; what is under test is the holder's side of the lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from helpers import wait_for

from mirrorline.controlplane.leaseholder import FENCE_AT, LeaseHolder
from mirrorline.v1 import coordinator_pb2, coordinator_pb2_grpc


class Controller(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self) -> None:
        self.answering = True
        self.seen: list[coordinator_pb2.WorkerHeartbeat] = []

    async def Heartbeat(self, request: coordinator_pb2.WorkerHeartbeat,
                        context: Any) -> coordinator_pb2.HeartbeatReply:
        if not self.answering:
            await asyncio.Event().wait()  # a controller that hangs, not one that refuses
        self.seen.append(request)
        return coordinator_pb2.HeartbeatReply(lease_ms=1200, epoch=1)


@pytest.fixture
async def controller() -> AsyncIterator[tuple[Controller, str]]:
    servicer = Controller()
    server = grpc.aio.server()
    coordinator_pb2_grpc.add_CoordinatorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


async def test_a_hanging_controller_fences_the_holder_and_an_answer_lifts_it(
        controller: tuple[Controller, str]) -> None:
    servicer, address = controller
    events: list[str] = []
    holder = LeaseHolder("worker w1", leader_address=lambda: address,
                         beat=lambda: coordinator_pb2.WorkerHeartbeat(worker_id="w1"),
                         on_fence=lambda: events.append("fence"),
                         on_unfence=lambda: events.append("unfence"))
    holder.start()
    try:
        async def learned() -> bool:
            return holder.lease_s == 1.2 and len(servicer.seen) >= 2
        await wait_for(learned, 10, "the lease granted was never learned", interval=0.05)
        # Heartbeats come four times per lease when the lease is short.
        assert holder.interval_s == pytest.approx(0.3)

        servicer.answering = False

        async def fenced() -> bool:
            return holder.fenced
        await wait_for(fenced, 10, "a silent controller never fenced the holder",
                       interval=0.05)
        assert events == ["fence"]

        servicer.answering = True

        async def lifted() -> bool:
            return not holder.fenced
        await wait_for(lifted, 10, "answers again did not lift the fence", interval=0.05)
        assert events == ["fence", "unfence"]
        assert holder.heartbeat_error is None
    finally:
        await holder.stop()


def test_the_fence_falls_before_the_controller_can_let_the_lease_go() -> None:
    """By the clock alone: the last successful heartbeat was sent at t=100 (the controller
    received it later still), the lease is 2 s; the controller reassigns at t>=102."""
    fences: list[float] = []
    holder = LeaseHolder("worker w1", leader_address=lambda: None,
                         beat=coordinator_pb2.WorkerHeartbeat,
                         on_fence=lambda: fences.append(1), on_unfence=lambda: None)
    holder.lease_s = 2.0
    holder._last_ok = 100.0
    holder.check(100.0 + FENCE_AT * 2.0 - 0.01)
    assert not holder.fenced
    holder.check(100.0 + FENCE_AT * 2.0 + 0.01)
    assert holder.fenced and fences == [1]
    holder.check(103.0)  # once fenced, nothing more happens until an answer
    assert fences == [1]


def test_nothing_is_fenced_before_the_first_answer() -> None:
    holder = LeaseHolder("worker w1", leader_address=lambda: None,
                         beat=coordinator_pb2.WorkerHeartbeat,
                         on_fence=lambda: pytest.fail("fenced"), on_unfence=lambda: None)
    holder.check(1e9)
    assert not holder.fenced


def test_a_slow_answer_may_take_until_the_fence_deadline() -> None:
    """On a starved machine a heartbeat answered late still renews the lease: giving up on
    it sooner than the fence deadline fenced healthy workers over and over."""
    holder = LeaseHolder("worker w1", leader_address=lambda: None,
                         beat=coordinator_pb2.WorkerHeartbeat,
                         on_fence=lambda: None, on_unfence=lambda: None)
    holder.lease_s = 2.0
    assert holder._rpc_timeout(0.0) == pytest.approx(1.0)  # no answer yet: half a lease
    holder._last_ok = 100.0
    assert holder._rpc_timeout(100.5) == pytest.approx(FENCE_AT * 2.0 - 0.5)
    assert holder._rpc_timeout(101.4) == pytest.approx(0.5)  # never below half a second


def test_the_watch_sleeps_until_just_past_the_fence_deadline() -> None:
    """Idle cost (issue 22): the watch wakes when a fence could be due, not 20 times a
    second; it still fences at most `WATCH_S` after the deadline."""
    from mirrorline.controlplane.leaseholder import WATCH_IDLE_S, WATCH_S

    holder = LeaseHolder("worker w1", leader_address=lambda: None,
                         beat=coordinator_pb2.WorkerHeartbeat,
                         on_fence=lambda: None, on_unfence=lambda: None)
    holder.lease_s = 6.0
    assert holder.until_check(100.0) == WATCH_IDLE_S  # no answer yet: no deadline
    holder._last_ok = 100.0
    deadline = 100.0 + FENCE_AT * 6.0
    assert holder.until_check(101.0) == pytest.approx(deadline - 101.0 + WATCH_S)
    holder.check(101.0 + holder.until_check(101.0))
    assert holder.fenced
    assert holder.until_check(deadline + 1) == WATCH_IDLE_S  # fenced: answers lift it
