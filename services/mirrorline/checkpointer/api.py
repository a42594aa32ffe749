"""The checkpointer's gRPC API: offset translation and failover, one flow per request.

The controller's Admin API forwards these calls here, so operators keep one endpoint;
the checkpointer can also be called directly when no controller runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import grpc

from mirrorline.checkpointer.failover import FlowFailover, Refused
from mirrorline.v1 import failover_pb2, failover_pb2_grpc

if TYPE_CHECKING:
    from mirrorline.checkpointer.service import CheckpointerService

Context = grpc.aio.ServicerContext[object, object]
Reply = TypeVar("Reply")


class CheckpointerServicer(failover_pb2_grpc.CheckpointerServicer):
    def __init__(self, service: CheckpointerService) -> None:
        self._service = service

    async def _run(self, flow: str, context: Context,
                   call: Callable[[FlowFailover], Awaitable[Reply]]) -> Reply:
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
        try:
            return await call(FlowFailover(checkpointer))
        except Refused as exc:
            await context.abort(exc.code, str(exc))
            raise AssertionError("unreachable") from exc  # abort raises

    async def TranslateOffsets(self, request: failover_pb2.TranslateOffsetsRequest,
                               context: Context) -> failover_pb2.TranslateOffsetsResponse:
        if not request.group:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "group: is required")
        return await self._run(request.flow, context, lambda f: f.translate(request.group))

    async def PlanFailover(self, request: failover_pb2.PlanFailoverRequest,
                           context: Context) -> failover_pb2.FailoverPlan:
        return await self._run(request.flow, context, lambda f: f.plan(list(request.groups)))

    async def ExecuteFailover(self, request: failover_pb2.ExecuteFailoverRequest,
                              context: Context) -> failover_pb2.FailoverResult:
        return await self._run(request.flow, context, lambda f: f.execute(
            list(dict.fromkeys(request.groups)), request.mode, request.drain_timeout_ms))

    async def FailoverToTime(self, request: failover_pb2.FailoverToTimeRequest,
                             context: Context) -> failover_pb2.FailoverResult:
        return await self._run(request.flow, context, lambda f: f.to_time(
            list(dict.fromkeys(request.groups)), request.timestamp_ms))
