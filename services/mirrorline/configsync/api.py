"""The config-sync service's gRPC API: drift plans, applying them, the history.

The controller's Admin API forwards `mirrorline admin drift ...` here (operators keep one
endpoint); the service can also be called directly when no controller runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

from mirrorline.configsync.convert import history_message, plan_message
from mirrorline.configsync.runner import FlowRunner
from mirrorline.v1 import drift_pb2, drift_pb2_grpc

if TYPE_CHECKING:
    from mirrorline.configsync.service import ConfigSyncService

Context = grpc.aio.ServicerContext[Any, Any]


class ConfigSyncServicer(drift_pb2_grpc.ConfigSyncServicer):
    def __init__(self, service: ConfigSyncService) -> None:
        self._service = service

    async def _runner(self, flow: str, context: Context) -> FlowRunner:
        runner = await self._service.require_runner(flow, context)
        if runner.sync is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"flow {flow} is not started yet: "
                                f"{runner.error or 'connecting to its clusters'}")
        return runner

    async def GetDrift(self, request: drift_pb2.DriftRequest,
                       context: Context) -> drift_pb2.DriftPlan:
        runner = await self._runner(request.flow, context)
        assert runner.sync is not None
        try:
            plan = await runner.sync.plan(topic=request.topic or None)
        except Exception as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"cannot compare {request.flow}: {exc!r}")
            raise
        return plan_message(plan, mode=runner.flow.sync_mode, error=runner.error or "",
                            last_sync_ms=runner.last_round_ms)

    async def ApplyDrift(self, request: drift_pb2.ApplyDriftRequest,
                         context: Context) -> drift_pb2.ApplyDriftResult:
        runner = await self._runner(request.flow, context)
        assert runner.sync is not None
        who = f"operator ({request.requested_by})" if request.requested_by else "operator"
        try:
            plan = await runner.sync.plan()
            applied = await runner.sync.apply(plan, who)
        except Exception as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"cannot apply the plan of {request.flow}: {exc!r}")
            raise
        runner.wake()
        return drift_pb2.ApplyDriftResult(
            plan=plan_message(plan, mode=runner.flow.sync_mode),
            applied=[history_message(e) for e in applied])

    async def GetDriftHistory(self, request: drift_pb2.DriftHistoryRequest,
                              context: Context) -> drift_pb2.DriftHistory:
        runner = await self._runner(request.flow, context)
        assert runner.sync is not None
        if request.limit < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "limit: must not be negative")
        entries = runner.sync.records.history
        if request.limit:
            entries = entries[-request.limit:]
        return drift_pb2.DriftHistory(flow=request.flow,
                                      entries=[history_message(e) for e in entries])

    async def GetSyncStatus(self, request: drift_pb2.SyncStatusRequest,
                            context: Context) -> drift_pb2.SyncStatus:
        reply = drift_pb2.SyncStatus()
        for name, runner in sorted(self._service.runners.items()):
            plan = runner.plan
            reply.flows.add(
                flow=name, mode=runner.flow.sync_mode, started=runner.started,
                error=runner.error or "", last_sync_ms=runner.last_round_ms,
                pending_changes=plan.changes if plan else 0,
                differences=plan.differences if plan else 0,
                unavailable=dict(plan.unavailable) if plan else {}, rounds=runner.rounds)
        return reply
