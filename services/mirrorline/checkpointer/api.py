"""The checkpointer's gRPC API: offset translation and failover, one flow per request.

The controller's Admin API forwards these calls here, so operators keep one endpoint;
the checkpointer can also be called directly when no controller runs.

A failover call's work grows with its groups and partitions, and any viewer may ask for
a plan, so what callers can make the checkpointer do is bounded:

- at most `MAX_FAILOVER_GROUPS` groups per call (INVALID_ARGUMENT beyond);
- at most `MAX_CONCURRENT_PLANS` plans, and `MAX_CONCURRENT_FAILOVERS` failovers, at a
  time; a call beyond is answered RESOURCE_EXHAUSTED at once, not queued;
- the work returns to the event loop every few hundred translations, so health checks,
  checkpointing and other calls go on meanwhile;
- it stops when the caller's deadline passes or the caller cancels (one INFO line says
  so): nobody would read the answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import grpc

from mirrorline.checkpointer.failover import FlowFailover, Refused
from mirrorline.v1 import failover_pb2, failover_pb2_grpc

if TYPE_CHECKING:
    from mirrorline.checkpointer.service import CheckpointerService

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[object, object]
Reply = TypeVar("Reply")

#: Failover plans computed at once by one checkpointer.
MAX_CONCURRENT_PLANS = 2
#: Failovers (execute, to a time) carried out at once by one checkpointer.
MAX_CONCURRENT_FAILOVERS = 2


class _Slots:
    """At most `limit` calls at a time; the next one is refused, not queued."""

    def __init__(self, limit: int, what: str) -> None:
        self.limit = limit
        self.what = what
        self.busy = 0

    def take(self) -> None:
        if self.busy >= self.limit:
            raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"{self.busy} {self.what} already running on this checkpointer (at "
                          f"most {self.limit} at a time); retry when one has finished")
        self.busy += 1

    def give(self) -> None:
        self.busy -= 1


class CheckpointerServicer(failover_pb2_grpc.CheckpointerServicer):
    def __init__(self, service: CheckpointerService) -> None:
        self._service = service
        self._plans = _Slots(MAX_CONCURRENT_PLANS, "failover plans")
        self._failovers = _Slots(MAX_CONCURRENT_FAILOVERS, "failovers")

    async def _run(self, flow: str, context: Context,
                   call: Callable[[FlowFailover], Awaitable[Reply]],
                   slots: _Slots | None = None, what: str = "") -> Reply:
        runner = await self._service.require_runner(flow, context)
        checkpointer = runner.checkpointer
        if checkpointer is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"flow {flow} is not started yet: "
                                f"{runner.error or 'connecting to its target cluster'}")
        assert checkpointer is not None
        if not checkpointer.translator.ready:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"flow {flow}: the offset syncs and the offset map are still "
                                "being read; retry in a few seconds")
        remaining = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        taken = False
        try:
            if slots is not None:
                slots.take()
                taken = True
            return await call(FlowFailover(checkpointer, deadline=deadline))
        except Refused as exc:
            if exc.code == grpc.StatusCode.DEADLINE_EXCEEDED and what:
                log.info("%s of flow %s stopped: the caller's deadline passed", what, flow)
            await context.abort(exc.code, str(exc))
            raise AssertionError("unreachable") from exc  # abort raises
        except asyncio.CancelledError:  # gRPC cancels the call: deadline or caller gone
            if what:
                log.info("%s of flow %s stopped: the caller cancelled the call or its "
                         "deadline passed", what, flow)
            raise
        finally:
            if taken:
                assert slots is not None
                slots.give()

    async def TranslateOffsets(self, request: failover_pb2.TranslateOffsetsRequest,
                               context: Context) -> failover_pb2.TranslateOffsetsResponse:
        if not request.group:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "group: is required")
        return await self._run(request.flow, context, lambda f: f.translate(request.group))

    async def PlanFailover(self, request: failover_pb2.PlanFailoverRequest,
                           context: Context) -> failover_pb2.FailoverPlan:
        return await self._run(request.flow, context, lambda f: f.plan(list(request.groups)),
                               self._plans, "failover plan")

    async def ExecuteFailover(self, request: failover_pb2.ExecuteFailoverRequest,
                              context: Context) -> failover_pb2.FailoverResult:
        return await self._run(request.flow, context, lambda f: f.execute(
            list(dict.fromkeys(request.groups)), request.mode, request.drain_timeout_ms),
            self._failovers, "failover")

    async def FailoverToTime(self, request: failover_pb2.FailoverToTimeRequest,
                             context: Context) -> failover_pb2.FailoverResult:
        return await self._run(request.flow, context, lambda f: f.to_time(
            list(dict.fromkeys(request.groups)), request.timestamp_ms),
            self._failovers, "failover to a time")
