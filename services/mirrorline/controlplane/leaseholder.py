"""Keeping a worker's lease: heartbeats to the leading controller, and fencing in time.

Whatever copies partitions under a controller -- a replicator worker, a Spark executor --
heartbeats to the leader with what it runs, and must stop copying by itself before the
controller can hand its partitions to someone else. The controller does that once a full
lease has passed since the last heartbeat it received; the holder fences itself when
`FENCE_AT` of the lease has passed since the last heartbeat that succeeded was *sent*
(earlier than the controller received it), so its deadline always falls first.

The deadline is watched by the clock, not by the outcome of the next heartbeat: a
heartbeat that hangs until its timeout, then a pause before the next attempt, would
otherwise put the fence seconds after the partitions had already moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import grpc

from mirrorline import grpcsecure
from mirrorline.v1 import coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger(__name__)

#: Heartbeat at most this far apart (and at least four times per lease).
HEARTBEAT_S = 1.0
#: Fence after this share of the lease without a successful heartbeat.
FENCE_AT = 0.75
#: The lease assumed until the controller's first answer says what it is.
DEFAULT_LEASE_S = 6.0
#: How late the fence may come after its deadline: the watch sleeps until the deadline
#: (plus this), not in steps of this (20 wake-ups a second, in every worker, for nothing).
WATCH_S = 0.05
#: How long the watch sleeps while there is no deadline (no answer yet, or fenced).
WATCH_IDLE_S = 0.5
#: The shortest wait for a heartbeat's answer (once fenced, the next one renews).
MIN_RPC_TIMEOUT_S = 0.5


class LeaseHolder:
    """Heartbeats built by `beat` to the leader named in `leader_address()`.

    `on_fence` runs once when the lease may be lost (stop everything, and make sure
    nothing sent before can land later); `on_unfence` once a heartbeat succeeds again.
    """

    def __init__(self, who: str, *, leader_address: Callable[[], str | None],
                 beat: Callable[[], coordinator_pb2.WorkerHeartbeat],
                 on_fence: Callable[[], None], on_unfence: Callable[[], None]) -> None:
        self.who = who
        self._leader_address = leader_address
        self._beat = beat
        self._on_fence = on_fence
        self._on_unfence = on_unfence
        self.fenced = False
        self.lease_s = DEFAULT_LEASE_S
        self.heartbeat_error: str | None = None
        self._last_ok: float | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._channel: grpc.aio.Channel | None = None
        self._channel_address: str | None = None
        self._closing: set[asyncio.Future[None]] = set()

    @property
    def interval_s(self) -> float:
        return min(HEARTBEAT_S, self.lease_s / 4)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._heartbeats(), name=f"{self.who} heartbeats"),
                       asyncio.create_task(self._watch(), name=f"{self.who} fence watch")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*self._closing, return_exceptions=True)
        if self._channel is not None:
            with contextlib.suppress(Exception):
                await self._channel.close()

    async def _heartbeats(self) -> None:
        while True:
            await self.heartbeat_once()
            await asyncio.sleep(self.interval_s)

    async def heartbeat_once(self) -> None:
        address = self._leader_address()
        sent = time.monotonic()
        if not address:
            self.heartbeat_error = "no controller leads yet"
            return
        try:
            stub = coordinator_pb2_grpc.CoordinatorStub(self._channel_to(address))
            reply = await stub.Heartbeat(self._beat(), timeout=self._rpc_timeout(sent))
        except grpc.aio.AioRpcError as exc:
            self.heartbeat_error = (f"heartbeat to {address} failed: {exc.code().name} "
                                    f"{exc.details()}")
            return
        self.lease_s = reply.lease_ms / 1000.0 or self.lease_s
        self._last_ok = sent
        self.heartbeat_error = None
        if self.fenced:
            log.warning("%s: heartbeats succeed again; following the control log", self.who)
            self.fenced = False
            self._on_unfence()

    def _rpc_timeout(self, now: float) -> float:
        """A slow answer still renews the lease, so a heartbeat may take until the fence
        deadline (a starved machine answers late, not never); the watch fences on time
        whatever the heartbeat does meanwhile."""
        if self._last_ok is None:
            return self.lease_s / 2
        deadline = self._last_ok + FENCE_AT * self.lease_s
        return max(MIN_RPC_TIMEOUT_S, deadline - now)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.until_check(time.monotonic()))
            self.check(time.monotonic())

    def until_check(self, now: float) -> float:
        """Seconds until `check` could fence: just past the fence deadline (a heartbeat
        answered meanwhile moves it later, and the watch sleeps again)."""
        if self.fenced or self._last_ok is None:
            return min(WATCH_IDLE_S, FENCE_AT * self.lease_s / 4)
        return max(WATCH_S, self._last_ok + FENCE_AT * self.lease_s - now + WATCH_S)

    def check(self, now: float) -> None:
        """Fence if the lease may run out before another heartbeat could renew it."""
        if self.fenced or self._last_ok is None:
            return
        silent = now - self._last_ok
        if silent > FENCE_AT * self.lease_s:
            log.error("%s: no heartbeat for %.1fs (lease %.1fs; %s); stopping every "
                      "partition until the controller answers again", self.who, silent,
                      self.lease_s, self.heartbeat_error or "the last one has not answered")
            self.fenced = True
            self._on_fence()

    def _channel_to(self, address: str) -> grpc.aio.Channel:
        if self._channel is None or self._channel_address != address:
            if self._channel is not None:
                closing = asyncio.ensure_future(self._channel.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            self._channel = grpcsecure.channel(address)
            self._channel_address = address
        return self._channel
