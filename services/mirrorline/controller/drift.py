"""Admin API handlers for drift (topic configs, partitions, ACLs): forwarded to the
config-sync service that announced itself, as offsets and failover are forwarded to the
checkpointer. Kept apart from `controller.admin` so each module stays about one idea.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

from mirrorline import grpcauth
from mirrorline.controller.forwarding import announced_channel, forward
from mirrorline.v1 import drift_pb2, drift_pb2_grpc

if TYPE_CHECKING:
    from mirrorline.controller.admin import ControllerContext

Context = grpc.aio.ServicerContext[Any, Any]


class DriftAdmin:
    """Mixed into `AdminServicer`: GetDrift, ApplyDrift, GetDriftHistory."""

    _c: ControllerContext

    async def _existing_flow(self, name: str, context: Context) -> None:
        await self._c.require_leader(context)
        if "->" not in name:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"flow: {name!r} is not a flow name (source->target)")
        if name not in self._c.state.flows:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"flow {name} does not exist")

    async def _configsync(self, context: Context) -> drift_pb2_grpc.ConfigSyncStub:
        return drift_pb2_grpc.ConfigSyncStub(await announced_channel(
            context, self._c.registry, "configsync", "config-sync service"))

    async def GetDrift(self, request: drift_pb2.DriftRequest,
                       context: Context) -> drift_pb2.DriftPlan:
        await self._existing_flow(request.flow, context)
        stub = await self._configsync(context)
        reply: drift_pb2.DriftPlan = await forward(context, stub.GetDrift, request, 120)
        return reply

    async def ApplyDrift(self, request: drift_pb2.ApplyDriftRequest,
                         context: Context) -> drift_pb2.ApplyDriftResult:
        await self._existing_flow(request.flow, context)
        stub = await self._configsync(context)
        # The history names who asked: the authenticated caller, not what the client says
        # (that is kept alongside when it differs, e.g. the login behind a shared token).
        who = grpcauth.caller()
        said = request.requested_by
        named = f"{who.name} via {who.how}" if who.how != "anonymous" else (said or who.name)
        if said and who.how != "anonymous" and said != who.name:
            named += f", user {said}"
        forwarded = drift_pb2.ApplyDriftRequest(flow=request.flow, requested_by=named)
        reply: drift_pb2.ApplyDriftResult = await forward(context, stub.ApplyDrift,
                                                          forwarded, 300)
        return reply

    async def GetDriftHistory(self, request: drift_pb2.DriftHistoryRequest,
                              context: Context) -> drift_pb2.DriftHistory:
        await self._existing_flow(request.flow, context)
        stub = await self._configsync(context)
        reply: drift_pb2.DriftHistory = await forward(context, stub.GetDriftHistory,
                                                      request, 30)
        return reply
