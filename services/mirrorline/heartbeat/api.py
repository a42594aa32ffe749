"""The heartbeat service's part of the Admin API: Topology, Canary and Audit.

The heartbeat service serves these three RPCs of `mirrorline.v1.Admin` itself, so
`mirrorline admin --server <heartbeat address> topology` works without a controller; the
controller forwards the same calls here through `mirrorline.v1.Heartbeat`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import grpc

from mirrorline.v1 import admin_pb2_grpc, heartbeat_pb2, heartbeat_pb2_grpc

if TYPE_CHECKING:
    from mirrorline.heartbeat.service import HeartbeatService

Context = grpc.aio.ServicerContext[Any, Any]


class HeartbeatAdminServicer(admin_pb2_grpc.AdminServicer, heartbeat_pb2_grpc.HeartbeatServicer):
    """Registered twice: as the Admin API's three calls (for people, role viewer) and as
    the internal `Heartbeat` service the controller forwards to (its service identity)."""

    def __init__(self, service: HeartbeatService) -> None:
        self._s = service

    async def _refused(self, flow: str, context: Context) -> None:
        """A flow of the control log this service could not run: say why."""
        if flow and flow in self._s.rejected and flow not in self._s.runners:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"flow {flow} cannot be {self._s.verb} here: "
                                f"{self._s.rejected[flow][1]}")

    async def Topology(self, request: heartbeat_pb2.TopologyRequest,
                       context: Context) -> heartbeat_pb2.TopologyReport:
        now = int(time.time() * 1000)
        if request.cluster and request.cluster not in self._s.watchers:
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"cluster: {request.cluster!r} is not in `clusters`")
        report = heartbeat_pb2.TopologyReport(now_ms=now,
                                              stale_after_ms=self._s.stale_after_ms)
        for alias, watcher in sorted(self._s.watchers.items()):
            if request.cluster and alias != request.cluster:
                continue
            view = watcher.view(now)
            report.clusters.append(heartbeat_pb2.ClusterTopology(
                cluster=alias, reachable=view.reachable, error=view.error,
                upstream=view.upstream,
                paths=[heartbeat_pb2.HeartbeatPath(
                    cluster=p.cluster, topic=p.topic, route=list(p.route), hops=p.hops,
                    newest_ms=p.newest_ms or 0,
                    age_ms=-1 if p.age_ms is None else p.age_ms, stale=p.stale,
                    reason=p.reason) for p in view.paths]))
        return report

    async def Canary(self, request: heartbeat_pb2.CanaryRequest,
                     context: Context) -> heartbeat_pb2.CanaryReport:
        await self._refused(request.flow, context)
        if request.flow and request.flow not in self._s.canaries:
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"flow: {request.flow!r} has no canary here")
        report = heartbeat_pb2.CanaryReport()
        for name in sorted(self._s.canaries):
            if request.flow and name != request.flow:
                continue
            report.flows.append(self._s.canary_status(name))
        return report

    async def Audit(self, request: heartbeat_pb2.AuditRequest,
                    context: Context) -> heartbeat_pb2.AuditReport:
        if not request.flow:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "flow: is required")
        await self._refused(request.flow, context)
        if request.flow not in self._s.audited:
            await context.abort(grpc.StatusCode.NOT_FOUND,
                                f"flow: {request.flow!r} is not audited here")
        report = heartbeat_pb2.AuditReport(totals=self._s.audit_totals(request.flow))
        for v in self._s.verdicts.query(request.flow, request.topic, request.since_ms):
            report.windows.append(heartbeat_pb2.AuditWindow(**v))
        return report
